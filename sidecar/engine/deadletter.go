package engine

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// prepareItems is the prepare stage's work on items: their lookups and
// transform (deleteSkipped: see Transform), the documents it
// failed on taken through the per-document error path (recorded, kept in
// set, and in made while a swap reindex runs), what it kept out counted;
// sk, when set, counts the updates it left unsent.
func (e *Engine) prepareItems(ctx context.Context, jc jobConfig, stats *status.JobStats, set, made *deadLetterSet, items []Item, deleteSkipped bool, sk *Unchanged) (writes []sink.Write, skipped int, bad []DocError, err error) {
	lk, err := e.lookups(ctx, jc, items)
	if err != nil {
		return nil, 0, nil, err
	}
	writes, skipped, bad, err = Transform(ctx, jc.job, items, lk, deleteSkipped)
	if err != nil {
		return nil, 0, nil, err
	}
	e.reportUnchanged(sk, jc.job.Name, stats)
	// Before the record: a document given up records why.
	jc.timeouts.note(items, bad)
	if err := e.handleDocErrors(ctx, jc, stats, set, bad); err != nil {
		return nil, 0, nil, err
	}
	for _, b := range bad {
		made.Add(b.ID)
	}
	stats.Add(0, 0, int64(skipped), 0)
	e.observeSkipped(jc.job.Name, int64(skipped))
	return writes, skipped, bad, nil
}

// handleDocErrors takes transform failures through the per-document error
// path: recorded and counted, then the job goes on (skip) or stops with an
// error naming the document (fail).
func (e *Engine) handleDocErrors(ctx context.Context, jc jobConfig, stats *status.JobStats, set *deadLetterSet, bad []DocError) error {
	for _, b := range bad {
		code := string(errs.CodeOf(b.Err))
		msg := b.Err.Error() // the code and job are recorded apart
		// Recorded in both modes, so `meilistream retry` and `status` see
		// the document that stopped a job with onDocumentError: fail.
		if err := e.store.RecordDocumentError(ctx, jc.job.Name, b.ID, code, msg, jc.job.Hash); err != nil {
			return err
		}
		set.Add(b.ID)
		stats.Add(0, 0, 0, 1)
		e.observeDocError(jc.job.Name, code)
		if jc.OnDocumentError == "fail" {
			e.log.Error("document failed; stopping the job (onDocumentError: fail)", "job", jc.job.Name, "id", IDString(b.ID), "op", b.OpLabel(), "code", code, "error", msg)
			return &errs.Error{Code: errs.CodeOf(b.Err), Job: jc.job.Name, Err: &docFailed{
				msg:   fmt.Sprintf("document _id %s (%s): %s; fix the transform or the document; onDocumentError is fail, so the job stops (the document is recorded in the errors collection: `meilistream retry %s` after a fix)", IDString(b.ID), b.OpLabel(), msg, jc.job.Name),
				cause: b.Err,
			}}
		}
		e.log.Warn("document left out", "job", jc.job.Name, "id", IDString(b.ID), "op", b.OpLabel(), "code", code, "error", msg)
	}
	return nil
}

// failedIDs are the ids of bad, for deadLetterSet.Candidates.
func failedIDs(bad []DocError) []bson.RawValue {
	if len(bad) == 0 {
		return nil
	}
	ids := make([]bson.RawValue, len(bad))
	for i, b := range bad {
		ids[i] = b.ID
	}
	return ids
}

// docFailed is the cause of a job stopped by one document: its message
// names the document and what to do, and it wraps the transform's error.
type docFailed struct {
	msg   string
	cause error
}

func (d *docFailed) Error() string { return d.msg }
func (d *docFailed) Unwrap() error { return d.cause }

// Retry runs the documents recorded in the errors collection for job through
// the current transform again, under l: what succeeds is written to sink and
// its record cleared; what fails again keeps (updates) its record
// (retryRun). The caller holds the job's lease, so no follower
// writes meanwhile.
func (e *Engine) Retry(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease) (RetrySummary, error) {
	start := time.Now()
	ctx, stop := leaseContext(ctx, l)
	defer stop()
	ids, err := e.store.DocErrorIDs(ctx, job.Name)
	if err != nil {
		return RetrySummary{}, leaseOr(ctx, l, err)
	}
	return e.retryIDs(ctx, job, dst, l, ids, start, OpRetry)
}

// Repair writes the documents of ids again under l, read from the
// collection and through the transform as a retry does (verify --repair
// where no process holds the job's lease): one the collection no longer
// holds, or the transform keeps out, is deleted.
func (e *Engine) Repair(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, ids []bson.RawValue) (RetrySummary, error) {
	start := time.Now()
	ctx, stop := leaseContext(ctx, l)
	defer stop()
	sum, err := e.retryIDs(ctx, job, dst, l, ids, start, OpRepair)
	// Most repaired documents had no record to clear: count what became
	// durable.
	sum.Written = sum.Durable - sum.Gone
	return sum, err
}

func (e *Engine) retryIDs(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, ids []bson.RawValue, start time.Time, again string) (RetrySummary, error) {
	jc := e.jobCfg(job)
	jc.OnDocumentError = "skip" // a retry never stops on the document it is retrying
	log := e.log.With("job", job.Name)
	if len(ids) == 0 {
		return RetrySummary{Duration: time.Since(start)}, nil
	}
	if err := retryPrepare(ctx, dst, e.cfg, log, nil); err != nil {
		return RetrySummary{}, leaseOr(ctx, l, err)
	}
	p := e.newPipe(ctx, jc, dst, sink.NewGuard(l.Held), nil, log, false)
	defer p.Abort(pipe.Closed)
	sum, err := retryRun{
		Store: e.store, Job: job.Name, Source: jobColl(e.source, &job.Job), Find: retryFind(job), BatchSize: jc.BatchSize,
		Transform: func(ctx context.Context, ids []bson.RawValue, docs []bson.Raw) ([]sink.Write, []bson.RawValue, error) {
			items := make([]Item, len(ids))
			for i, id := range ids {
				items[i] = Item{ID: id, Doc: docs[i], Op: transform.OpReindex, Again: again}
			}
			lk, err := e.lookups(ctx, jc, items)
			if err != nil {
				return nil, nil, err
			}
			writes, _, bad, err := Transform(ctx, job, items, lk, true)
			if err != nil {
				return nil, nil, err
			}
			if err := e.handleDocErrors(ctx, jc, nil, nil, bad); err != nil {
				return nil, nil, err
			}
			return writes, failedIDs(bad), nil
		},
	}.Run(ctx, p.Pipe, ids)
	if err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	sum.Duration = time.Since(start)
	log.Info("retry done", "retried", sum.Retried, "written", sum.Written, "gone", sum.Gone, "failed", sum.Failed)
	return sum, nil
}
