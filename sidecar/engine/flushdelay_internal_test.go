package engine

import (
	"testing"
	"time"
)

// TestFlushDelayCountsFromTheWrite: a batch waits flushInterval from when
// its first change was written, at most half of it taken off for the
// change's way to the sidecar, and the whole interval when the time is
// unknown or ahead of the sidecar's clock.
func TestFlushDelayCountsFromTheWrite(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	const iv = time.Second
	for _, c := range []struct {
		name    string
		wall    time.Time
		changes bool
		want    time.Duration
	}{
		{"a change written 30 ms ago waits the rest of the interval", now.Add(-30 * time.Millisecond), true, 970 * time.Millisecond},
		{"a change written long ago still waits half the interval", now.Add(-time.Hour), true, iv / 2},
		{"a server clock ahead of the sidecar's leaves the whole interval", now.Add(time.Minute), true, iv},
		{"an event without wallTime waits the whole interval", time.Time{}, true, iv},
		{"related values without a change wait the whole interval", now.Add(-30 * time.Millisecond), false, iv},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := flushDelay(iv, c.wall, c.changes, now); got != c.want {
				t.Errorf("flushDelay = %s, want %s", got, c.want)
			}
		})
	}
}
