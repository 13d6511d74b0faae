package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// handleDocErrors takes transform failures through the per-document error
// path: recorded and counted, then the job goes on (skip) or stops with an
// error naming the document (fail).
func (e *Engine) handleDocErrors(ctx context.Context, jc jobConfig, stats *status.JobStats, set *errSet, bad []docError) error {
	for _, b := range bad {
		code := string(errs.CodeOf(b.err))
		msg := b.err.Error() // the code and job are recorded apart
		// Recorded in both modes, so `meilistream retry` and `status` see
		// the document that stopped a job with onDocumentError: fail.
		if err := e.store.RecordDocumentError(ctx, jc.job.Name, b.id, code, msg, jc.job.Hash); err != nil {
			return err
		}
		set.add(b.id)
		stats.Add(0, 0, 0, 1)
		e.observeDocError(jc.job.Name, code)
		if jc.OnDocumentError == "fail" {
			e.log.Error("document failed; stopping the job (onDocumentError: fail)", "job", jc.job.Name, "id", idString(b.id), "op", string(b.op), "code", code, "error", msg)
			return &errs.Error{Code: errs.CodeOf(b.err), Job: jc.job.Name, Err: &docFailed{
				msg:   fmt.Sprintf("document _id %s (%s): %s; fix the transform or the document; onDocumentError is fail, so the job stops (the document is recorded in the errors collection: `meilistream retry %s` after a fix)", idString(b.id), b.op, msg, jc.job.Name),
				cause: b.err,
			}}
		}
		e.log.Warn("document left out", "job", jc.job.Name, "id", idString(b.id), "op", string(b.op), "code", code, "error", msg)
	}
	return nil
}

// docFailed is the cause of a job stopped by one document: its message
// names the document and what to do, and it wraps the transform's error.
type docFailed struct {
	msg   string
	cause error
}

func (d *docFailed) Error() string { return d.msg }
func (d *docFailed) Unwrap() error { return d.cause }

// RetrySummary is what Retry did.
type RetrySummary struct {
	Retried  int64 // error records processed
	Written  int64 // documents written (or deleted: kept out by the transform) and cleared
	Gone     int64 // documents no longer in the collection: deleted from the destination and cleared
	Failed   int64 // documents failing again (their records updated)
	Duration time.Duration
}

// Retry runs the documents recorded in the errors collection for job through
// the current transform again, under l: what succeeds is written to sink and
// its record cleared; what fails again keeps (updates) its record. The
// caller holds the job's lease, so no follower writes meanwhile.
func (e *Engine) Retry(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease) (RetrySummary, error) {
	start := time.Now()
	var sum RetrySummary
	ctx, stop := leaseContext(ctx, l)
	defer stop()
	jc := e.jobCfg(job)
	jc.OnDocumentError = "skip" // a retry never stops on the document it is retrying
	log := e.log.With("job", job.Name)
	ids, err := e.store.DocErrorIDs(ctx, job.Name)
	if err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	if len(ids) == 0 {
		sum.Duration = time.Since(start)
		return sum, nil
	}
	if err := retryPrepare(ctx, dst, e.cfg, log); err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	coll := e.source.Collection(job.Collection)
	p := e.newPipe(ctx, jc, dst, nil, log, false)
	defer p.Abort(pipe.Closed)
	var cleared, refused atomic.Int64 // written by the pipe's wait stage
	for lo := 0; lo < len(ids); lo += jc.BatchSize {
		chunk := ids[lo:min(lo+jc.BatchSize, len(ids))]
		in := make(bson.A, len(chunk))
		for i, id := range chunk {
			in[i] = id
		}
		cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}, retryFind(job))
		if err != nil {
			return sum, leaseOr(ctx, l, errs.Wrap(errs.Failed, job.Name, err, "read documents to retry"))
		}
		found := map[string]bson.Raw{}
		for cur.Next(ctx) {
			d := append(bson.Raw(nil), cur.Current...)
			found[keyOf(d.Lookup("_id"))] = d
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return sum, leaseOr(ctx, l, errs.Wrap(errs.Failed, job.Name, err, "read documents to retry"))
		}
		items := make([]item, len(chunk))
		for i, id := range chunk {
			items[i] = item{id: id, doc: found[keyOf(id)], op: transform.OpReindex}
			if items[i].doc == nil {
				sum.Gone++
			}
		}
		sum.Retried += int64(len(chunk))
		lk, err := e.lookups(ctx, jc, items)
		if err != nil {
			return sum, leaseOr(ctx, l, err)
		}
		writes, _, bad, err := transformAll(ctx, job, items, lk, true)
		if err != nil {
			return sum, leaseOr(ctx, l, err)
		}
		if err := e.handleDocErrors(ctx, jc, nil, nil, bad); err != nil {
			return sum, leaseOr(ctx, l, err)
		}
		sum.Failed += int64(len(bad))
		badKeys := map[string]bool{}
		for _, b := range bad {
			badKeys[keyOf(b.id)] = true
		}
		f := &pipe.Flight{Batch: sink.Batch{Writes: writes}}
		f.Durable = func(ctx context.Context, f *pipe.Flight) error {
			var ok []bson.RawValue
			for i, w := range f.Batch.Writes {
				if badKeys[keyOf(w.SourceID)] || f.IsRefused(i) {
					continue
				}
				ok = append(ok, w.SourceID)
			}
			n, err := e.store.ClearDocErrors(ctx, job.Name, ok)
			cleared.Add(n)
			refused.Add(int64(f.RefusedCount()))
			return err
		}
		if err := p.Submit(f); err != nil {
			return sum, leaseOr(ctx, l, err)
		}
	}
	if err := p.Close(); err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	sum.Written = cleared.Load() - sum.Gone
	sum.Failed += refused.Load()
	sum.Duration = time.Since(start)
	log.Info("retry done", "retried", sum.Retried, "written", sum.Written, "gone", sum.Gone, "failed", sum.Failed)
	return sum, nil
}

