package engine

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// ReindexSummary is what a reindex did (this run; a resumed reindex's
// earlier pages are in Resumed... fields).
type ReindexSummary struct {
	Indexed  int64 // documents written
	Skipped  int64 // documents the transform kept out
	Removed  int64 // documents the sweep of an in-place reindex deleted
	Errors   int64 // documents left out for a per-document error (recorded)
	Resumed  bool  // continued from a checkpoint
	Previous int64 // documents read by earlier runs of a resumed reindex
	Duration time.Duration
}

// Reindex rebuilds job's destination from the collection under l
// (`meilistream reindex NAME`): it follows the job's stream, interleaves a
// reindex (continuing a checkpointed one of the same transform), and stops
// cleanly once the rebuilt destination is live and its position recorded.
// Cancelling ctx stops it cleanly (error: ctx's cause); a later Reindex or
// Run resumes from the checkpoint.
func (e *Engine) Reindex(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats) (ReindexSummary, error) {
	e.setKind(job.Name, job.Kind.String())
	sum, err := e.run(ctx, job, dst, l, stats, true)
	stats.SetPhase(status.PhaseIdle)
	if err == nil && sum == nil {
		err = context.Cause(ctx)
		if err == nil {
			err = errs.New(errs.Failed, job.Name, "the reindex stopped before it was done")
		}
	}
	if err != nil {
		err = errs.WithJob(job.Name, err)
		stats.SetError(err)
		return ReindexSummary{}, err
	}
	return *sum, nil
}

// summary is what the snapshot did.
func (s *snapshot) summary() *ReindexSummary {
	return &ReindexSummary{
		Indexed: s.indexed.Load(), Skipped: s.skipped.Load(), Removed: s.removed.Load(), Errors: s.bad.Load(),
		Resumed: s.resumed, Previous: s.prev, Duration: s.took,
	}
}

// finished notes the end of the reindex, in the log and the metrics.
func (s *snapshot) finished(took time.Duration) {
	s.took = took
	s.stopProgress()
	s.e.observeReindex(s.jc.job.Name, took)
	s.log.Info("reindex done", "indexed", s.indexed.Load(), "skipped", s.skipped.Load(), "removed", s.removed.Load(), "errors", s.bad.Load(),
		"resumed", s.resumed, "duration", took.Round(time.Millisecond))
}

// partSize is how many documents a reindex reads and sends at a time: half
// a page, so that one part is read while the one before it is transformed
// and uploaded and still at most one page is read and not checkpointed.
// It is not capped by batchSize, follow's trigger: bigger batches cost less
// per document (fewer tasks, getMores and checkpoints), and a part is one
// cursor batch, so never more than the 16 MB MongoDB returns at once,
// however large the documents.
func partSize(pageSize int) int {
	return max(1, pageSize/2)
}

// window bounds the documents a reindex has read and not yet
// checkpointed.
type window struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{} // closed (and replaced) when room is made
}

func newWindow(n int) *window { return &window{max: n, wake: make(chan struct{})} }

// acquire waits until n more documents fit, or ctx ends or p fails.
func (w *window) acquire(ctx context.Context, p *pipe.Pipe, n int) error {
	for {
		w.mu.Lock()
		if w.used+n <= w.max || w.used == 0 {
			w.used += n
			w.mu.Unlock()
			return nil
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.Failed():
			if err := p.Err(); err != nil {
				return err
			}
			return pipe.Closed
		}
	}
}

// release lets n documents out.
func (w *window) release(n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	w.used -= n
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}

// checkpointer records a reindex's checkpoint off the pipe's wait stage: a
// part that became durable only hands over its last _id and size (in
// submission order, so the last one handed over is the furthest durable
// point, in _id order). One goroutine writes the latest (parts that became
// durable during a write are recorded together by the next one), then lets
// their documents out of the window. The checkpoint is fenced by the lease
// epoch (jobstate.Store.WriteCheckpoint); a failed write fails the pipe.
type checkpointer struct {
	e        *Engine
	job      string
	l        Lease
	cp       *jobstate.Checkpoint // the goroutine's until done is closed
	win      *window
	failPipe func(error)
	written  func(count int64)

	ctx    context.Context
	cancel context.CancelCauseFunc
	wake   chan struct{} // one pending signal at most
	done   chan struct{}
	err    error // set before done is closed

	mu     sync.Mutex
	lastID bson.RawValue
	count  int64 // documents read up to lastID, earlier runs included
	docs   int   // documents durable and not yet recorded
	closed bool
}

