package mongotest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// collect reads events until one whose documentKey._id is the marker (a
// document every stream of the test is made to see), so a filter that
// wrongly drops events shows as missing ones instead of a hang.
func collect(t *testing.T, cs *mongo.ChangeStream, marker any) []changeEvent {
	t.Helper()
	var out []changeEvent
	for {
		ev := next(t, cs)
		out = append(out, ev)
		if ev.DocumentKey["_id"] == marker {
			return out
		}
		if len(out) > 100 {
			t.Fatalf("no marker event among %d", len(out))
		}
	}
}

func summary(evs []changeEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s %v", ev.OperationType, ev.DocumentKey["_id"]))
	}
	return out
}

// A change stream's own pipeline sees into fullDocument: $match on a path
// inside it, $expr on "$fullDocument.z", $exists on a field of it. (mongod
// applies the user's stages to the event as a document,
// change_stream_filter_helpers.cpp; events without fullDocument, deletes
// here, match only predicates that match a missing field.)
func TestChangeStreamMatchOnFullDocument(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	updateLookup := options.ChangeStream().SetFullDocument(options.UpdateLookup)
	streams := map[string]bson.D{
		"match":  {{Key: "$match", Value: bson.D{{Key: "fullDocument.z", Value: 3}}}},
		"expr":   {{Key: "$match", Value: bson.D{{Key: "$expr", Value: bson.D{{Key: "$eq", Value: bson.A{"$fullDocument.z", 3}}}}}}},
		"nested": {{Key: "$match", Value: bson.D{{Key: "fullDocument.sub.k", Value: bson.D{{Key: "$in", Value: bson.A{"x", "y"}}}}}}},
		"exists": {{Key: "$match", Value: bson.D{{Key: "fullDocument._id", Value: bson.D{{Key: "$exists", Value: true}}}}}},
	}
	want := map[string][]string{
		"match":  {"insert 2", "update 1", "insert 99"},
		"expr":   {"insert 2", "update 1", "insert 99"},
		"nested": {"insert 2", "insert 99"},
		"exists": {"insert 1", "insert 2", "update 1", "insert 99"},
	}
	open := map[string]*mongo.ChangeStream{}
	for name, st := range streams {
		cs, err := coll.Watch(c, mongo.Pipeline{st}, updateLookup)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer cs.Close(c)
		open[name] = cs
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "z", Value: 1}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}, {Key: "z", Value: 3}, {Key: "sub", Value: bson.D{{Key: "k", Value: "y"}}}})
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "z", Value: 3}}}})
	// Deleted before the update's event is read (the streams read after
	// every write): updateLookup finds no document, fullDocument is null,
	// and no filter sees the update.
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "z", Value: 4}}}})
	coll.DeleteOne(c, bson.D{{Key: "_id", Value: 2}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 99}, {Key: "z", Value: 3}, {Key: "sub", Value: bson.D{{Key: "k", Value: "x"}}}})
	for name, cs := range open {
		if got := summary(collect(t, cs, int32(99))); !reflect.DeepEqual(got, want[name]) {
			t.Errorf("%s: events %v, want %v", name, got, want[name])
		}
	}
}

// $project on change events: an inclusion keeps _id (the resume token) and
// what it names; the stream can be resumed from its tokens. Modifying or
// removing _id fails the stream with 280 ChangeStreamFatalError at the
// first such event, as mongod's resumability check does
// (document_source_change_stream_check_resumability / "Encountered an event
// whose _id field, which contains the resume token, was modified by the
// pipeline").
func TestChangeStreamProjectKeepsTheResumeToken(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	project := mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "fullDocument.a", Value: 1}, {Key: "operationType", Value: 1}}}}}
	cs, err := coll.Watch(c, project)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: "kept"}, {Key: "b", Value: "dropped"}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}, {Key: "a", Value: "second"}})
	if !cs.Next(c) {
		t.Fatal(cs.Err())
	}
	if keys, _ := cs.Current.Elements(); len(keys) != 3 {
		t.Fatalf("projected event %v", cs.Current)
	}
	var got struct {
		ID            bson.Raw `bson:"_id"`
		OperationType string   `bson:"operationType"`
		FullDocument  bson.M   `bson:"fullDocument"`
	}
	if err := cs.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.ID == nil || got.OperationType != "insert" || !reflect.DeepEqual(got.FullDocument, bson.M{"a": "kept"}) {
		t.Fatalf("projected event %v", cs.Current)
	}
	resumed, err := coll.Watch(c, project, options.ChangeStream().SetResumeAfter(cs.ResumeToken()))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close(c)
	if !resumed.Next(c) {
		t.Fatal(resumed.Err())
	}
	if err := resumed.Decode(&got); err != nil || !reflect.DeepEqual(got.FullDocument, bson.M{"a": "second"}) {
		t.Fatalf("after resuming: %v %v", resumed.Current, err)
	}

	for name, st := range map[string]bson.D{
		"_id excluded": {{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}}}},
		"_id replaced": {{Key: "$set", Value: bson.D{{Key: "_id", Value: "mine"}}}},
	} {
		cs, err := coll.Watch(c, mongo.Pipeline{st})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		coll.InsertOne(c, bson.D{})
		c2, cancel := context.WithTimeout(c, 10*time.Second)
		ok := cs.Next(c2)
		cancel()
		var se mongo.ServerError
		if ok || !errors.As(cs.Err(), &se) || !se.HasErrorCode(280) || !se.HasErrorLabel("NonResumableChangeStreamError") {
			t.Fatalf("%s: Next %v, err %v", name, ok, cs.Err())
		}
		cs.Close(c)
	}
}

