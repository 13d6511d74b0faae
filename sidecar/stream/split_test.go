package stream

import (
	"context"
	"errors"
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
)

// bigEnv is a server whose "items" collection keeps pre- and post-images,
// and a job on it that looks up "authors" by a field other than _id (so
// its stream asks for pre-images).
type bigEnv struct {
	srv   *mongotest.Server
	db    *mongo.Database
	items *mongo.Collection
	job   *jobdef.Job
}

func newBigEnv(t *testing.T, version string) *bigEnv {
	t.Helper()
	srv, client := testutil.StartMongo(t, mongotest.Options{Version: version})
	db := client.Database("app")
	ctx := testutil.Context(t, 30*time.Second)
	if err := db.CreateCollection(ctx, "items", options.CreateCollection().SetChangeStreamPreAndPostImages(bson.D{{Key: "enabled", Value: true}})); err != nil {
		t.Fatal(err)
	}
	job := &jobdef.Job{Name: "items", Collection: "items", Lookups: []jobdef.Lookup{{Name: "author", From: "authors", LocalField: "author", ForeignField: "code.id"}}}
	return &bigEnv{srv: srv, db: db, items: db.Collection("items"), job: job}
}

// read takes n events from r, failing on an error.
func read(t *testing.T, ctx context.Context, r *Reader, n int) []bson.Raw {
	t.Helper()
	var evs []bson.Raw
	for len(evs) < n {
		select {
		case it := <-r.Items():
			if it.Err != nil {
				t.Fatalf("after %d events: %v", len(evs), it.Err)
			}
			evs = append(evs, it.Events...)
			r.Taken(it)
		case <-ctx.Done():
			t.Fatalf("%d of %d events read", len(evs), n)
		}
	}
	return evs
}

// big is a string of about n MB.
func big(c string, mb int) string { return c + strings.Repeat("q", mb<<20) }

// A 30 MB update event (a 10 MB post-image, pre-image and updatedFields)
// comes in fragments; the Reader hands over one event with all of them,
// whose _id is the resume token before it, so a stream reopened there
// reads the whole event again.
func TestReaderPutsASplitEventTogether(t *testing.T) {
	ctx := testutil.Context(t, 60*time.Second)
	e := newBigEnv(t, "")
	if _, err := e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: big("a", 10)}}); err != nil {
		t.Fatal(err)
	}
	cs, err := Open(ctx, e.db, e.job, "meilistream", nil, SplitLargeEvents())
	if err != nil {
		t.Fatal(err)
	}
	r := Start(ctx, cs, time.Millisecond, DefaultReadAhead, nil)
	defer r.Close()
	e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}})
	if _, err := e.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: big("b", 10)}}}}); err != nil {
		t.Fatal(err)
	}
	e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 3}})
	evs := read(t, ctx, r, 3)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	up := evs[1]
	if up.Lookup("operationType").StringValue() != "update" || up.Lookup("fullDocument", "v").StringValue() != big("b", 10) ||
		up.Lookup("fullDocumentBeforeChange", "v").StringValue() != big("a", 10) ||
		up.Lookup("updateDescription", "updatedFields", "v").StringValue() != big("b", 10) || up.Lookup("documentKey", "_id").Int32() != 1 {
		t.Fatal("the put-together event is not the update with its images and description")
	}
	if _, err := up.LookupErr("splitEvent"); err == nil {
		t.Fatal("the put-together event still has splitEvent")
	}
	if !bytesEqual(up.Lookup("_id").Document(), evs[0].Lookup("_id").Document()) {
		t.Fatalf("the split event's _id %s is not the token before it %s", up.Lookup("_id"), evs[0].Lookup("_id"))
	}
	r.Close()

	// Reopened at that token: the update again, whole, then the insert.
	cs, err = Open(ctx, e.db, e.job, "meilistream", up.Lookup("_id").Document(), SplitLargeEvents())
	if err != nil {
		t.Fatal(err)
	}
	r = Start(ctx, cs, time.Millisecond, DefaultReadAhead, nil)
	defer r.Close()
	again := read(t, ctx, r, 2)
	if again[0].Lookup("fullDocument", "v").StringValue() != big("b", 10) || again[1].Lookup("documentKey", "_id").Int32() != 3 {
		t.Fatal("the stream reopened at the split event's _id does not read it again")
	}
}

