package mongotest_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
)

var splitStage = mongo.Pipeline{{{Key: "$changeStreamSplitLargeEvent", Value: bson.D{}}}}

// serverCode is the code of a server error, 0 for anything else.
func serverCode(err error) int {
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range []int{280, 10334, 7182500, 40324} {
			if se.HasErrorCode(c) {
				return c
			}
		}
		return -1
	}
	return 0
}

// mongod builds change events up to BSONObjMaxInternalSize (16 MB + 16
// KB): an event a little over 16 MB comes whole on a plain stream;
// $changeStreamSplitLargeEvent splits events over 16 MB + 8 KB
// (kBSONObjMaxChangeEventSize), into fragments ordered by the size of
// their fields (the small ones, which say what the event is, first), none
// larger than the limit less the token.
func TestChangeStreamLargeEventLimits(t *testing.T) {
	_, client := start(t)
	c := largeCtx(t)
	coll := client.Database("db").Collection("big")
	// A document of 16 MB less 100 bytes, then a $set of a 12 KB field
	// it already holds: its update event (post-image and updatedFields)
	// is about 16 MB + 12 KB.
	pad := strings.Repeat("p", 16<<20-100-12<<10-40)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "pad", Value: pad}, {Key: "x", Value: strings.Repeat("a", 12<<10)}}); err != nil {
		t.Fatal(err)
	}
	lookup := options.ChangeStream().SetFullDocument(options.UpdateLookup)
	plain, err := coll.Watch(c, mongo.Pipeline{}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(c)
	split, err := coll.Watch(c, splitStage, lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer split.Close(c)
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: strings.Repeat("b", 12<<10)}}}}); err != nil {
		t.Fatal(err)
	}
	if !plain.Next(c) {
		t.Fatalf("an event of 16 MB + 12 KB on a plain stream: %v", plain.Err())
	}
	if n := len(plain.Current); n <= 16<<20+8<<10 || n > 16<<20+16<<10 {
		t.Fatalf("the test's event is %d bytes, want between 16 MB + 8 KB and 16 MB + 16 KB", n)
	}
	var frags []bson.Raw
	for len(frags) < 2 && split.Next(c) {
		frags = append(frags, append(bson.Raw(nil), split.Current...))
	}
	if len(frags) != 2 {
		t.Fatalf("%d fragments: %v", len(frags), split.Err())
	}
	first, _ := frags[0].Elements()
	var keys []string
	for _, e := range first {
		keys = append(keys, e.Key())
	}
	if strings.Join(keys[:2], ",") != "_id,splitEvent" || frags[0].Lookup("operationType").StringValue() != "update" ||
		frags[0].Lookup("documentKey", "_id").Int32() != 1 {
		t.Fatalf("the first fragment holds %v: want _id, splitEvent, then the small fields", keys)
	}
	for i, f := range frags {
		tok := f.Lookup("_id").Document()
		if len(f) > 16<<20+16<<10-8<<10-len(tok) {
			t.Errorf("fragment %d is %d bytes: over the limit less its token", i+1, len(f))
		}
	}
}

// A batch holds events while it stays within 16 MB (its first event
// always): three 6 MB events come in two getMores.
func TestChangeStreamBatchesStayWithin16MB(t *testing.T) {
	_, client := start(t)
	c := largeCtx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	for i := range 3 {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: i}, {Key: "v", Value: strings.Repeat("v", 6<<20)}}); err != nil {
			t.Fatal(err)
		}
	}
	if !cs.Next(c) {
		t.Fatal(cs.Err())
	}
	if n := cs.RemainingBatchLength(); n != 1 {
		t.Fatalf("the first batch holds %d events, want 2 (12 MB)", n+1)
	}
}

