package engine

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
)

// checkpointer records a reindex's checkpoint off the pipe's wait stage: a
// part that became durable only hands over its last _id and size (in
// submission order, so the last one handed over is the furthest durable
// point, in _id order). One goroutine writes the latest (parts that became
// durable during a write are recorded together by the next one), then lets
// their documents out of the window. The checkpoint is fenced by the lease
// epoch (jobstate.Store.WriteCheckpoint); a failed write fails the pipe.
type checkpointer struct {
	store    *jobstate.Store
	job      string
	l        jobstate.Fence
	cp       *jobstate.Checkpoint // the goroutine's until done is closed
	win      *window
	failPipe func(error)
	written  func(count int64)
	// throttled says what slows the chunks now, written with the
	// checkpoint (jobstate.Checkpoint.Throttled).
	throttled func() string

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

func newCheckpointer(ctx context.Context, store *jobstate.Store, job string, l jobstate.Fence, cp *jobstate.Checkpoint, win *window, failPipe func(error), throttled func() string, written func(int64)) *checkpointer {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &checkpointer{
		store: store, job: job, l: l, cp: cp, win: win, failPipe: failPipe, written: written, throttled: throttled,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}),
		lastID: cp.LastID, count: cp.Count,
	}
	go c.loop()
	return c
}

// durable hands over a part that is durable: n documents up to last.
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
			if c.throttled != nil {
				c.cp.Throttled = c.throttled()
			}
			if err := c.store.WriteCheckpoint(c.ctx, c.job, c.l, c.cp); err != nil {
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

// abort stops the checkpointer and waits until it has.
func (c *checkpointer) abort() {
	c.cancel(pipe.Closed)
	<-c.done
}
