package sidecar

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/transform"
)

// The engine's own CPU per document on the reindex hot path: transform
// (examples/transforms/articles.js) and the JSON the Meilisearch sink sends,
// with no servers. go test ./sidecar -run XXX -bench Engine -benchmem
func BenchmarkEngineReindexTransformAndEncode(b *testing.B) {
	job := articlesJob(b)
	const n = 1000
	items := make([]item, n)
	for i := range items {
		raw, _ := bson.Marshal(articles.Article(i))
		items[i] = item{doc: raw, id: bson.Raw(raw).Lookup("_id"), op: transform.OpReindex}
	}
	sink := &MeiliSink{job: job, pk: "id"}
	// A context that can end, as the pipe's is: the transform watches it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	cpu0 := cpuTime()
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
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n)/1000, "cpu-us/doc")
}

// encodeSink encodes like the Meilisearch sink and sends nothing.
type encodeSink struct{ fakeSink }

func (s *encodeSink) Send(_ context.Context, b Batch) (Receipt, error) {
	ms := &MeiliSink{pk: "id"}
	pos := make([]int, 0, len(b.Writes))
	for i := range b.Writes {
		if !b.Writes[i].Delete {
			pos = append(pos, i)
		}
	}
	ms.encodeDocs(b, pos, &meiliReceipt{})
	return &fakeReceipt{}, nil
}
func (s *encodeSink) Wait(context.Context, Receipt) ([]DocFailure, error) { return nil, nil }

// The engine's own CPU per change on the follow path, without servers:
// coalescing, transform (articles.js), encoding, the ordered pipe. The
// changes are updates as the bench makes them (updateOne with $set, read
// with updateLookup): the transform's ctx carries their updateDescription.
func BenchmarkEngineFollowPerChange(b *testing.B) {
	job := articlesJob(b)
	const n = 1000
	events := make([]bson.Raw, n)
	for i := range events {
		ev, _ := bson.Marshal(bson.D{
			{Key: "_id", Value: bson.D{{Key: "_data", Value: fmt.Sprintf("82%030d", i)}}},
			{Key: "operationType", Value: "update"},
			{Key: "clusterTime", Value: bson.Timestamp{T: 1, I: uint32(i)}},
			{Key: "wallTime", Value: bson.DateTime(1700000000000)},
			{Key: "fullDocument", Value: articles.Article(i)},
			{Key: "ns", Value: bson.D{{Key: "db", Value: "app"}, {Key: "coll", Value: "articles"}}},
			{Key: "documentKey", Value: bson.D{{Key: "_id", Value: int64(i)}}},
			{Key: "updateDescription", Value: bson.D{
				{Key: "updatedFields", Value: bson.D{{Key: "title", Value: "follow"}}},
				{Key: "removedFields", Value: bson.A{}},
				{Key: "truncatedArrays", Value: bson.A{}},
			}},
		})
		events[i] = ev
	}
	e := NewEngine(nil, nil, nil, EngineConfig{}, nil, nil)
	jc := e.jobCfg(job)
	b.ResetTimer()
	cpu0 := cpuTime()
	for it := 0; it < b.N; it++ {
		p := e.newPipe(context.Background(), jc, &encodeSink{}, nil, e.log, true)
		f := &follower{e: e, jc: jc, p: p}
		f.reset()
		for _, ev := range events {
			if _, err := f.add(ev); err != nil {
				b.Fatal(err)
			}
			if len(f.items) >= jc.BatchSize {
				f.flushNoRecord()
			}
		}
		f.flushNoRecord()
		if err := p.close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/change")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n)/1000, "cpu-us/change")
}

// flushNoRecord is flush without the position record (no MongoDB here).
func (f *follower) flushNoRecord() {
	items := f.items
	f.reset()
	job := f.jc.job
	_ = f.p.submit(&flight{prepare: func(ctx context.Context, fl *flight) error {
		w, _, _, err := transformAll(ctx, job, items, true)
		fl.batch = Batch{Writes: w}
		return err
	}})
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// articlesJob loads examples/transforms/articles.js, the job the benchmarks
// measure.
func articlesJob(b *testing.B) *transform.Job {
	b.Helper()
	src, err := os.ReadFile("../examples/transforms/articles.js")
	if err != nil {
		b.Skip(err)
	}
	job, err := transform.LoadFile("articles.js", src, transform.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return job
}

// The JSON body of a batch of 500 articles as the Meilisearch sink sends it
// (examples/transforms/articles.js output), without the transform:
// go test ./sidecar -run '^$' -bench EncodeArticles -benchmem
func BenchmarkEncodeArticles(b *testing.B) {
	job := articlesJob(b)
	const n = 500
	items := make([]item, 0, n)
	for i := 1; len(items) < n; i++ {
		if !articles.Published(i) {
			continue
		}
		raw, _ := bson.Marshal(articles.Article(i))
		items = append(items, item{doc: raw, id: bson.Raw(raw).Lookup("_id"), op: transform.OpReindex})
	}
	writes, _, _, err := transformAll(context.Background(), job, items, false)
	if err != nil {
		b.Fatal(err)
	}
	positions := make([]int, len(writes))
	for i := range positions {
		positions[i] = i
	}
	sink := &MeiliSink{job: job, pk: "id"}
	batch := Batch{Writes: writes}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var size int
	for it := 0; it < b.N; it++ {
		body, _ := sink.encodeDocs(batch, positions, &meiliReceipt{})
		size = len(body)
		releaseBody(body)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/doc")
	b.ReportMetric(float64(size)/n, "bytes/doc")
}
