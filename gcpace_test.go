package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// TestPacedPercent: the goal is GOGC's for the second least of the recent
// live heaps, never under the floor's for the last one.
func TestPacedPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name   string
		recent []uint64
		live   uint64
		want   int
	}{
		{"steady", []uint64{8 * mib, 8 * mib, 8 * mib}, 8 * mib, 400},
		{"first collection", []uint64{9 * mib}, 9 * mib, 400},
		{"one mark counted garbage", []uint64{8 * mib, 8 * mib, 10 * mib, 8 * mib, 10 * mib}, 10 * mib, 300},
		{"one mark counted much garbage", []uint64{8 * mib, 8 * mib, 24 * mib, 8 * mib, 8 * mib}, 24 * mib, 200},
		{"a busy stretch: three long marks", []uint64{8 * mib, 8 * mib, 11 * mib, 11 * mib, 11 * mib}, 11 * mib, 263},
		{"a heap that grew threefold twice", []uint64{8 * mib, 8 * mib, 8 * mib, 24 * mib, 72 * mib}, 72 * mib, 200},
		{"a heap that grew threefold and stayed", []uint64{8 * mib, 8 * mib, 8 * mib, 24 * mib, 24 * mib}, 24 * mib, 400},
		{"a short mark", []uint64{10 * mib, 10 * mib, 10 * mib, 10 * mib, 6 * mib}, 6 * mib, 733},
		{"next to nothing live", []uint64{10 * mib, 10 * mib, 10 * mib, 10 * mib, 1}, 1, 4000},
		{"nothing found yet", nil, 0, 400},
	} {
		prev := uint64(0)
		if len(c.recent) > 1 {
			prev = c.recent[len(c.recent)-2]
		}
		if got := pacedPercent(c.recent, prev, c.live, 0, 400); got != c.want {
			t.Errorf("%s: GOGC %d, want %d", c.name, got, c.want)
		}
	}
	if got := pacedPercent([]uint64{8 * mib, 8 * mib, 24 * mib}, 8*mib, 24*mib, 0, 100); got != 100 {
		t.Errorf("GOGC=100: paced to %d, want 100 (never below what was set when that is under the floor)", got)
	}
	// Stacks and globals are scanned too: the runtime adds GOGC's share of
	// them to the goal, and so does the pacer's.
	if got := pacedPercent([]uint64{8 * mib, 8 * mib, 10 * mib}, 8*mib, 10*mib, 2*mib, 400); got != 316 {
		t.Errorf("with 2 MiB of roots: GOGC %d, want 316", got)
	}
}

// TestOneLongMarkDoesNotSetTheHeapGoal: a collection that finds a burst
// live (as a long mark counts what was allocated while it marked) gives
// the next cycle the goal of the steady heap, not five times the
// burst; a heap that stays grown gets GOGC back once the estimate follows.
func TestOneLongMarkDoesNotSetTheHeapGoal(t *testing.T) {
	prev := debug.SetGCPercent(400)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	p := paceGC(400)
	t.Cleanup(p.stop)
	collect := func() {
		t.Helper()
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		want := s[0].Value.Uint64()
		for deadline := time.Now().Add(time.Minute); p.cycle.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the pacer did not take in the collection in a minute")
			}
		}
	}
	allocate := func(mib int) [][]byte {
		b := make([][]byte, mib*16)
		for i := range b {
			b[i] = make([]byte, 64<<10)
		}
		return b
	}
	read := func() (goal, live, gogc uint64) {
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
	}

	// The burst fits under the steady heap's trigger: no collection but
	// the test's own finds part of it.
	steady := allocate(16)
	for range paceWindow {
		collect()
	}
	// About 400: the estimate and the last collection differ by what the
	// test binary allocated in between.
	if goal, live, gogc := read(); gogc < 380 || gogc > 420 {
		t.Fatalf("a steady heap of %d MiB: GOGC %d (goal %d MiB), want about 400", live>>20, gogc, goal>>20)
	}

	burst := allocate(40)
	collect()
	goal, live, gogc := read()
	// GOGC alone: five times the 56 MiB found live, 280 MiB. Paced: five
	// times the steady 16 MiB, raised to the floor's three times 56 MiB.
	if goal > 230<<20 {
		t.Errorf("after one collection found %d MiB live beside a steady %d: goal %d MiB (GOGC %d), want about 3x the live heap, not 5x",
			live>>20, 16, goal>>20, gogc)
	}
	// Found again, three and a half times as large is the heap grown, not
	// garbage counted while marking (the second least of the window would
	// follow it on the fourth collection).
	collect()
	if goal, live, gogc := read(); gogc < 380 || gogc > 420 {
		t.Errorf("the second collection to find %d MiB live: GOGC %d (goal %d MiB), want about 400 again", live>>20, gogc, goal>>20)
	}
	runtime.KeepAlive(steady)
	runtime.KeepAlive(burst)
}

// TestThePacerYieldsToAGOGCSetLater: debug.SetGCPercent by anyone else
// ends the pacing, and the pacer leaves that setting alone.
func TestThePacerYieldsToAGOGCSetLater(t *testing.T) {
	prev := debug.SetGCPercent(400)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	p := paceGC(400)
	t.Cleanup(p.stop)
	debug.SetGCPercent(150)
	runtime.GC()
	if p.collected() {
		t.Fatalf("the pacer went on after GOGC was set to 150 by someone else")
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GOGC %d after the pacer saw it set to 150", got)
	}
}
