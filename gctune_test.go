package main

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

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

// TestAnIdleProcessCollects: with no collection of its own (the collector
// off here, as in a process that allocates little under GOGC=400),
// collectWhenIdle runs one once the garbage is worth it, and stops with
// its context.
func TestAnIdleProcessCollects(t *testing.T) {
	prev := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	runtime.GC() // the garbage counts from here
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	read := func() uint64 {
		metrics.Read(cycles)
		return cycles[0].Value.Uint64()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		collectWhenIdle(ctx, 20*time.Millisecond)
	}()
	start := read()
	var sink [][]byte
	deadline := time.Now().Add(time.Minute) // a bound for a hung test
	for read() < start+1 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no collection in a minute of allocating 1 MB every 5 ms with the collector off (%d MB held)", len(sink))
		}
		if len(sink) < 2*idleGarbage>>20 {
			sink = append(sink, make([]byte, 1<<20))
		} else {
			sink = sink[:0:0] // garbage now
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("collectWhenIdle did not return after its context ended")
	}
}
