package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/testutil"
)

func TestTickingCallsUntilStoppedThenOnceMore(t *testing.T) {
	for _, how := range []string{"stop", "its context"} {
		t.Run("ended by "+how, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var calls, lasts atomic.Int32
			var late atomic.Bool
			stop := ticking(ctx, time.Millisecond, func(time.Time) {
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
