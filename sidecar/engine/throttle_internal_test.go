package engine

import (
	"context"
	"strings"
	"testing"
	"time"
)

// fakeClock is a throttle's clock that sleeps by moving itself on.
type fakeClock struct {
	now    time.Time
	slept  time.Duration
	sleeps int
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	c.slept += d
	c.sleeps++
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// chunks runs n chunks of size docs, each read taking read on the clock
// before its Wait, and returns the documents per second they went at.
func chunks(t *testing.T, th *Throttle, c *fakeClock, n, size int, read time.Duration) float64 {
	t.Helper()
	start := c.now
	for range n {
		c.advance(read)
		th.ObserveRead(read)
		if err := th.Wait(context.Background(), size); err != nil {
			t.Fatal(err)
		}
	}
	return float64(n*size) / c.now.Sub(start).Seconds()
}

func TestTheRateBoundsTheChunks(t *testing.T) {
	c := newFakeClock()
	th := newThrottle(ThrottleConfig{Rate: 500, MaxReadLatency: -1, MaxTasks: -1}, nil, c)
	// Reads take 10ms: unbounded they would go at 100000 documents/s.
	got := chunks(t, th, c, 50, 1000, 10*time.Millisecond)
	if got < 480 || got > 520 {
		t.Fatalf("50 chunks of 1000 at rate 500 went at %.0f documents/s", got)
	}
	st := th.State()
	if st.Reason != ThrottleRate || st.Why != "rate 500 documents/s" || st.Rate != 500 {
		t.Fatalf("state %+v, want throttled by rate 500", st)
	}
}

func TestNoRateAndNoPressureNeverWaits(t *testing.T) {
	c := newFakeClock()
	th := newThrottle(ThrottleConfig{}, func() (int, bool) { return 2, true }, c)
	chunks(t, th, c, 100, 1000, 5*time.Millisecond)
	if c.sleeps != 0 {
		t.Fatalf("slept %d times (%s) with no rate and no pressure", c.sleeps, c.slept)
	}
	if st := th.State(); st.Reason != "" || st.Rate != 0 {
		t.Fatalf("state %+v, want not throttled", st)
	}
}

func TestAPauseDoesNotBecomeABurst(t *testing.T) {
	c := newFakeClock()
	th := newThrottle(ThrottleConfig{Rate: 1000, MaxReadLatency: -1, MaxTasks: -1}, nil, c)
	chunks(t, th, c, 5, 1000, time.Millisecond)
	c.advance(time.Hour) // nothing read for an hour
	got := chunks(t, th, c, 20, 1000, time.Millisecond)
	if got > 1100 {
		t.Fatalf("after a pause 20 chunks went at %.0f documents/s, over the rate 1000", got)
	}
}

func TestSlowReadsBrakeAndFastOnesRelease(t *testing.T) {
	c := newFakeClock()
	th := newThrottle(ThrottleConfig{MaxReadLatency: 500 * time.Millisecond, MaxTasks: -1}, nil, c)
	fast := chunks(t, th, c, 10, 1000, 100*time.Millisecond) // 10000 documents/s
	if st := th.State(); st.Reason != "" {
		t.Fatalf("fast reads: state %+v, want not throttled", st)
	}
	// MongoDB slows to 900ms a chunk: the smoothed latency passes the bound.
	chunks(t, th, c, 10, 1000, 900*time.Millisecond)
	st := th.State()
	if st.Reason != ThrottleLatency || !strings.HasPrefix(st.Why, "mongodb latency ") || !strings.HasSuffix(st.Why, " > 500ms") {
		t.Fatalf("slow reads: state %+v, want braked for mongodb latency", st)
	}
	if st.Rate <= 0 || st.Rate >= 1000/0.9 {
		t.Fatalf("slow reads: braked rate %.0f, want below what the reads alone allow (%.0f)", st.Rate, 1000/0.9)
	}
	braked := st.Rate
	// Never stopped: the floor holds however long it lasts.
	chunks(t, th, c, 200, 1000, 900*time.Millisecond)
	if st := th.State(); st.Rate < brakeFloor {
		t.Fatalf("a long brake fell to %.1f documents/s, under the floor %d", st.Rate, brakeFloor)
	}
	// MongoDB recovers: the rate climbs back and the brake comes off.
	chunks(t, th, c, 40, 1000, 100*time.Millisecond)
	st = th.State()
	if st.Reason != "" || st.Rate != 0 {
		t.Fatalf("recovered: state %+v, want the brake off", st)
	}
	again := chunks(t, th, c, 10, 1000, 100*time.Millisecond)
	if again < fast*0.9 {
		t.Fatalf("recovered: %.0f documents/s, want about the unbraked %.0f (braked was %.0f)", again, fast, braked)
	}
}

func TestABacklogBrakesUnderTheConfiguredRate(t *testing.T) {
	c := newFakeClock()
	tasks := 3
	th := newThrottle(ThrottleConfig{Rate: 2000, MaxReadLatency: -1, MaxTasks: 6}, func() (int, bool) { return tasks, true }, c)
	chunks(t, th, c, 10, 1000, 10*time.Millisecond)
	if st := th.State(); st.Reason != ThrottleRate || st.Rate != 2000 {
		t.Fatalf("state %+v, want the rate alone", st)
	}
	tasks = 9
	chunks(t, th, c, 3, 1000, 10*time.Millisecond)
	st := th.State()
	if st.Reason != ThrottleBacklog || st.Why != "meilisearch backlog 9 tasks > 6" || st.Rate >= 2000 {
		t.Fatalf("state %+v, want braked for the backlog below 2000", st)
	}
	// One decrease per cooldown, however many chunks pass the bound in it.
	th.charge(0)
	before := th.State().Rate
	th.charge(0)
	if st := th.State(); st.Rate != before {
		t.Fatalf("a second decrease within the cooldown: %.0f -> %.0f", before, st.Rate)
	}
	tasks = 1
	chunks(t, th, c, 1, 1000, 10*time.Millisecond)
	if st := th.State(); !strings.HasPrefix(st.Why, easing) || st.Reason != ThrottleBacklog {
		t.Fatalf("drained: state %+v, want easing off after the backlog", st)
	}
	chunks(t, th, c, 20, 1000, 10*time.Millisecond)
	if st := th.State(); st.Reason != ThrottleRate || st.Rate != 2000 {
		t.Fatalf("drained: state %+v, want back to the rate 2000", st)
	}
}

func TestAnUncountedBacklogNeverBrakes(t *testing.T) {
	c := newFakeClock()
	th := newThrottle(ThrottleConfig{MaxTasks: 1}, func() (int, bool) { return 100, false }, c)
	chunks(t, th, c, 10, 1000, time.Millisecond)
	if c.sleeps != 0 {
		t.Fatalf("slept %d times for a sink that counts no tasks", c.sleeps)
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	th := NewThrottle(ThrottleConfig{Rate: 1, MaxReadLatency: -1, MaxTasks: -1}, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := context.Canceled
	cancel(cause)
	if err := th.Wait(ctx, 1000); err != cause {
		t.Fatalf("Wait on a cancelled context: %v, want its cause", err)
	}
}

func TestShareRateSplitsTheRateBetweenSlots(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		slots int
		want  float64
	}{{1000, 4, 250}, {1000, 1, 1000}, {1000, 0, 1000}, {0, 4, 0}} {
		if got := ShareRate(c.rate, c.slots); got != c.want {
			t.Errorf("ShareRate(%v, %d) = %v, want %v", c.rate, c.slots, got, c.want)
		}
	}
}
