package meili

import (
	"context"
	"encoding/json"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// The JSON body of a batch of 500 articles as the Meilisearch sink sends it
// (examples/transforms/articles.js output), without the transform:
// go test ./sidecar -run '^$' -bench EncodeArticles -benchmem
func BenchmarkEncodeArticles(b *testing.B) {
	job := testutil.ArticlesJob(b)
	const n = 500
	writes := make([]sink.Write, 0, n)
	for i := 1; len(writes) < n; i++ {
		if !articles.Published(i) {
			continue
		}
		raw, _ := bson.Marshal(articles.Article(i))
		r, err := job.Apply(context.Background(), raw, transform.OpReindex, nil)
		if err != nil {
			b.Fatal(err)
		}
		writes = append(writes, sink.Write{SourceID: bson.Raw(raw).Lookup("_id"), Doc: json.RawMessage(r.JSON)})
	}
	positions := make([]int, len(writes))
	for i := range positions {
		positions[i] = i
	}
	var size int
	c := &chunker{max: DefaultMaxPayloadBytes, single: DefaultMaxPayloadBytes, hint: n, send: func(body []byte, _ []int) error {
		size = len(body)
		releaseBody(body)
		return nil
	}}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := testutil.CPUTime()
	for it := 0; it < b.N; it++ {
		for _, i := range positions {
			if err := c.addDoc(i, writes[i].Doc); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.flush(); err != nil || len(c.failed) > 0 {
			b.Fatal(err, c.failed)
		}
	}
	b.ReportMetric(float64((testutil.CPUTime()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/doc")
	b.ReportMetric(float64(size)/n, "bytes/doc")
}