func bytesEqual(a, b bson.Raw) bool { return string(a) == string(b) }

// openAfter returns a stream on the job opened at the token of the insert
// of _id 0, before which the test wrote nothing the stream shows, and
// after which it wrote the large update: the first batch holds its first
// fragment, and the next getMore the second.
func (e *bigEnv) openAfterFirstInsert(t *testing.T, ctx context.Context) (*mongo.ChangeStream, bson.Raw) {
	t.Helper()
	probe, err := Open(ctx, e.db, e.job, "meilistream", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { probe.Close(context.Background()) })
	if _, err := e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	if !probe.Next(ctx) {
		t.Fatal(probe.Err())
	}
	tok := append(bson.Raw(nil), probe.ResumeToken()...)
	if _, err := e.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: big("b", 10)}}}}); err != nil {
		t.Fatal(err)
	}
	return probe, tok
}

// The driver resumes a stream by itself after a resumable error, from the
// token of the last document it returned: inside a split event, a
// fragment's. The fragments after it may be of another split (the
// post-image read again), so the Reader never puts together fragments of
// two cursors: it reports ErrSplitResume, never a lost history, whether
// the resumed stream goes on (the same split) or fails (no longer split
// alike: 280), and a stream reopened before the event reads it whole.
func TestReaderAcrossADriverResumeInsideASplitEvent(t *testing.T) {
	for _, shrink := range []bool{false, true} {
		name := map[bool]string{false: "the same split", true: "the post-image shrank"}[shrink]
		t.Run(name, func(t *testing.T) {
			ctx := testutil.Context(t, 60*time.Second)
			e := newBigEnv(t, "")
			if _, err := e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: big("a", 10)}}); err != nil {
				t.Fatal(err)
			}
			_, tok := e.openAfterFirstInsert(t, ctx)
			// Its first batch holds the first fragment (each is about 10
			// MB, a batch at most 16).
			cs, err := Open(ctx, e.db, e.job, "meilistream", tok, SplitLargeEvents())
			if err != nil {
				t.Fatal(err)
			}
			if shrink {
				if _, err := e.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "small"}}}}); err != nil {
					t.Fatal(err)
				}
			}
			// The getMore for the second fragment fails, resumably.
			e.srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
				{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 91},
					{Key: "errorLabels", Value: bson.A{"ResumableChangeStreamError"}}}}})
			r := Start(ctx, cs, time.Millisecond, DefaultReadAhead, nil)
			defer r.Close()
			select {
			case it := <-r.Items():
				if !errors.Is(it.Err, ErrSplitResume) || IsHistoryLost(it.Err) {
					t.Fatalf("resumed inside a split event: %v (%d events), want ErrSplitResume", it.Err, len(it.Events))
				}
			case <-ctx.Done():
				t.Fatal("nothing read")
			}
			r.Close()
			cs, err = Open(ctx, e.db, e.job, "meilistream", tok, SplitLargeEvents())
			if err != nil {
				t.Fatal(err)
			}
			r = Start(ctx, cs, time.Millisecond, DefaultReadAhead, nil)
			defer r.Close()
			want := big("b", 10)
			if shrink {
				want = "small"
			}
			if ev := read(t, ctx, r, 1)[0]; ev.Lookup("fullDocument", "v").StringValue() != want || ev.Lookup("fullDocumentBeforeChange", "v").StringValue() != big("a", 10) {
				t.Fatal("reopened before the split event: not the update put together")
			}
		})
	}
}

