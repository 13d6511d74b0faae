package engine

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// delivery is a job's pipe and what its hooks report to: the job's
// figures, metrics, log and error records.
type delivery struct {
	*pipe.Pipe
	e     *Engine
	jc    jobConfig
	stats *status.JobStats
	log   hclog.Logger

	retryLog time.Time // last retry warning, rate-limited (the wait or send stage's)

	// errs are the job's error records; nil: not tracked. made, while a
	// swap reindex runs, also takes the documents refused: their records
	// outlive the swap. Both are read on the wait stage, and changed only
	// before the first flight or by a control flight.
	errs *deadLetterSet
	made *deadLetterSet

	// dog, when set, is told of every flight submitted and made durable
	// (Submit).
	dog *watchdog
}

// newPipe starts the pipe of one job into dst. With track, a write sent
// again never undoes a later flight's (follow, and a reindex interleaved
// with it); without, writes are sent again as they are (a retry of
// recorded documents, alone under the lease). guard is the lease's check,
// made again right before each send.
func (e *Engine) newPipe(ctx context.Context, jc jobConfig, dst sink.Sink, guard sink.Guard, stats *status.JobStats, log hclog.Logger, track bool) *delivery {
	d := &delivery{e: e, jc: jc, stats: stats, log: log}
	d.Pipe = pipe.New(ctx, pipe.Config{
		MaxInFlight: jc.MaxInFlight,
		QueueBytes:  jc.PendingBytes,
		Track:       track,
		Key:         keyOf,
		Backoff:     func(attempt int) time.Duration { return backoff(jc.Config, attempt) },
	}, dst, guard, d)
	return d
}

var _ pipe.Hooks = (*delivery)(nil)

// Retried counts a send or wait tried again and logs it, at most every 10 s.
func (d *delivery) Retried(what string, err error, attempt int) {
	d.stats.Update(func(s *status.JobSnapshot) { s.Retries++; s.NoteError(err) })
	d.e.observeRetry(d.jc.job.Name, err)
	if attempt == 0 || time.Since(d.retryLog) > 10*time.Second {
		d.retryLog = time.Now()
		d.log.Warn("destination error; retrying with backoff", "op", what, "attempt", attempt+1, "error", err)
	}
}

// Refused takes one document the destination refused through the
// per-document error path: recorded in the errors collection, counted, and
// left out of the destination (the pipe deletes its older version), or the
// job fails with onDocumentError: fail.
func (d *delivery) Refused(ctx context.Context, id bson.RawValue, code, msg string) error {
	name := d.jc.job.Name
	d.log.Warn("destination refused a document", "id", IDString(id), "code", code, "error", msg)
	// Recorded in both modes, so `meilistream retry` and `status` see it.
	if err := d.e.store.RecordDocumentError(ctx, name, id, code, msg, d.jc.job.Hash); err != nil {
		return err
	}
	if d.jc.OnDocumentError == "fail" {
		return errs.New(errs.Failed, name, "the destination refused document _id %s: %s: %s; fix the document (or the transform); onDocumentError is fail, so the job stops", IDString(id), code, msg)
	}
	d.errs.Add(id)
	d.made.Add(id)
	d.stats.Add(0, 0, 0, 1)
	d.e.observeDocError(name, code)
	return nil
}

// Settled counts a durable flight.
func (d *delivery) Settled(f *pipe.Flight, up, del int64) {
	d.stats.Update(func(s *status.JobSnapshot) { s.Indexed += up; s.Deleted += del; s.Batches++ })
	d.e.observeBatch(d.jc.job.Name, time.Since(f.SentAt()), len(f.Batch.Writes))
	d.e.observeWrites(d.jc.job.Name, up, del)
}
