package lease

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestPauseJittersWithinBoundsAndNeverExceedsTheCap(t *testing.T) {
	m := &Manager{base: 100 * time.Millisecond, cap: 2 * time.Second}
	for _, tc := range []struct {
		name     string
		d        time.Duration
		lo, hi   time.Duration
		draws    []float64
		wantFrom []time.Duration // the pause for each draw
	}{
		{"below the cap: ±25% of the backoff", time.Second, 750 * time.Millisecond, 1250 * time.Millisecond,
			[]float64{0, 0.5, 0.999999}, []time.Duration{750 * time.Millisecond, time.Second, 1249999500}},
		{"at the cap: 75%..100% of the cap", 2 * time.Second, 1500 * time.Millisecond, 2 * time.Second,
			[]float64{0, 0.5, 0.999999}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, r := range tc.draws {
				m.jitter = func() float64 { return r }
				p := m.pause(tc.d)
				if p < tc.lo || p > tc.hi || p > m.cap {
					t.Errorf("pause(%s) with draw %v = %s, want within [%s, %s] and <= cap %s", tc.d, r, p, tc.lo, tc.hi, m.cap)
				}
				if tc.wantFrom != nil && p != tc.wantFrom[i] {
					t.Errorf("pause(%s) with draw %v = %s, want %s", tc.d, r, p, tc.wantFrom[i])
				}
			}
		})
	}
	t.Run("pods at the cap do not poll in lockstep", func(t *testing.T) {
		m.jitter = randFloat
		seen := map[time.Duration]bool{}
		for range 50 {
			seen[m.pause(m.cap).Round(10*time.Millisecond)] = true
		}
		if len(seen) < 10 {
			t.Fatalf("50 pauses at the cap took only %d distinct values", len(seen))
		}
	})
}

// A standby polls at most every TTL/3 unless told otherwise, so it takes
// over within one renewal period of an expiry.
func TestAStandbyPollsAtMostEveryThirdOfTheTTL(t *testing.T) {
	m, err := New(&mongo.Collection{}, "a:1:x", Options{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m.cap != time.Second {
		t.Fatalf("the wait cap is %s, want TTL/3 (1s)", m.cap)
	}
}
