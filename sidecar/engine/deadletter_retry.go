package engine

import (
	"context"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// RetrySummary is what a retry of the recorded documents did.
type RetrySummary struct {
	Retried int64 // error records processed
	Written int64 // documents written (or deleted: kept out by the transform) and cleared
	Gone    int64 // documents no longer in the collection: deleted from the destination and cleared
	Failed  int64 // documents failing again (their records updated)
	// Durable counts the writes made durable (documents written or
	// deleted), with a record or without one (a repair's).
	Durable  int64
	Duration time.Duration
}

// retryRun runs a job's recorded documents through its transform again while
// the job's holder writes nothing else (`meilistream retry` holding the
// lease itself): in batches, each read by _id, transformed and sent; what
// becomes durable has its record cleared, what fails again keeps
// (updates) it.
type retryRun struct {
	Store     *jobstate.Store
	Job       string
	Source    *mongo.Collection           // the job's collection
	Find      *options.FindOptionsBuilder // how its documents are read (trimmed as the stream's are)
	BatchSize int
	// Transform turns a batch into writes: docs[i] is the document of
	// ids[i], nil when the collection no longer holds it (then a delete).
	// failed are the documents the transform failed on, recorded again.
	Transform func(ctx context.Context, ids []bson.RawValue, docs []bson.Raw) (writes []sink.Write, failed []bson.RawValue, err error)
}

// Run retries ids through p; Duration is left to the caller. On an error
// the summary counts what was done before it.
func (r retryRun) Run(ctx context.Context, p *pipe.Pipe, ids []bson.RawValue) (RetrySummary, error) {
	var sum RetrySummary
	var cleared, refused, durable atomic.Int64 // written by the pipe's wait stage
	for lo := 0; lo < len(ids); lo += r.BatchSize {
		chunk := ids[lo:min(lo+r.BatchSize, len(ids))]
		found, err := r.read(ctx, chunk)
		if err != nil {
			return sum, err
		}
		docs := make([]bson.Raw, len(chunk))
		for i, id := range chunk {
			docs[i] = found[jobdef.IDKey(id)]
			if docs[i] == nil {
				sum.Gone++
			}
		}
		sum.Retried += int64(len(chunk))
		writes, failed, err := r.Transform(ctx, chunk, docs)
		if err != nil {
			return sum, err
		}
		sum.Failed += int64(len(failed))
		badKeys := map[string]bool{}
		for _, id := range failed {
			badKeys[jobdef.IDKey(id)] = true
		}
		f := &pipe.Flight{Batch: sink.Batch{Writes: writes}}
		f.Durable = func(ctx context.Context, f *pipe.Flight) error {
			var ok []bson.RawValue
			for i, w := range f.Batch.Writes {
				if badKeys[jobdef.IDKey(w.SourceID)] || f.IsRefused(i) {
					continue
				}
				ok = append(ok, w.SourceID)
			}
			durable.Add(int64(len(ok)))
			n, err := r.Store.ClearDocErrors(ctx, r.Job, ok)
			cleared.Add(n)
			refused.Add(int64(f.RefusedCount()))
			return err
		}
		if err := p.Submit(f); err != nil {
			return sum, err
		}
	}
	if err := p.Close(); err != nil {
		return sum, err
	}
	sum.Written = cleared.Load() - sum.Gone
	sum.Durable = durable.Load()
	sum.Failed += refused.Load()
	return sum, nil
}

// read reads the documents of ids, by jobdef.IDKey of their _id (each
// a copy).
func (r retryRun) read(ctx context.Context, ids []bson.RawValue) (map[string]bson.Raw, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	cur, err := r.Source.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}, r.Find)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, r.Job, err, "read documents to retry")
	}
	found := map[string]bson.Raw{}
	for cur.Next(ctx) {
		d := append(bson.Raw(nil), cur.Current...)
		found[jobdef.IDKey(d.Lookup("_id"))] = d
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, r.Job, err, "read documents to retry")
	}
	return found, nil
}
