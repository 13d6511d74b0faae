package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/meilistream/meilistream/internal/testutil"
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
	if got, want := first(tuneGC(memlimit.Limit(512<<20), 0)), ninety(512<<20); got != want {
		t.Errorf("a 512MiB container: limit %d, want %d (90%%)", got, want)
	}
	if gc := debug.SetGCPercent(-1); gc != defaultGCPercent {
		t.Errorf("GOGC %d, want %d", gc, defaultGCPercent)
	} else {
		debug.SetGCPercent(gc)
	}
	reset()
	if got := first(tuneGC(memlimit.Limit(2<<30), 0)); got != ninety(2<<30) {
		t.Errorf("a 2GiB container: limit %d, not the fixed limit of old", got)
	}
	reset()
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	got, f := tuneGC(noLimit, 0)
	if got != math.MaxInt64 {
		t.Errorf("no container limit: limit %d, want none at the start", got)
	}
	if f == nil {
		t.Error("no container limit: the limit does not follow the heap")
	} else {
		f.stop()
	}
	if memoryLimitText(math.MaxInt64) != "none" || memoryLimitText(460<<20) != "460MiB" {
		t.Errorf("memoryLimitText: %q %q", memoryLimitText(math.MaxInt64), memoryLimitText(460<<20))
	}
	reset()
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(100 << 20) // what the runtime read from it at start
	if got, f := tuneGC(memlimit.Limit(512<<20), 0); got != 100<<20 || f != nil {
		t.Errorf("GOMEMLIMIT set: limit %d (following the heap: %t), want it kept", got, f != nil)
	}
}

func ninety(limit uint64) int64 { return int64(float64(limit) * memoryLimitRatio) }

func first(limit int64, f *heapFollower) int64 {
	if f != nil {
		f.stop()
	}
	return limit
}

// TestMemoryLimitFollowsTheHeap: without a limit of its own, the soft
// limit follows the least heap found live over the last collections: at
// the floor for a small heap, GOGC's goal with room when the heap keeps
// more, back down once it keeps less, and no longer once another limit is
// set.
func TestMemoryLimitFollowsTheHeap(t *testing.T) {
	prevLimit, prevGC := debug.SetMemoryLimit(math.MaxInt64), debug.SetGCPercent(400)
	t.Cleanup(func() {
		debug.SetMemoryLimit(prevLimit)
		debug.SetGCPercent(prevGC)
	})
	f := followHeap(400)
	t.Cleanup(f.stop)
	limit := func() int64 { return debug.SetMemoryLimit(-1) }
	collect := func(want func(int64) bool) func() bool {
		return func() bool { runtime.GC(); return want(limit()) }
	}
	show := func() string { return fmt.Sprintf("limit %d MiB", limit()>>20) }
	testutil.Until(t, 10*time.Second, "the floor for a small heap", collect(func(l int64) bool { return l == followFloor }), show)

	kept := make([][]byte, 0, 200)
	for range 200 {
		kept = append(kept, make([]byte, 1<<20)) // 200 MiB live
	}
	// GOGC=400's goal for 200 MiB, with room: about 1250 MiB.
	testutil.Until(t, 10*time.Second, "GOGC's goal for a heap of 200 MiB", collect(func(l int64) bool { return l > 1000<<20 }), show)
	runtime.KeepAlive(kept)
	kept = nil
	testutil.Until(t, 10*time.Second, "the floor again once the heap is given up", collect(func(l int64) bool { return l == followFloor }), show)

	debug.SetMemoryLimit(100 << 20)
	for range followWindow + 2 {
		runtime.GC()
	}
	if got := limit(); got != 100<<20 {
		t.Errorf("after a limit of 100 MiB was set: limit %d MiB, want it kept", got>>20)
	}
}