// Resuming inside a split event works only where the stream splits it
// again the same way: an event that no longer needs splitting (its
// looked-up post-image shrank), or fewer fragments than the token's, is
// 280; a field too large for any fragment is 7182500 with the split stage
// and 10334 without (jstests/change_streams/split_large_event.js).
func TestChangeStreamSplitResumeAndRefusals(t *testing.T) {
	_, client := start(t)
	c := largeCtx(t)
	coll := client.Database("db").Collection("big")
	big := strings.Repeat("q", 10<<20)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: big}}); err != nil {
		t.Fatal(err)
	}
	lookup := options.ChangeStream().SetFullDocument(options.UpdateLookup)
	cs, err := coll.Watch(c, splitStage, lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "x" + big}}}}); err != nil {
		t.Fatal(err)
	}
	if !cs.Next(c) {
		t.Fatal(cs.Err())
	}
	tok1 := append(bson.Raw(nil), cs.ResumeToken()...)
	if of := cs.Current.Lookup("splitEvent", "of").Int32(); of != 2 {
		t.Fatalf("split into %d fragments, want 2", of)
	}
	// Resumed from fragment 1 while the post-image is as large: fragment 2.
	resumed, err := coll.Watch(c, splitStage, options.ChangeStream().SetFullDocument(options.UpdateLookup).SetResumeAfter(tok1))
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Next(c) || resumed.Current.Lookup("splitEvent", "fragment").Int32() != 2 {
		t.Fatalf("resumed after fragment 1: %v %v", resumed.Current, resumed.Err())
	}
	resumed.Close(c)
	// The post-image shrank since: the event is no longer split.
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "small"}}}}); err != nil {
		t.Fatal(err)
	}
	shrunk, err := coll.Watch(c, splitStage, options.ChangeStream().SetFullDocument(options.UpdateLookup).SetResumeAfter(tok1))
	if err == nil {
		shrunk.Next(c)
		err = shrunk.Err()
		shrunk.Close(c)
	}
	if serverCode(err) != 280 {
		t.Fatalf("resumed inside an event that is no longer split: %v, want 280", err)
	}
	// Without the split stage a fragment's token is refused at once.
	if _, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok1)); serverCode(err) != 280 {
		t.Fatalf("a fragment's token without the split stage: %v, want 280", err)
	}

	// One field of 20 MB (two copies of the 10 MB value, made by the
	// stream's own stage): no fragment can hold it.
	double := bson.D{{Key: "$addFields", Value: bson.D{{Key: "twice", Value: bson.D{{Key: "x", Value: "$fullDocument.a"}, {Key: "y", Value: "$fullDocument.a"}}}}}}
	for i, tc := range []struct {
		pipeline mongo.Pipeline
		code     int
	}{
		{mongo.Pipeline{double, splitStage[0]}, 7182500},
		{mongo.Pipeline{double}, 10334},
	} {
		s, err := coll.Watch(c, tc.pipeline)
		if err != nil {
			t.Fatal(err)
		}
		// A replacement by a different document (an equal one is no
		// change, and no event).
		if _, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "a", Value: big}, {Key: "i", Value: i}}); err != nil {
			t.Fatal(err)
		}
		s.Next(c)
		if serverCode(s.Err()) != tc.code {
			t.Errorf("a 20 MB field, pipeline %v: %v, want %d", len(tc.pipeline), s.Err(), tc.code)
		}
		s.Close(c)
	}
}

// $changeStreamSplitLargeEvent exists from 7.0 and 6.0.9: before, it is an
// unknown stage; buildInfo and hello say which version answers.
func TestVersionDecidesTheSplitStage(t *testing.T) {
	for _, tc := range []struct {
		version string
		wire    int32
		code    int
	}{
		{"6.0.8", 17, 40324},
		{"6.0.9", 17, 0},
		{"7.0.2", 21, 0},
		{"8.0.0", 25, 0},
	} {
		t.Run(tc.version, func(t *testing.T) {
			_, client := start(t, mongotest.Options{Version: tc.version})
			c := ctx(t)
			var info struct {
				Version string `bson:"version"`
			}
			if err := client.Database("admin").RunCommand(c, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil || !strings.HasPrefix(info.Version, tc.version) {
				t.Fatalf("buildInfo version %q, %v", info.Version, err)
			}
			var hello struct {
				Wire int32 `bson:"maxWireVersion"`
			}
			if err := client.Database("admin").RunCommand(c, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil || hello.Wire != tc.wire {
				t.Fatalf("maxWireVersion %d, %v", hello.Wire, err)
			}
			cs, err := client.Database("db").Collection("c").Watch(c, splitStage)
			if serverCode(err) != tc.code {
				t.Fatalf("the split stage: %v, want code %d", err, tc.code)
			}
			if err == nil {
				cs.Close(c)
			}
		})
	}
	if _, err := mongotest.Start(mongotest.Options{Version: "5.0.0"}); err == nil {
		t.Fatal("a version the server cannot answer as was accepted")
	}
}
