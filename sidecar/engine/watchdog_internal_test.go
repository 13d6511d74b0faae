package engine

import (
	"strings"
	"testing"
	"time"
)

// Work waiting for a flush that never comes (the wedge of a flush timer
// not armed) is a stall once older than the bound, reported once; a
// batch made durable clears it, and the destination's slow answer widens
// the bound. Time is the check's argument: no test waits for it.
func TestWatchdogFindsWorkNotMoving(t *testing.T) {
	w := newWatchdog(10*time.Millisecond, 100*time.Millisecond, func() (int64, int32) { return 0, 0 })
	now := time.Now()
	if st, _ := w.check(now.Add(time.Hour)); st != nil {
		t.Fatalf("nothing pending: stalled %+v", *st)
	}
	w.queued(2)
	if st, changed := w.check(time.Now().Add(150 * time.Millisecond)); st != nil || changed {
		t.Fatalf("pending within the bound (10 flushes + 100ms): stalled %v", st)
	}
	st, changed := w.check(time.Now().Add(time.Second))
	if st == nil || !changed || !strings.Contains(st.Pending, "2 changes or related values waiting for a flush") || st.BoundSeconds != 0.2 {
		t.Fatalf("pending for a second: %+v changed %v; want stalled, with what, bound 0.2s", st, changed)
	}
	if st2, changed := w.check(time.Now().Add(2 * time.Second)); st2 == nil || changed || !st2.Since.Equal(st.Since) {
		t.Fatalf("still stalled: %+v changed %v; want the same stall, not a new one", st2, changed)
	}
	w.submitted()
	w.durable(5 * time.Second)
	if st, changed := w.check(time.Now().Add(time.Second)); st != nil || !changed {
		t.Fatalf("a batch durable a second ago, answered in 5s: %+v changed %v; want cleared", st, changed)
	}
}
