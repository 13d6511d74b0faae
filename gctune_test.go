package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestMemoryLimitFollowsTheContainer: the soft memory limit is 90% of the
// container's (the cgroup's), none without one, and GOMEMLIMIT wins.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	prevLimit, prevGC := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prevLimit)
		debug.SetGCPercent(prevGC)
	})
	t.Setenv("GOGC", "")
	t.Setenv("AUTOMEMLIMIT", "")
	os.Unsetenv("AUTOMEMLIMIT") // set and empty is a bad ratio to automemlimit
	t.Setenv("GOMEMLIMIT", "")
	reset := func() { debug.SetMemoryLimit(math.MaxInt64) }

	reset()
	if got, want := limitOf(tuneGC(memlimit.Limit(512<<20), 0)), ninety(512<<20); got != want {
		t.Errorf("a 512MiB container: limit %d, want %d (90%%)", got, want)
	}
	if gc := debug.SetGCPercent(-1); gc != defaultGCPercent {
		t.Errorf("GOGC %d, want %d", gc, defaultGCPercent)
	} else {
		debug.SetGCPercent(gc)
	}
	reset()
	if got := limitOf(tuneGC(memlimit.Limit(2<<30), 0)); got != ninety(2<<30) {
		t.Errorf("a 2GiB container: limit %d, not the fixed limit of old", got)
	}
	reset()
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	if got := limitOf(tuneGC(noLimit, 0)); got != math.MaxInt64 {
		t.Errorf("no container limit: limit %d, want none", got)
	}
	if memoryLimitText(math.MaxInt64) != "none" || memoryLimitText(460<<20) != "460MiB" {
		t.Errorf("memoryLimitText: %q %q", memoryLimitText(math.MaxInt64), memoryLimitText(460<<20))
	}
	reset()
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(100 << 20) // what the runtime read from it at start
	if got := limitOf(tuneGC(memlimit.Limit(512<<20), 0)); got != 100<<20 {
		t.Errorf("GOMEMLIMIT set: limit %d, want it kept", got)
	}
}

// limitOf is tuneGC's limit; the pacer it started is stopped, so that
// tests that follow set GOGC alone.
func limitOf(limit int64, p *gcPacer) int64 {
	if p != nil {
		p.stop()
	}
	return limit
}

func ninety(limit uint64) int64 { return int64(float64(limit) * memoryLimitRatio) }