// A Lean stream carries no document, only the fields the job's
// dependencies key on and a mark, and the size of the document left out;
// on a server without $changeStreamSplitLargeEvent it reads an event a
// full stream fails on.
func TestLeanStreamReadsWhatAFullStreamCannotOnAnOldServer(t *testing.T) {
	ctx := testutil.Context(t, 60*time.Second)
	e := newBigEnv(t, "6.0.8")
	if _, err := e.items.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: big("a", 10)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, e.db, e.job, "meilistream", nil, SplitLargeEvents()); !UnknownStage(err) {
		t.Fatalf("the split stage on 6.0.8: %v, want an unknown stage", err)
	}
	full, tok := e.openAfterFirstInsert(t, ctx)
	if full.Next(ctx) || !TooLarge(full.Err()) {
		t.Fatalf("a full stream on the large update: %v, want BSONObjectTooLarge", full.Err())
	}
	authors := e.db.Collection("authors")
	if _, err := authors.InsertOne(ctx, bson.D{{Key: "_id", Value: 7}, {Key: "code", Value: bson.D{{Key: "id", Value: "a7"}, {Key: "x", Value: 1}}}, {Key: "bio", Value: "long"}}); err != nil {
		t.Fatal(err)
	}
	lean, err := Open(ctx, e.db, e.job, "meilistream", tok, Lean())
	if err != nil {
		t.Fatal(err)
	}
	defer lean.Close(ctx)
	want := []string{
		`{"operationType": "update", "documentKey": {"_id": 1}, "fullDocument": {}, "fullDocumentBeforeChange": {}, "fullDocumentSize": ` + "SIZE}",
		`{"operationType": "insert", "documentKey": {"_id": 7}, "fullDocument": {"code": {"id": "a7"}}, "fullDocumentSize": ` + "SIZE}",
	}
	for i, w := range want {
		if !lean.Next(ctx) {
			t.Fatal(lean.Err())
		}
		ev := lean.Current
		if _, err := ev.LookupErr("updateDescription", "updatedFields", "v"); i == 0 && err != nil {
			t.Fatal("the lean update lost its updateDescription")
		}
		got := bson.D{}
		for _, k := range []string{"operationType", "documentKey", "fullDocument", "fullDocumentBeforeChange", LeanSizeField} {
			if v, err := ev.LookupErr(k); err == nil {
				if k == LeanSizeField {
					got = append(got, bson.E{Key: k, Value: "SIZE"})
					if n, ok := v.Int32OK(); !ok || n < 1 {
						t.Fatalf("event %d: %s %v", i, k, v)
					}
					continue
				}
				got = append(got, bson.E{Key: k, Value: v})
			}
		}
		s, _ := bson.MarshalExtJSON(got, false, false)
		norm := strings.NewReplacer(" ", "", `"SIZE"`, "SIZE")
		if norm.Replace(string(s)) != norm.Replace(w) {
			t.Errorf("lean event %d: %s, want %s", i, s, w)
		}
	}
}

// The Reader refuses fragments that do not make one event.
func TestFragmentsOutOfOrderAreRefused(t *testing.T) {
	frag := func(n, of int32) bson.Raw {
		b, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.D{{Key: "_data", Value: "82"}}}, {Key: "splitEvent", Value: bson.D{{Key: "fragment", Value: n}, {Key: "of", Value: of}}}, {Key: fmt.Sprint("x", n), Value: n}})
		return b
	}
	whole, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.D{{Key: "_data", Value: "83"}}}, {Key: "operationType", Value: "insert"}})
	for name, docs := range map[string][]bson.Raw{
		"a fragment without the ones before it": {frag(2, 2)},
		"a fragment skipped":                    {frag(1, 3), frag(3, 3)},
		"another count":                         {frag(1, 2), frag(2, 3)},
		"a whole event inside a split one":      {frag(1, 2), whole},
	} {
		r := &Reader{}
		var err error
		for _, d := range docs {
			if _, err = r.fragment(d, 1); err != nil {
				break
			}
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := &Reader{before: bson.Raw(whole).Lookup("_id").Document()}
	if ev, err := r.fragment(frag(1, 2), 1); ev != nil || err != nil {
		t.Fatalf("fragment 1 of 2: %v, %v", ev, err)
	}
	ev, err := r.fragment(frag(2, 2), 1)
	if err != nil || ev.Lookup("x1").Int32() != 1 || ev.Lookup("x2").Int32() != 2 || ev.Lookup("_id", "_data").StringValue() != "83" {
		t.Fatalf("put together: %v, %v", ev, err)
	}
}
