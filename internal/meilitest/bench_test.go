package meilitest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meilisearch/meilisearch-go"

	"github.com/meilistream/meilistream/internal/meilitest"
)

// chunk1KB returns a JSON array of n documents of about 1 KB each, ids
// starting at first.
func chunk1KB(first, n int) []byte {
	var b strings.Builder
	b.WriteByte('[')
	pad := strings.Repeat("lorem ipsum dolor sit amet ", 30)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"d%09d","title":"document %d","n":%d,"tags":["a","b","c"],"nested":{"x":1,"y":"z"},"body":%q}`,
			first+i, first+i, first+i, pad[:800])
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// BenchmarkAddDocuments1KB measures the server's side of adding documents:
// chunks of 10,000 ~1 KB documents sent as raw JSON bytes (no client-side
// marshaling, as the sidecar's sink sends them), the last task waited for.
//
//	go test ./internal/meilitest -run XXX -bench AddDocuments1KB -benchtime 50x
func BenchmarkAddDocuments1KB(b *testing.B) {
	srv, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c := meilisearch.New(srv.URL(), meilisearch.DisableRetries())
	defer c.Close()
	ctx := context.Background()
	ix := c.Index("bench")
	const per = 10000
	var bytes int64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		body := chunk1KB(i*per, per)
		bytes += int64(len(body))
		b.StartTimer()
		info, err := ix.AddDocuments(ctx, body, nil) // []byte is sent as is
		if err != nil {
			b.Fatal(err)
		}
		if i == b.N-1 {
			if _, err := c.WaitForTask(ctx, info.TaskUID, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := srv.WaitIdle(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "docs/s")
	b.SetBytes(bytes / int64(b.N))
}