func (e *Engine) newCheckpointer(ctx context.Context, job string, l Lease, cp *jobstate.Checkpoint, win *window, failPipe func(error), written func(int64)) *checkpointer {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &checkpointer{
		e: e, job: job, l: l, cp: cp, win: win, failPipe: failPipe, written: written,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}),
		lastID: cp.LastID, count: cp.Count,
	}
	go c.loop()
	return c
}

// durable hands over a part that is Durable: n documents up to last.
func (c *checkpointer) durable(last bson.RawValue, n int) {
	c.mu.Lock()
	c.lastID = last
	c.count += int64(n)
	c.docs += n
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		last, count, docs, closed := c.lastID, c.count, c.docs, c.closed
		c.docs = 0
		c.mu.Unlock()
		if docs > 0 {
			c.cp.LastID, c.cp.Count = last, count
			if err := c.e.store.WriteCheckpoint(c.ctx, c.job, c.l, c.cp); err != nil {
				if c.ctx.Err() != nil {
					err = context.Cause(c.ctx)
				}
				c.err = err
				c.failPipe(err)
				return
			}
			c.win.release(docs)
			c.written(count)
			continue
		}
		if closed {
			return
		}
		select {
		case <-c.wake:
		case <-c.ctx.Done():
			c.err = context.Cause(c.ctx)
			return
		}
	}
}

// close records what was handed over and stops; it returns why a write
// failed or the checkpointer was stopped.
func (c *checkpointer) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
	return c.err
}

// fail stops the checkpointer without waiting.
func (c *checkpointer) fail(err error) { c.cancel(err) }

// abort stops the checkpointer and waits until it has.
func (c *checkpointer) abort() {
	c.cancel(pipe.Closed)
	<-c.done
}

// resumeFilter selects the _ids after last in _id order. MongoDB's
// comparison operators only match values of the same canonical type ("type
// bracketing",
// https://www.mongodb.com/docs/manual/reference/mql/query-predicates/type-bracketing/),
// so {$gt: last} alone would skip every _id of a type that sorts after
// last's: those are added by $type.
func resumeFilter(last bson.RawValue) bson.D {
	if last.Type == 0 {
		return bson.D{}
	}
	gt := bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}
	later := laterTypes(last.Type)
	if len(later) == 0 {
		return gt
	}
	return bson.D{{Key: "$or", Value: bson.A{gt, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}}}}}
}

// typeRank is MongoDB's canonical sort order of BSON types
// (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
var typeRank = map[bson.Type]int{
	bson.TypeMinKey: 0, bson.TypeNull: 1, bson.TypeUndefined: 1,
	bson.TypeDouble: 2, bson.TypeInt32: 2, bson.TypeInt64: 2, bson.TypeDecimal128: 2,
	bson.TypeString: 3, bson.TypeSymbol: 3, bson.TypeEmbeddedDocument: 4, bson.TypeArray: 5,
	bson.TypeBinary: 6, bson.TypeObjectID: 7, bson.TypeBoolean: 8, bson.TypeDateTime: 9,
	bson.TypeTimestamp: 10, bson.TypeRegex: 11, bson.TypeDBPointer: 12, bson.TypeJavaScript: 13,
	bson.TypeCodeWithScope: 14, bson.TypeMaxKey: 15,
}

// laterTypes returns the type numbers ($type accepts them) of the types
// that sort after t.
func laterTypes(t bson.Type) bson.A {
	r, ok := typeRank[t]
	if !ok {
		return nil
	}
	var out bson.A
	for typ, rank := range typeRank {
		if rank > r && typ != bson.TypeArray { // an _id is never an array
			n := int32(typ)
			if typ == bson.TypeMinKey {
				n = -1
			}
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].(int32) < out[j].(int32) })
	return out
}
