package engine

import (
	"context"
	"sync"
	"time"
)

// ticking calls f every interval, from a runtime timer rather than a
// goroutine parked on a ticker: every running job keeps a few such gauges
// (its watchdog, its lag, its queue), and a parked goroutine for each was a
// good part of what an idle job costs. It stops when ctx ends or stop is
// called, whichever comes first, and then calls last (when not nil) once;
// stop waits for a call of f in progress, and none starts after it.
// Ticks do not pile up: the next is due an interval after f returns.
func ticking(ctx context.Context, interval time.Duration, f func(now time.Time), last func()) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		f(time.Now())
		t.Reset(interval)
	})
	halt := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		stopped = true
		t.Stop()
		if last != nil {
			last()
		}
	}
	unhook := context.AfterFunc(ctx, halt)
	return func() {
		unhook()
		halt()
	}
}