// updateDescription.updatedFields holds the paths the update operators
// named, so a filter on "updateDescription.updatedFields.a" matches an
// update that set a, and not one that set "a.b": that change is the key
// "a.b", which a dotted match path cannot reach (mongod splits match paths
// at dots; change_stream_rewrite_helpers.cpp rewrites only predicates on a
// non-dotted subfield of updatedFields). A filter meant for every change
// under a has to look at the keys ($objectToArray).
func TestChangeStreamMatchOnUpdatedFields(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	topLevel := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$ne", Value: "update"}}}},
		bson.D{{Key: "updateDescription.updatedFields.a", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "updateDescription.removedFields", Value: "a"}},
	}}}}}}
	// Any key that is a or starts with "a.".
	underA := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$ne", Value: "update"}}}},
		bson.D{{Key: "$expr", Value: bson.D{{Key: "$gt", Value: bson.A{
			bson.D{{Key: "$size", Value: bson.D{{Key: "$filter", Value: bson.D{
				{Key: "input", Value: bson.D{{Key: "$objectToArray", Value: "$updateDescription.updatedFields"}}},
				{Key: "cond", Value: bson.D{{Key: "$regexMatch", Value: bson.D{{Key: "input", Value: "$$this.k"}, {Key: "regex", Value: `^a(\.|$)`}}}}},
			}}}}}, 0}}}}},
	}}}}}}
	all, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close(c)
	top, err := coll.Watch(c, topLevel)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close(c)
	under, err := coll.Watch(c, underA)
	if err != nil {
		t.Fatal(err)
	}
	defer under.Close(c)

	set := func(v bson.D) {
		t.Helper()
		if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, v); err != nil {
			t.Fatal(err)
		}
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.D{{Key: "b", Value: 1}}}, {Key: "arr", Value: bson.A{1, 2}}})
	set(bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 2}}}})                                            // 1: "a.b"
	set(bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: 3}}}}}})                   // 2: "a"
	set(bson.D{{Key: "$set", Value: bson.D{{Key: "c", Value: 1}, {Key: "x.y", Value: 1}}}})                      // 3: "c", "x" (created)
	set(bson.D{{Key: "$set", Value: bson.D{{Key: "c", Value: 1}, {Key: "a.b", Value: 4}}}})                      // 4: "a.b" (c unchanged)
	set(bson.D{{Key: "$push", Value: bson.D{{Key: "arr", Value: bson.D{{Key: "$each", Value: bson.A{3, 4}}}}}}}) // 5: "arr.2", "arr.3"
	set(bson.D{{Key: "$pull", Value: bson.D{{Key: "arr", Value: 3}}}})                                           // 6: "arr"
	set(bson.D{{Key: "$unset", Value: bson.D{{Key: "a", Value: ""}}}})                                           // 7: removed a
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 99}})

	var fields []string
	for _, ev := range collect(t, all, int32(99)) {
		if ev.UpdateDescription == nil {
			continue
		}
		keys := []string{}
		for k := range ev.UpdateDescription.UpdatedFields {
			keys = append(keys, k)
		}
		sortStrings(keys)
		fields = append(fields, fmt.Sprint(keys, ev.UpdateDescription.RemovedFields))
	}
	wantFields := []string{"[a.b] []", "[a] []", "[c x] []", "[a.b] []", "[arr.2 arr.3] []", "[arr] []", "[] [a]"}
	if !reflect.DeepEqual(fields, wantFields) {
		t.Fatalf("updated and removed fields %v, want %v", fields, wantFields)
	}

	// The top-level filter sees updates 2 and 7 only; the key filter also
	// 1 and 4.
	count := func(cs *mongo.ChangeStream) int {
		n := 0
		for _, ev := range collect(t, cs, int32(99)) {
			if ev.OperationType == "update" {
				n++
			}
		}
		return n
	}
	if n := count(top); n != 2 {
		t.Errorf("updatedFields.a filter saw %d updates, want 2", n)
	}
	if n := count(under); n != 3 {
		t.Errorf("key filter saw %d updates, want 3 (removedFields is not in its $expr)", n)
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// A database stream filtered on ns.coll with $in, through the driver's
// Database.Watch, as the engine opens one stream for a job's collections.
func TestDatabaseStreamFilteredByCollection(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	cs, err := db.Watch(c, mongo.Pipeline{{{Key: "$match", Value: bson.D{
		{Key: "ns.coll", Value: bson.D{{Key: "$in", Value: bson.A{"books", "authors"}}}},
	}}}}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	db.Collection("other").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	db.Collection("books").InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	db.Collection("other").UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	db.Collection("authors").InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	db.Collection("books").UpdateOne(c, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
	client.Database("elsewhere").Collection("books").InsertOne(c, bson.D{{Key: "_id", Value: 4}})
	db.Collection("books").InsertOne(c, bson.D{{Key: "_id", Value: 99}})
	var got []string
	for _, ev := range collect(t, cs, int32(99)) {
		got = append(got, fmt.Sprintf("%s %v %v", ev.NS["coll"], ev.OperationType, ev.DocumentKey["_id"]))
	}
	want := []string{"books insert 2", "authors insert 3", "books update 2", "books insert 99"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// An event over 16 MB (here an update with its 10 MB post-image and its 10
// MB updatedFields) fails a plain stream with 10334 BSONObjectTooLarge; with
// $changeStreamSplitLargeEvent it comes as fragments, each with its own
// resume token and splitEvent {fragment, of}, and a stream resumed from a
// fragment's token goes on with the next fragment (mongod 7.0,
// change_stream_split_event_helpers.cpp).
func TestChangeStreamSplitsLargeEvents(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	if err := db.CreateCollection(c, "big", options.CreateCollection().SetChangeStreamPreAndPostImages(bson.D{{Key: "enabled", Value: true}})); err != nil {
		t.Fatal(err)
	}
	coll := db.Collection("big")
	big := func(c string) string { return c + strings.Repeat("q", 10<<20) }
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "value", Value: big("a")}}); err != nil {
		t.Fatal(err)
	}
	split := mongo.Pipeline{{{Key: "$changeStreamSplitLargeEvent", Value: bson.D{}}}}
	required := options.ChangeStream().SetFullDocument(options.Required)
	cs, err := coll.Watch(c, split, required)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	plain, err := coll.Watch(c, mongo.Pipeline{}, required)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(c)
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "value", Value: big("b")}}}}); err != nil {
		t.Fatal(err)
	}
	type fragment struct {
		SplitEvent struct {
			Fragment int32 `bson:"fragment"`
			Of       int32 `bson:"of"`
		} `bson:"splitEvent"`
		OperationType     string `bson:"operationType"`
		UpdateDescription bson.M `bson:"updateDescription"`
	}
	read := func(cs *mongo.ChangeStream) fragment {
		t.Helper()
		if !cs.Next(c) {
			t.Fatal(cs.Err())
		}
		var f fragment
		if err := cs.Decode(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f1 := read(cs)
	tok1 := cs.ResumeToken()
	f2 := read(cs)
	if f1.SplitEvent.Fragment != 1 || f1.SplitEvent.Of != 2 || f1.OperationType != "update" || f2.SplitEvent.Fragment != 2 || f2.UpdateDescription == nil {
		t.Fatalf("fragments %+v / %+v", f1.SplitEvent, f2.SplitEvent)
	}
	resumed, err := coll.Watch(c, split, options.ChangeStream().SetFullDocument(options.Required).SetResumeAfter(tok1))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close(c)
	if f := read(resumed); f.SplitEvent.Fragment != 2 {
		t.Fatalf("resumed after fragment 1: %+v", f.SplitEvent)
	}
	c2, cancel := context.WithTimeout(c, 10*time.Second)
	defer cancel()
	var se mongo.ServerError
	if plain.Next(c2) || !errors.As(plain.Err(), &se) || !se.HasErrorCode(10334) {
		t.Fatalf("a stream without the split stage: %v", plain.Err())
	}
}

// With showExpandedEvents an update whose paths hold a numeric field name
// carries disambiguatedPaths, the path's components with array indices as
// integers (mongod 6.1+; the change-streams specification's
// change-streams-disambiguatedPaths tests). A stage mongod does not know is
// 40324, as in any pipeline.
func TestChangeStreamDisambiguatedPaths(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.Watch(c, mongo.Pipeline{{{Key: "$unsupported", Value: 1}}}); err == nil || !strings.Contains(err.Error(), "40324") && !strings.Contains(err.Error(), "Unrecognized pipeline stage") {
		t.Fatalf("an unknown stage: %v", err)
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.D{{Key: "1", Value: 1}}}, {Key: "b", Value: bson.A{bson.D{{Key: "1", Value: 1}}}}, {Key: "n", Value: 0}})
	expanded, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetShowExpandedEvents(true))
	if err != nil {
		t.Fatal(err)
	}
	defer expanded.Close(c)
	plain, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(c)
	for _, u := range []bson.D{
		{{Key: "$set", Value: bson.D{{Key: "a.1", Value: 2}}}},
		{{Key: "$set", Value: bson.D{{Key: "b.0.1", Value: 2}}}},
		{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}},
	} {
		if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, u); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`{"a.1": ["a","1"]}`, `{"b.0.1": ["b",{"$numberInt":"0"},"1"]}`, `<nil>`}
	for i, w := range want {
		if !expanded.Next(c) {
			t.Fatal(expanded.Err())
		}
		dp := expanded.Current.Lookup("updateDescription", "disambiguatedPaths")
		got := "<nil>"
		if dp.Type != 0 {
			got = strings.ReplaceAll(dp.String(), " ", "")
		}
		if strings.ReplaceAll(w, " ", "") != got {
			t.Errorf("update %d: disambiguatedPaths %s, want %s", i, got, w)
		}
		if !plain.Next(c) {
			t.Fatal(plain.Err())
		}
		if plain.Current.Lookup("updateDescription", "disambiguatedPaths").Type != 0 {
			t.Errorf("update %d: disambiguatedPaths without showExpandedEvents", i)
		}
	}
}

