package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The reindex and follow keep the documents the driver returns without
// copying them: the driver reads each reply into a buffer of its own and
// never writes to it again. These tests pin that for the driver in go.mod.

// TestReadPartKeepsDocumentsValidAcrossBatches pins what readPart relies
// on to skip copying: a document the driver returned is unchanged after
// the cursor has read later batches (the driver reads each reply into a
// buffer of its own). A driver that reused its buffers would overwrite the
// first parts' documents with later ones, which differ in length and
// content.
func TestReadPartKeepsDocumentsValidAcrossBatches(t *testing.T) {
	ctx, e, _ := stateEngine(t)
	coll := e.source.Collection("items")
	const n, size = 100, 7
	var want []bson.Raw
	var docs []any
	for i := range n {
		d := bson.D{{Key: "_id", Value: int64(i)}, {Key: "text", Value: strings.Repeat(string(rune('a'+i%26)), 50+i*3)}}
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		want, docs = append(want, raw), append(docs, d)
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(size))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(ctx)
	var got []item
	parts := 0
	for {
		part, more := readPart(ctx, cur, size)
		if len(part) > size {
			t.Fatalf("part of %d documents, want at most %d", len(part), size)
		}
		got, parts = append(got, part...), parts+1
		if !more {
			break
		}
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != n || parts < n/size {
		t.Fatalf("read %d documents in %d parts, want %d in at least %d", len(got), parts, n, n/size)
	}
	for i, it := range got {
		if !bytes.Equal(it.doc, want[i]) {
			t.Fatalf("document %d changed after later batches were read:\n got %v\nwant %v", i, it.doc, want[i])
		}
		if id, ok := it.id.Int64OK(); !ok || id != int64(i) {
			t.Fatalf("document %d: _id %v", i, it.id)
		}
	}
}

// TestStreamEventsStayValidAcrossGetMores pins what readStream relies on
// to skip copying change events: an event the driver returned is unchanged
// after the stream has read later batches (the driver reads each reply into
// a buffer of its own). With a batch size of 3, the 60 inserts come in many
// getMores; a driver that reused its buffers would overwrite the first
// events with later ones, which differ in length and content.
func TestStreamEventsStayValidAcrossGetMores(t *testing.T) {
	ctx, e, _ := stateEngine(t)
	coll := e.source.Collection("items")
	cs, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetBatchSize(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	const n = 60
	text := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 40+i*5) }
	for i := range n {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int64(i)}, {Key: "text", Value: text(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	items := make(chan csItem)
	rctx, stop := context.WithCancel(ctx)
	// The reader owns cs until it returns: wait for it before the deferred
	// Close above (a change stream is not safe for concurrent use).
	read := make(chan struct{})
	defer func() { stop(); <-read }()
	go func() {
		defer close(read)
		readStream(rctx, cs, items, time.Millisecond)
	}()
	var evs []bson.Raw
	batches := 0
	for len(evs) < n {
		select {
		case it := <-items:
			if it.err != nil {
				t.Fatal(it.err)
			}
			if len(it.evs) > 0 {
				evs, batches = append(evs, it.evs...), batches+1
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d events read", len(evs), n)
		}
	}
	stop()
	if batches < n/3 {
		t.Fatalf("%d events came in %d batches, want at least %d: the test needs many getMores", n, batches, n/3)
	}
	for i, ev := range evs {
		doc, ok := ev.Lookup("fullDocument").DocumentOK()
		id, _ := doc.Lookup("_id").Int64OK()
		s, _ := doc.Lookup("text").StringValueOK()
		if !ok || id != int64(i) || s != text(i) {
			t.Fatalf("event %d changed after later getMores were read: %v", i, ev)
		}
	}
}

// stateEngine is an engine over a fresh test server.
func stateEngine(t *testing.T) (context.Context, *Engine, *mongo.Collection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	state := db.Collection("meilistream")
	e := New(db, state, db.Collection("meilistream_errors"), Config{RetryBase: time.Millisecond, RetryCap: time.Millisecond}, nil, nil)
	return ctx, e, state
}
