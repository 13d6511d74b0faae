package transform

import (
	"context"
	"sync"
	"time"
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
	v     *vm
	mu    sync.Mutex
	timer *time.Timer
	armed time.Time // when the timer fires; zero when it is not armed

	running  bool
	deadline time.Time
	fired    bool // the current call was interrupted
	// giveUp is when, after an interrupt, a call still running is
	// abandoned: abandon is then closed (once: the vm is never used
	// again after an interrupt).
	giveUp  time.Time
	abandon chan struct{}
	closed  bool

	ctx     context.Context // the context registered, if any
	stopCtx func() bool

	mem    *memWatch // nil: no memory bound
	reason any       // why the current call was interrupted
}

func newGuard(v *vm) *guard {
	g := &guard{v: v, abandon: make(chan struct{})}
	g.timer = time.AfterFunc(time.Hour, g.onTimer)
	g.timer.Stop()
	return g
}

// begin starts guarding a call under ctx for at most timeout.
func (g *guard) begin(ctx context.Context, timeout time.Duration) {
	if ctx != g.ctx {
		g.watch(ctx)
	}
	if g.mem != nil {
		g.mem.begin()
	}
	now := time.Now()
	g.mu.Lock()
	g.running, g.fired, g.reason = true, false, nil
	g.deadline = now.Add(timeout)
	if ctx.Err() != nil { // ended before (its callback found no call to stop)
		g.stopCall(now, context.Cause(ctx))
	} else if g.armed.IsZero() || g.armed.After(g.deadline) {
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
	if g.mem != nil {
		g.mem.end()
	}
	return ok
}

// overMemory says whether the last call was interrupted by the memory
// bound (memory.go).
func (g *guard) overMemory() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason == errMemory
}

func (g *guard) onTimer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		g.armed = time.Time{}
		return
	}
	now := time.Now()
	if g.fired {
		if !now.Before(g.giveUp) {
			g.armed = time.Time{}
			if !g.closed {
				g.closed = true
				close(g.abandon)
			}
			return
		}
		g.armed = g.giveUp
		g.timer.Reset(g.giveUp.Sub(now))
		return
	}
	if !now.Before(g.deadline) {
		g.stopCall(now, errTimeout)
		return
	}
	g.armed = g.deadline
	g.timer.Reset(g.deadline.Sub(now))
}

// stopCall interrupts the running call with reason and arms the timer to
// abandon it abandonGrace later (g.mu held).
func (g *guard) stopCall(now time.Time, reason error) {
	if g.fired {
		return
	}
	g.fired, g.reason = true, reason
	g.v.interrupt(reason)
	g.giveUp = now.Add(abandonGrace)
	g.armed = g.giveUp
	g.timer.Reset(abandonGrace)
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
		if g.running && g.ctx == ctx {
			g.stopCall(time.Now(), context.Cause(ctx))
		}
	})
}

// close releases the timer and the context registration (the vm is
// dropped).
func (g *guard) close() {
	if g.mem != nil {
		g.mem.remove(g)
	}
	g.timer.Stop()
	g.watch(context.Background()) // which cannot end: nothing registered
}