// A pipeline update's updateDescription is read from its delta as mongod
// computes it (doc_diff computeOplogDiff, an array diff when smaller than
// the array): a shortened array is truncatedArrays {field, newSize}, a
// changed element its own path (the change-streams specification's "Test
// array truncation").
func TestChangeStreamPipelineUpdateArrays(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	// The text makes the document large enough that a small delta is
	// logged rather than the whole document (a replace event).
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "array", Value: bson.A{"foo", bson.D{{Key: "a", Value: "bar"}}, 1, 2, 3}},
		{Key: "text", Value: strings.Repeat("x", 200)}})
	foo := strings.Repeat("f", 100)
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "array.0", Value: foo}}}})
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	for _, u := range []bson.A{
		{bson.D{{Key: "$set", Value: bson.D{{Key: "array", Value: bson.A{foo, bson.D{{Key: "a", Value: "bar"}}}}}}}},
		// The long first element makes an element's diff smaller than
		// the array, so the array is diffed, not logged whole.
		{bson.D{{Key: "$set", Value: bson.D{{Key: "array", Value: bson.A{foo, bson.D{{Key: "a", Value: "baz"}}}}}}}},
	} {
		if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, u); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{
		`{"updatedFields": {},"removedFields": [],"truncatedArrays": [{"field": "array","newSize": {"$numberInt":"2"}}]}`,
		`{"updatedFields": {"array.1.a": "baz"},"removedFields": [],"truncatedArrays": []}`,
	} {
		if !cs.Next(c) {
			t.Fatal(cs.Err())
		}
		got := cs.Current.Lookup("updateDescription").String()
		if cs.Current.Lookup("operationType").StringValue() != "update" || strings.ReplaceAll(got, " ", "") != strings.ReplaceAll(want, " ", "") {
			t.Fatalf("update %d: %s %s, want an update with %s", i, cs.Current.Lookup("operationType"), got, want)
		}
	}
}
