package engine

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// TestWriteBuffersAreSizedToTheJobsDocuments: the buffers a batch's search
// documents are written into are held until the batch is durable, so
// their room counts in a reindex's live heap. Once the job has written
// documents, a batch of small documents takes buffers about as large as
// they are, not a fixed guess of 768 bytes a document (768 KB for these
// 1000, whose JSON is 30 KB; the rest of a batch's allocations are about
// 600 KB).
func TestWriteBuffersAreSizedToTheJobsDocuments(t *testing.T) {
	job, err := transform.LoadFile("items.js", []byte(`module.exports = {};`), transform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	items := make([]Item, 1000)
	for i := range items {
		raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("id%04d", i)}, {Key: "n", Value: i}})
		items[i] = Item{Doc: raw, ID: bson.Raw(raw).Lookup("_id"), Op: transform.OpReindex}
	}
	least := uint64(1 << 62)
	for range 4 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		writes, _, _, err := Transform(context.Background(), job, items, nil, false)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if len(writes) != len(items) {
			t.Fatalf("%d writes of %d documents", len(writes), len(items))
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > 1000<<10 {
		t.Errorf("a batch of 1000 documents of about 30 bytes of JSON allocated %d KB, want under 1000 KB (buffers sized to the documents)", least>>10)
	}
}
