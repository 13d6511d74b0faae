package sidecar

import (
	"context"
	"os"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/transform"
)

// The engine's own CPU per document on the reindex hot path: transform
// (examples/transforms/articles.js) and the JSON the Meilisearch sink sends,
// with no servers. go test ./sidecar -run XXX -bench Engine -benchmem
func BenchmarkEngineReindexTransformAndEncode(b *testing.B) {
	src, err := os.ReadFile("../examples/transforms/articles.js")
	if err != nil {
		b.Skip(err)
	}
	job, err := transform.LoadFile("articles.js", src, transform.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	items := make([]item, n)
	for i := range items {
		raw, _ := bson.Marshal(articles.Article(i))
		items[i] = item{doc: raw, id: bson.Raw(raw).Lookup("_id"), op: transform.OpReindex}
	}
	sink := &MeiliSink{job: job, pk: "id"}
	ctx := context.Background()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for lo := 0; lo < n; lo += 500 {
			writes, _, _, err := transformAll(ctx, job, items[lo:lo+500], false)
			if err != nil {
				b.Fatal(err)
			}
			positions := make([]int, len(writes))
			for i := range positions {
				positions[i] = i
			}
			if body, _ := sink.encodeDocs(Batch{Writes: writes}, positions, &meiliReceipt{}); len(body) < 2 {
				b.Fatal("nothing encoded")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/doc")
}
