package stream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/stream"
)

// next reads the stream's events until the insert of _id 99 (the end
// marker), as "op key1,key2 [removed] fullDocument".
func next(t *testing.T, ctx context.Context, cs *mongo.ChangeStream) []string {
	t.Helper()
	var out []string
	for cs.Next(ctx) {
		var ev struct {
			Op string `bson:"operationType"`
			NS struct {
				Coll string `bson:"coll"`
			} `bson:"ns"`
			Key bson.Raw `bson:"documentKey"`
			UD  *struct {
				Updated bson.D   `bson:"updatedFields"`
				Removed []string `bson:"removedFields"`
			} `bson:"updateDescription"`
			Full bson.Raw `bson:"fullDocument"`
		}
		if err := cs.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Current.LookupErr("_id", "_data"); err != nil {
			t.Fatalf("an event without its resume token: %s", cs.Current)
		}
		if n, ok := ev.Key.Lookup("_id").Int32OK(); ok && ev.Op == "insert" && n == 99 {
			return out
		}
		s := ev.NS.Coll + " " + ev.Op
		if ev.UD != nil {
			var keys []string
			for _, e := range ev.UD.Updated {
				keys = append(keys, e.Key)
			}
			s += " " + strings.Join(keys, ",") + fmt.Sprint(ev.UD.Removed)
		}
		if full, err := cs.Current.LookupErr("fullDocument"); err == nil && full.Type != bson.TypeNull {
			s += " " + ev.Full.String()
		}
		out = append(out, s)
	}
	t.Fatalf("stream ended: %v", cs.Err())
	return nil
}

func TestFieldsDropUpdatesTouchingNoneOfThemAndTrimDocuments(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	coll, state := db.Collection("items"), db.Collection("meilistream")
	job := &jobdef.Job{Name: "items", Collection: "items", Fields: []string{"a", "tags", "x+y"}}
	cs, err := db.Watch(ctx, stream.Pipeline(job, "meilistream"), options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	set := func(c *mongo.Collection, id any, u bson.D) {
		t.Helper()
		if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, u); err != nil {
			t.Fatal(err)
		}
	}
	ins := func(c *mongo.Collection, d bson.D) {
		t.Helper()
		if _, err := c.InsertOne(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	ins(coll, bson.D{{Key: "_id", Value: 1}, {Key: "z", Value: 0}, {Key: "a", Value: bson.D{{Key: "b", Value: 1}}}, {Key: "tags", Value: bson.A{"t"}}, {Key: "views", Value: 0}})
	set(coll, 1, bson.D{{Key: "$inc", Value: bson.D{{Key: "views", Value: 1}}}})                                             // dropped
	set(coll, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 2}}}})                                               // "a.b"
	set(coll, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "ab", Value: 1}, {Key: "xy", Value: 1}}}})                         // dropped: neither is a
	set(coll, 1, bson.D{{Key: "$push", Value: bson.D{{Key: "tags", Value: "u"}}}})                                           // "tags.1"
	set(coll, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "x+y", Value: 1}}}})                                               // a name with a regexp's characters
	set(coll, 1, bson.D{{Key: "$unset", Value: bson.D{{Key: "views", Value: ""}}}})                                          // dropped
	set(coll, 1, bson.D{{Key: "$unset", Value: bson.D{{Key: "a", Value: ""}}}})                                              // removed a
	set(state, bson.D{{Key: "watermark", Value: "items"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "mark", Value: "m1"}}}}) // no document: no event
	ins(state, bson.D{{Key: "_id", Value: bson.D{{Key: "watermark", Value: "items"}}}, {Key: "mark", Value: "m0"}})
	set(state, bson.D{{Key: "watermark", Value: "items"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "mark", Value: "m2"}}}})
	if _, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "views", Value: 9}, {Key: "tags", Value: bson.A{}}}); err != nil {
		t.Fatal(err)
	}
	ins(coll, bson.D{{Key: "_id", Value: 2}})
	set(coll, 2, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}) // looked up after the delete: null
	if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	ins(coll, bson.D{{Key: "_id", Value: 99}})
	// Updates are looked up when read: by then 1 is as replaced.
	now := `{"_id": {"$numberInt":"1"},"tags": []}`
	want := []string{
		`items insert {"_id": {"$numberInt":"1"},"a": {"b": {"$numberInt":"1"}},"tags": ["t"]}`,
		`items update a.b[] ` + now,
		`items update tags.1[] ` + now,
		`items update x+y[] ` + now,
		`items update [a] ` + now,
		`meilistream insert {"_id": {"watermark": "items"},"mark": "m0"}`,
		`meilistream update mark[] {"_id": {"watermark": "items"},"mark": "m2"}`,
		`items replace ` + now,
		`items insert {"_id": {"$numberInt":"2"}}`,
		`items update a[]`,
		`items delete`,
	}
	got := next(t, ctx, cs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFieldsAloneIdDropsEveryUpdate(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	coll := db.Collection("items")
	job := &jobdef.Job{Name: "items", Collection: "items", Fields: []string{}}
	cs, err := db.Watch(ctx, stream.Pipeline(job, "meilistream"), options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 2}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 99}}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ctx, cs); len(got) != 1 || got[0] != `items insert {"_id": {"$numberInt":"1"}}` {
		t.Fatalf("events %q", got)
	}
	if p := stream.Projection(job); len(p) != 1 || p[0].Key != "_id" {
		t.Fatalf("projection %v", p)
	}
	if p := stream.Projection(&jobdef.Job{}); p != nil {
		t.Fatalf("projection without fields %v", p)
	}
}

// A stream whose events are all dropped still moves on: the token after an
// empty batch is past them, and a stream resumed from it sees what comes
// next and nothing before.
func TestAStreamOfDroppedUpdatesStillMovesItsResumeTokenOn(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	coll := db.Collection("items")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	job := &jobdef.Job{Name: "items", Collection: "items", Fields: []string{"a"}}
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(50 * time.Millisecond)
	cs, err := db.Watch(ctx, stream.Pipeline(job, "meilistream"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	first := cs.ResumeToken()
	for i := 0; i < 20; i++ {
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "views", Value: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first TryNext takes the (empty) first batch of the open; the
	// next ones each make a getMore.
	moved := first
	for i := 0; i < 5 && moved.String() == first.String(); i++ {
		if cs.TryNext(ctx) {
			t.Fatalf("a dropped update came through: %s", cs.Current)
		}
		if cs.Err() != nil {
			t.Fatal(cs.Err())
		}
		moved = cs.ResumeToken()
	}
	if moved.String() == first.String() {
		t.Fatalf("the resume token did not move past the dropped updates: %s", moved)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 2}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 99}}); err != nil {
		t.Fatal(err)
	}
	again, err := db.Watch(ctx, stream.Pipeline(job, "meilistream"), opts.SetResumeAfter(moved))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	if got := next(t, ctx, again); len(got) != 1 || !strings.HasPrefix(got[0], "items update a[]") {
		t.Fatalf("resumed from the moved token: %q", got)
	}
}
