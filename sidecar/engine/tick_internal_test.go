package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/testutil"
)

func TestATickGroupCallsUntilStoppedThenOnceMore(t *testing.T) {
	for _, how := range []string{"stop", "its context"} {
		t.Run("ended by "+how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var calls, lasts atomic.Int32
			var late atomic.Bool
			var g tickGroup
			stop := g.every(ctx, time.Millisecond, func(time.Time) {
				if lasts.Load() > 0 {
					late.Store(true)
				}
				calls.Add(1)
			}, func() { lasts.Add(1) })
			testutil.Until(t, 15*time.Second, "three ticks", func() bool { return calls.Load() >= 3 }, nil)
			if how == "stop" {
				stop()
			} else {
				cancel()
				testutil.Until(t, 15*time.Second, "the end once the context ended", func() bool { return lasts.Load() == 1 }, nil)
			}
			stop() // idempotent, and waits for a tick in progress
			if lasts.Load() != 1 {
				t.Fatalf("last called %d times, want once", lasts.Load())
			}
			if late.Load() {
				t.Fatal("ticked after its end")
			}
		})
	}
}

// A group calls all its functions in one round from one timer, one after
// the other, each with the round's time: a process's hundreds of jobs
// cost one wake-up an interval per gauge, not one each.
func TestATickGroupCallsItsFunctionsInRounds(t *testing.T) {
	var g tickGroup
	const n = 50
	var mu sync.Mutex
	rounds := map[time.Time]int{}
	var running, overlapped atomic.Int32
	var stops []func()
	for range n {
		stops = append(stops, g.every(context.Background(), time.Millisecond, func(now time.Time) {
			if running.Add(1) > 1 {
				overlapped.Store(1)
			}
			mu.Lock()
			rounds[now]++
			mu.Unlock()
			running.Add(-1)
		}, nil))
	}
	full := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, c := range rounds {
			if c == n {
				k++
			}
		}
		return k
	}
	testutil.Until(t, 15*time.Second, "three rounds that called every function", func() bool { return full() >= 3 }, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("calls by time: %v", rounds)
	})
	for _, stop := range stops {
		stop()
	}
	if overlapped.Load() != 0 {
		t.Fatal("two functions of a group were called at once")
	}
	testutil.Until(t, 15*time.Second, "the group's timer stopped with its last function", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.members) == 0 && !g.running
	}, nil)
}
