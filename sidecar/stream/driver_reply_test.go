package stream

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// TestStreamEventsStayValidAcrossGetMores pins what readStream relies on
// to skip copying change events: an event the driver returned is unchanged
// after the stream has read later batches (the driver reads each reply into
// a buffer of its own). With a batch size of 3, the 60 inserts come in many
// getMores; a driver that reused its buffers would overwrite the first
// events with later ones, which differ in length and content.
func TestStreamEventsStayValidAcrossGetMores(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	coll := client.Database("app").Collection("items")
	cs, err := coll.Watch(ctx, mongo.Pipeline{}, options.ChangeStream().SetBatchSize(3))
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	text := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 40+i*5) }
	for i := range n {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int64(i)}, {Key: "text", Value: text(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := Start(ctx, cs, time.Millisecond, 0, nil)
	defer r.Close()
	var evs []bson.Raw
	batches := 0
	for len(evs) < n {
		select {
		case it := <-r.Items():
			if it.Err != nil {
				t.Fatal(it.Err)
			}
			if len(it.Events) > 0 {
				evs, batches = append(evs, it.Events...), batches+1
			}
			r.Taken(it)
		case <-ctx.Done():
			t.Fatalf("%d of %d events read", len(evs), n)
		}
	}
	r.Close()
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