// errSet is the set of a job's documents with an error record, kept while
// the job runs so that a later successful write of one clears its record
// (the record must not outlive the error) and the dead-letter gauge stays
// current. Safe for concurrent use; a nil *errSet does nothing.
type errSet struct {
	e   *Engine
	job string
	mu  sync.Mutex
	m   map[string]bool
	// keepOnly: the set only says which records to keep; writes do not
	// clear records (a staged reindex, before its swap).
	keepOnly bool
}

func (e *Engine) loadErrSet(ctx context.Context, job string) (*errSet, error) {
	ids, err := e.store.DocErrorIDs(ctx, job)
	if err != nil {
		return nil, err
	}
	s := &errSet{e: e, job: job, m: make(map[string]bool, len(ids))}
	for _, id := range ids {
		s.m[keyOf(id)] = true
	}
	e.observeDeadLetters(job, int64(len(s.m)))
	return s, nil
}

func (s *errSet) add(id bson.RawValue) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.m[keyOf(id)] = true
	n := len(s.m)
	s.mu.Unlock()
	s.e.observeDeadLetters(s.job, int64(n))
}

// candidates returns the ids of writes that may clear a record: written
// without a transform error (bad) and recorded.
func (s *errSet) candidates(writes []sink.Write, bad []docError) []int {
	if s == nil || s.keepOnly {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) == 0 {
		return nil
	}
	var out []int
	for i := range writes {
		k := keyOf(writes[i].SourceID)
		if !s.m[k] {
			continue
		}
		isBad := false
		for _, b := range bad {
			if keyOf(b.id) == k {
				isBad = true
				break
			}
		}
		if !isBad {
			out = append(out, i)
		}
	}
	return out
}

// cleared clears the records of f's writes at positions that are now
// durable (and were not refused by the destination).
func (s *errSet) cleared(ctx context.Context, f *pipe.Flight, positions []int) error {
	if s == nil || len(positions) == 0 {
		return nil
	}
	var ids []bson.RawValue
	for _, i := range positions {
		if !f.IsRefused(i) {
			ids = append(ids, f.Batch.Writes[i].SourceID)
		}
	}
	if _, err := s.e.store.ClearDocErrors(ctx, s.job, ids); err != nil {
		return err
	}
	s.mu.Lock()
	for _, id := range ids {
		delete(s.m, keyOf(id))
	}
	n := len(s.m)
	s.mu.Unlock()
	s.e.observeDeadLetters(s.job, int64(n))
	return nil
}

// reset makes s hold what keep holds (after a swap: the records the
// reindex made are the job's records).
func (s *errSet) reset(keep *errSet) {
	if s == nil || keep == nil {
		return
	}
	keep.mu.Lock()
	m := make(map[string]bool, len(keep.m))
	for k := range keep.m {
		m[k] = true
	}
	keep.mu.Unlock()
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// clearStaleErrors deletes job's error records that are not in keep (the
// records a swap reindex made): the new index was built without error for
// every other document.
func (e *Engine) clearStaleErrors(ctx context.Context, job string, keep *errSet) error {
	ids, err := e.store.DocErrorIDs(ctx, job)
	if err != nil {
		return err
	}
	var stale []bson.RawValue
	keep.mu.Lock()
	for _, id := range ids {
		if !keep.m[keyOf(id)] {
			stale = append(stale, id)
		}
	}
	n := len(keep.m)
	keep.mu.Unlock()
	if _, err := e.store.ClearDocErrors(ctx, job, stale); err != nil {
		return err
	}
	e.observeDeadLetters(job, int64(n))
	return nil
}
