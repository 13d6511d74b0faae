package transform

import (
	"context"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// guard interrupts a vm's call that runs past its time limit or whose
// context ends. It costs two uncontended lock pairs per call: its timer is
// armed once and, while calls keep coming, re-armed only when it fires
// (every time limit, not every call), and a context is registered once for
// all the calls made under it (a reindex part's documents all share one),
// where a timer reset and stop plus a context.AfterFunc registration per
// call cost about a microsecond a document, and the registrations of two
// workers on one context contended for its lock.
type guard struct {
	rt    *goja.Runtime
	mu    sync.Mutex
	timer *time.Timer
	armed time.Time // when the timer fires; zero when it is not armed

	running  bool
	deadline time.Time
	fired    bool // the current call was interrupted

	ctx     context.Context // the context registered, if any
	stopCtx func() bool
}

func newGuard(rt *goja.Runtime) *guard {
	g := &guard{rt: rt}
	g.timer = time.AfterFunc(time.Hour, g.onTimer)
	g.timer.Stop()
	return g
}

// begin starts guarding a call under ctx for at most timeout.
func (g *guard) begin(ctx context.Context, timeout time.Duration) {
	if ctx != g.ctx {
		g.watch(ctx)
	}
	now := time.Now()
	g.mu.Lock()
	g.running, g.fired = true, false
	g.deadline = now.Add(timeout)
	if ctx.Err() != nil { // ended before (its callback found no call to stop)
		g.fired = true
		g.rt.Interrupt(context.Cause(ctx))
	}
	if g.armed.IsZero() || g.armed.After(g.deadline) {
		g.armed = g.deadline
		g.timer.Reset(timeout)
	}
	g.mu.Unlock()
}

// end stops guarding the call and reports whether the runtime can be used
// again: false when an interrupt was sent (it may still be pending in the
// runtime).
func (g *guard) end() bool {
	g.mu.Lock()
	g.running = false
	ok := !g.fired
	g.mu.Unlock()
	return ok
}

func (g *guard) onTimer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		g.armed = time.Time{}
		return
	}
	now := time.Now()
	if !now.Before(g.deadline) {
		g.armed = time.Time{}
		if !g.fired {
			g.fired = true
			g.rt.Interrupt(errTimeout)
		}
		return
	}
	g.armed = g.deadline
	g.timer.Reset(g.deadline.Sub(now))
}

// watch registers ctx in place of the context before: when it ends, a
// call running under it is interrupted with its cause.
func (g *guard) watch(ctx context.Context) {
	if g.stopCtx != nil {
		g.stopCtx()
		g.stopCtx = nil
	}
	g.mu.Lock()
	g.ctx = ctx
	g.mu.Unlock()
	if ctx.Done() == nil {
		return
	}
	g.stopCtx = context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.running && g.ctx == ctx && !g.fired {
			g.fired = true
			g.rt.Interrupt(context.Cause(ctx))
		}
	})
}

// close releases the timer and the context registration (the vm is
// dropped).
func (g *guard) close() {
	g.timer.Stop()
	g.watch(context.Background()) // which cannot end: nothing registered
}
