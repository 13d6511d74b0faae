package engine

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/deadletter"
	"github.com/meilistream/meilistream/sidecar/pipe"
)

// A related change (a document of a collection the job looks up, or a
// relate's namespace) sends again the job's documents that depend on it
// (lookup.Related says which). The follow loop gathers their values as it
// reads the stream, and at each flush hands them to the fan-out reader as
// tasks, one query each ({field: {$in: values}}).
//
// The reader is a chain (marks.go): it reads each task's documents in
// _id-ordered pages, each between two marks, and the follow loop sends a
// page at its mark without the documents the stream changed meanwhile (the
// stream's version went before, or comes after). So a page is never an
// older version landing after a newer one, and a category used by a million
// products is read a page at a time, never held in memory. Each document's
// lookups are resolved when its batch is prepared, after the related change:
// it goes out with the new related document (or without a deleted one).
//
// No position is recorded while a fan-out is outstanding: a crash before
// its last page is durable replays the related change from an earlier
// position, and with it the fan-out.

// fanTask is one query of dependents (lookup.Related's filters), or one
// page of a retry of recorded documents (retrylive.go): ids, read by _id,
// with retry the request it serves.
type fanTask struct {
	filter bson.D
	ids    []bson.RawValue
	retry  *deadletter.Request
}

// fanout is the reader of dependents.
type fanout struct {
	*chain
	win   *window
	tasks chan *fanTask

	cancel  context.CancelCauseFunc
	stopped chan struct{}
}

func (e *Engine) newFanout(jc jobConfig, l Lease, log hclog.Logger) *fanout {
	return &fanout{
		chain:   e.newChain(jc, l, log, "fan-out"),
		win:     newWindow(jc.PageSize),
		tasks:   make(chan *fanTask, 1<<16),
		stopped: make(chan struct{}),
	}
}

// begin starts the reader; it ends with ctx or fails the pipe.
func (fo *fanout) begin(ctx context.Context, p *pipe.Pipe) {
	ctx, fo.cancel = context.WithCancelCause(ctx)
	go func() {
		defer close(fo.stopped)
		if err := fo.read(ctx, p); err != nil && ctx.Err() == nil {
			p.Fail(err)
		}
	}()
}

// stop ends the reader and waits for it. Idempotent.
func (fo *fanout) stop() {
	if fo.cancel != nil {
		fo.cancel(pipe.Closed)
		<-fo.stopped
	}
}

// read serves the tasks in order: the opening mark, then for each task a
// mark opening its window and its pages, each followed by its mark; a
// task's last page is final.
func (fo *fanout) read(ctx context.Context, p *pipe.Pipe) error {
	sctx, marks, end, err := fo.session(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := fo.mark(sctx, marks, nil); err != nil {
		return err
	}
	size := partSize(fo.jc.PageSize)
	for {
		var t *fanTask
		select {
		case t = <-fo.tasks:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		// A task's first window opens with a mark of its own, written
		// after the flush that started it. The window from the chain's
		// mark before would also hold the stream's changes sent before
		// the related change, with the old related document: dropping
		// those rows from the page would leave them old.
		if err := fo.mark(sctx, marks, nil); err != nil {
			return err
		}
		if t.ids != nil {
			if err := fo.readRetryPage(ctx, sctx, marks, p, t, size); err != nil {
				return err
			}
			continue
		}
		var last bson.RawValue
		for {
			if err := fo.win.acquire(ctx, p, size); err != nil {
				return err
			}
			c, err := fo.readChunk(sctx, t.filter, last, size)
			if err != nil {
				return err
			}
			fo.win.release(size - c.n)
			if c.n > 0 {
				last = c.last
			}
			c.task = t
			if err := fo.mark(sctx, marks, c); err != nil {
				return err
			}
			if c.final {
				break
			}
		}
	}
}
