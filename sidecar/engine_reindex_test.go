package sidecar

import (
	"bytes"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
