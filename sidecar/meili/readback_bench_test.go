package meili

import (
	"bytes"
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/transform"
)

// A page of 500 articles read back as verify reads it: the page split into
// its documents and each one's primary key found (Fetch's work before it
// matches documents to ids), without the HTTP round trip:
// go test ./sidecar/meili -run '^$' -bench ReadBackArticles -benchmem
func BenchmarkReadBackArticles(b *testing.B) {
	job := testutil.ArticlesJob(b)
	const n = 500
	var page bytes.Buffer
	page.WriteString(`{"results":[`)
	for i, k := 1, 0; k < n; i++ {
		if !articles.Published(i) {
			continue
		}
		raw, _ := bson.Marshal(articles.Article(i))
		r, err := job.Apply(context.Background(), raw, transform.OpReindex, nil)
		if err != nil {
			b.Fatal(err)
		}
		if k > 0 {
			page.WriteByte(',')
		}
		page.Write(r.JSON)
		k++
	}
	page.WriteString(`],"offset":0,"limit":500,"total":500}`)
	body := page.Bytes()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		docs := resultsOf(body)
		if len(docs) != n {
			b.Fatalf("%d documents", len(docs))
		}
		for _, d := range docs {
			if _, ok := memberOf(d, "id"); !ok {
				b.Fatalf("no primary key: %s", d)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/doc")
}
