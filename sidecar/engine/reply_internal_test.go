package engine

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/sink"
)

// TestChunkKeepsNoReplyOnceTransformed reads a chunk as a reindex does and
// keeps what a flight keeps once prepared: the chunk's last _id (for the
// checkpoint) and its writes' source _ids. Neither may keep the driver's
// reply alive: it holds every document of the chunk, a megabyte for a
// part of 1000 articles, and a flight waits for Meilisearch to process it.
func TestChunkKeepsNoReplyOnceTransformed(t *testing.T) {
	ctx, db := testDB(t)
	coll := db.Collection("items")
	var docs []any
	for i := range 50 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("id%03d", i)}, {Key: "n", Value: i}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	ch, err := testChain(t, db, "items").readChunk(ctx, nil, bson.RawValue{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if ch.N != len(docs) {
		t.Fatalf("read %d documents, want %d", ch.N, len(docs))
	}
	// Every document is a slice of the one reply.
	reply := weak.Make(&ch.Items[0].Doc[0])
	writes := make([]sink.Write, len(ch.Items))
	for i, it := range ch.Items {
		writes[i] = sink.Write{SourceID: it.ID, Doc: []byte(`{}`)}
	}
	detachIDs(writes)
	kept := &Chunk{Last: ch.Last, N: ch.N}
	ch = nil
	runtime.GC()
	runtime.GC()
	if reply.Value() != nil {
		t.Fatal("the driver's reply is still reachable from the chunk's last _id or the writes' source _ids")
	}
	if got := kept.Last.StringValue(); got != "id049" {
		t.Errorf("last _id %q, want id049", got)
	}
	for i, w := range writes {
		if got, want := w.SourceID.StringValue(), fmt.Sprintf("id%03d", i); got != want {
			t.Errorf("write %d: source _id %q, want %q", i, got, want)
		}
	}
	runtime.KeepAlive(writes)
	runtime.KeepAlive(kept)
}
