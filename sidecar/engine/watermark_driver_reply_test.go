package engine

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// The reindex and follow keep the documents the driver returns without
// copying them: the driver reads each reply into a buffer of its own and
// never writes to it again. These tests pin that for the driver in go.mod.

// TestReadPartKeepsDocumentsValidAcrossBatches pins what a chunk's read
// (Chain.find) relies on to skip copying: a document the driver returned
// is unchanged after the cursor has read later batches (the driver reads
// each reply into a buffer of its own). A driver that reused its buffers would overwrite the
// first parts' documents with later ones, which differ in length and
// content.
func TestReadPartKeepsDocumentsValidAcrossBatches(t *testing.T) {
	ctx, db := testDB(t)
	coll := db.Collection("items")
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
	// One chunk after the other, as a reindex reads them: each a find of
	// its own, whose first reply the chunk keeps.
	var got []Item
	parts := 0
	var last bson.RawValue
	for {
		after := bson.D{}
		if last.Type != 0 {
			after = bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}
		}
		cur, err := coll.Find(ctx, after, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(size).SetBatchSize(size))
		if err != nil {
			t.Fatal(err)
		}
		part, final := readFirstBatch(ctx, cur, size)
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		cur.Close(ctx)
		if len(part) > size {
			t.Fatalf("part of %d documents, want at most %d", len(part), size)
		}
		got, parts = append(got, part...), parts+1
		if len(part) > 0 {
			last = part[len(part)-1].ID
		}
		if final {
			break
		}
	}
	if len(got) != n || parts < n/size {
		t.Fatalf("read %d documents in %d parts, want %d in at least %d", len(got), parts, n, n/size)
	}
	for i, it := range got {
		if !bytes.Equal(it.Doc, want[i]) {
			t.Fatalf("document %d changed after later batches were read:\n got %v\nwant %v", i, it.Doc, want[i])
		}
		if id, ok := it.ID.Int64OK(); !ok || id != int64(i) {
			t.Fatalf("document %d: _id %v", i, it.ID)
		}
	}
}

// testDB is a database of a fresh test server.
func testDB(t *testing.T) (context.Context, *mongo.Database) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	return ctx, client.Database("app")
}
