package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/sidecar/pipe"
)

// Task is what a Fanout reads: the documents matching Filter (a related
// change's dependents, relatedKeys' queries) in pages, or the
// documents IDs in one page (a page of a retry of recorded documents,
// Retry the request it serves).
type Task struct {
	Filter bson.D
	IDs    []bson.RawValue
	Retry  *retryRequest
}

// Fanout is the reader of the documents the job sends again: a chain
// reading each task's documents in _id-ordered pages, each between two
// marks, which the follow loop sends at their mark without the documents
// the stream changed meanwhile (the stream's version went before, or comes
// after). So a page is never an older version landing after a newer one,
// and a category used by a million products is read a page at a time,
// never held in memory.
type Fanout struct {
	*Chain
	win      *window
	pageSize int
	tasks    chan *Task

	cancel  context.CancelCauseFunc
	stopped chan struct{}
}

// NewFanout returns the fan-out reader of the job, reading at most
// pageSize documents ahead of what is durable (Release).
func NewFanout(src Source, pageSize int) *Fanout {
	return &Fanout{
		Chain:    newChain(src, "fan-out"),
		win:      newWindow(pageSize),
		pageSize: pageSize,
		tasks:    make(chan *Task, 1<<16),
		stopped:  make(chan struct{}),
	}
}

// Tasks takes the tasks to read, in order.
func (fo *Fanout) Tasks() chan<- *Task { return fo.tasks }

// Release lets the n documents of a page out of the window once durable.
func (fo *Fanout) Release(n int) { fo.win.release(n) }

// Begin starts the reader, for the pipe p the follow loop hands the pages
// to; it ends with ctx or fails p.
func (fo *Fanout) Begin(ctx context.Context, p *pipe.Pipe) {
	ctx, fo.cancel = context.WithCancelCause(ctx)
	go func() {
		defer close(fo.stopped)
		if err := fo.read(ctx, p); err != nil && ctx.Err() == nil {
			p.Fail(err)
		}
	}()
}

// Stop ends the reader and waits for it. Idempotent.
func (fo *Fanout) Stop() {
	if fo.cancel != nil {
		fo.cancel(pipe.Closed)
		<-fo.stopped
	}
}

// read serves the tasks in order: the opening mark, then for each task a
// mark opening its window and its pages, each followed by its mark; a
// task's last page is final.
func (fo *Fanout) read(ctx context.Context, p *pipe.Pipe) error {
	sctx, marks, end, err := fo.session(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := fo.mark(sctx, marks, nil); err != nil {
		return err
	}
	size := PartSize(fo.pageSize)
	for {
		var t *Task
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
		if t.IDs != nil {
			if err := fo.readIDsPage(ctx, sctx, marks, p, t, size); err != nil {
				return err
			}
			continue
		}
		var last bson.RawValue
		for {
			if err := fo.win.acquire(ctx, p, size); err != nil {
				return err
			}
			c, err := fo.readChunk(sctx, t.Filter, last, size)
			if err != nil {
				return err
			}
			fo.win.release(size - c.N)
			if c.N > 0 {
				last = c.Last
			}
			c.Task = t
			if err := fo.mark(sctx, marks, c); err != nil {
				return err
			}
			if c.Final {
				break
			}
		}
	}
}

// readIDsPage reads a task's documents by _id (one find: a task holds at
// most size ids) and registers them under a mark, with the ids the
// collection no longer holds as Gone.
func (fo *Fanout) readIDsPage(ctx, sctx context.Context, marks *mongo.Collection, p *pipe.Pipe, t *Task, size int) error {
	if err := fo.win.acquire(ctx, p, size); err != nil {
		return err
	}
	c, err := fo.readIDs(sctx, t.IDs)
	if err != nil {
		return err
	}
	fo.win.release(size - c.N)
	c.Task = t
	return fo.mark(sctx, marks, c)
}
