package engine

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// The engine's own CPU per document on the reindex hot path: transform
// (examples/transforms/articles.js) and the JSON the Meilisearch sink sends,
// with no servers. go test ./sidecar/engine -run XXX -bench Engine -benchmem
func BenchmarkEngineReindexTransformAndEncode(b *testing.B) {
	job := testutil.ArticlesJob(b)
	const n = 1000
	items := make([]Item, n)
	for i := range items {
		raw, _ := bson.Marshal(articles.Article(i))
		items[i] = Item{Doc: raw, ID: bson.Raw(raw).Lookup("_id"), Op: transform.OpReindex}
	}
	var body []byte
	// A context that can end, as the pipe's is: the transform watches it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	cpu0 := testutil.CPUTime()
	for it := 0; it < b.N; it++ {
		for lo := 0; lo < n; lo += 500 {
			writes, _, _, err := Transform(ctx, job, items[lo:lo+500], nil, false)
			if err != nil {
				b.Fatal(err)
			}
			if body = encodeUpserts(body, writes); len(body) < 3 {
				b.Fatal("nothing encoded")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/doc")
	b.ReportMetric(float64((testutil.CPUTime()-cpu0).Nanoseconds())/float64(b.N*n)/1000, "cpu-us/doc")
}

// encodeSink encodes like the Meilisearch sink and sends nothing.
type encodeSink struct {
	body []byte
}

func (s *encodeSink) Prepare(context.Context) error { return nil }
func (s *encodeSink) Send(_ context.Context, b sink.Batch) (sink.Receipt, error) {
	s.body = encodeUpserts(s.body, b.Writes)
	return struct{}{}, nil
}
func (s *encodeSink) Wait(context.Context, sink.Receipt) ([]sink.DocFailure, error) { return nil, nil }
func (s *encodeSink) Keys(context.Context, func([]bson.RawValue) error) error       { return nil }
func (s *encodeSink) Fetch(_ context.Context, ids []bson.RawValue) ([][]byte, error) {
	return make([][]byte, len(ids)), nil
}
func (s *encodeSink) Stage(context.Context, bool) (sink.Staged, error) { return nil, sink.ErrNoStage }
func (s *encodeSink) DiscardStage(context.Context, string) error       { return nil }
func (s *encodeSink) OnDDL(context.Context, string)                    {}
func (s *encodeSink) Enqueued() (int, int64, bool)                     { return 0, 0, false }

// encodeUpserts renders the upserts of writes into buf as one JSON array,
// as the Meilisearch sink encodes a batch (jobdef.AppendJSON of each
// document, into a buffer it reuses).
func encodeUpserts(buf []byte, writes []sink.Write) []byte {
	buf = append(buf[:0], '[')
	for i := range writes {
		if writes[i].Delete {
			continue
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf, _ = jobdef.AppendJSON(buf, writes[i].Doc)
	}
	return append(buf, ']')
}

// The engine's own CPU per change on the follow path, without servers:
// coalescing, transform (articles.js), encoding, the ordered pipe. The
// changes are updates as the bench makes them (updateOne with $set, read
// with updateLookup): the transform's ctx carries their updateDescription.
func BenchmarkEngineFollowPerChange(b *testing.B) {
	job := testutil.ArticlesJob(b)
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
	e := New(nil, nil, nil, Config{}, nil, nil)
	jc := e.jobCfg(job)
	b.ResetTimer()
	cpu0 := testutil.CPUTime()
	for it := 0; it < b.N; it++ {
		p := e.newPipe(context.Background(), jc, &encodeSink{}, sink.Unguarded, nil, e.log, true)
		f := &follower{e: e, jc: jc, p: p}
		f.reset()
		for _, ev := range events {
			if err := f.add(ev); err != nil {
				b.Fatal(err)
			}
			if len(f.items) >= jc.BatchSize {
				f.flushNoRecord()
			}
		}
		f.flushNoRecord()
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/change")
	b.ReportMetric(float64((testutil.CPUTime()-cpu0).Nanoseconds())/float64(b.N*n)/1000, "cpu-us/change")
}

// flushNoRecord is flush without the position record (no MongoDB here).
func (f *follower) flushNoRecord() {
	items := f.items
	f.reset()
	job := f.jc.job
	_ = f.p.Submit(&pipe.Flight{Prepare: func(ctx context.Context, fl *pipe.Flight) error {
		w, _, _, err := Transform(ctx, job, items, nil, true)
		fl.Batch = sink.Batch{Writes: w}
		return err
	}})
}
