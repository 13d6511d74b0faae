package engine

import (
	"context"
	"sync"
	"time"
)

// tickGroup calls the functions it holds every interval, one after the
// other, from one runtime timer: every running job keeps a few gauges
// (its watchdog, its lag, its queue), and a parked goroutine for each,
// then a timer for each, was a good part of what an idle job costs: a
// process holding hundreds of jobs woke hundreds of times a second. A
// group's timer runs only while it holds functions. The zero value is
// ready to use.
type tickGroup struct {
	mu       sync.Mutex
	interval time.Duration
	members  map[*tick]struct{}
	t        *time.Timer
	running  bool
	calling  []*tick // fire's, reused
}

type tick struct {
	g       *tickGroup
	mu      sync.Mutex
	stopped bool
	f       func(now time.Time)
	last    func()
}

// every calls f every interval until ctx ends or stop is called,
// whichever comes first, and then calls last (when not nil) once; stop
// waits for a call of f in progress, and none starts after it. Ticks do
// not pile up: the next round is due an interval after the last one's
// calls returned. A function added between two rounds is first called
// at the next.
func (g *tickGroup) every(ctx context.Context, interval time.Duration, f func(now time.Time), last func()) (stop func()) {
	m := &tick{g: g, f: f, last: last}
	g.mu.Lock()
	if g.members == nil {
		g.members = map[*tick]struct{}{}
	}
	g.members[m] = struct{}{}
	g.interval = interval
	if !g.running {
		g.running = true
		if g.t == nil {
			g.t = time.AfterFunc(interval, g.fire)
		} else {
			g.t.Reset(interval)
		}
	}
	g.mu.Unlock()
	unhook := context.AfterFunc(ctx, m.halt)
	return func() {
		unhook()
		m.halt()
	}
}

func (g *tickGroup) fire() {
	g.mu.Lock()
	g.calling = g.calling[:0]
	for m := range g.members {
		g.calling = append(g.calling, m)
	}
	calling := g.calling
	g.mu.Unlock()
	now := time.Now()
	for _, m := range calling {
		m.call(now)
	}
	g.mu.Lock()
	clear(calling)
	if len(g.members) > 0 {
		g.t.Reset(g.interval)
	} else {
		g.running = false
	}
	g.mu.Unlock()
}

func (m *tick) call(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.stopped {
		m.f(now)
	}
}

func (m *tick) halt() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	g := m.g
	g.mu.Lock()
	delete(g.members, m)
	if len(g.members) == 0 && g.t.Stop() {
		g.running = false // else the round under way ends it
	}
	g.mu.Unlock()
	if m.last != nil {
		m.last()
	}
}
