package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
)

// The collector sets its next goal at GOGC's share above what the last
// collection found live. What a collection finds live includes everything
// allocated while it marked (those objects are marked at once): on a busy
// machine a long mark counts megabytes of a reindex's short-lived garbage
// as live, GOGC=400 multiplies them by five, and the heap's free spans
// keep that goal's pages resident. So a reindex's peak RSS was set by its
// worst mark, and the longer the reindex the worse its worst mark: the
// peak grew with the collection.
//
// The pacer below takes each goal from the second least of what the last
// paceWindow collections found live instead of the last one alone: the
// smaller ones are nearer what the work keeps, and a busy stretch of the
// machine lengthens marks for several collections in a row, so a burst of
// garbage counted as live sets no goal until it has lasted paceWindow-1
// collections. A collection that found less (a short mark) does not
// shrink the room of the cycle after it either. A heap that really grows
// (a catch-up holds tens of megabytes of changes) keeps at least
// paceFloorPercent's room on the way up, and the estimate follows it on
// the second collection that finds it more than paceGrowth times as
// large, or the fourth. Unlike a soft memory limit it
// never makes the collector run back to back: each cycle has room in
// proportion to the heap the last collection found.
const (
	paceWindow       = 5
	paceFloorPercent = 200
	// paceMostTimes bounds GOGC, as a multiple of the environment's or the
	// default's, after a collection that found next to nothing live.
	paceMostTimes = 10
	// paceGrowth: what two collections in a row found beyond this many
	// times the estimate is the heap grown, not garbage counted while
	// marking (which adds a few megabytes to a reindex's 5 to 8).
	paceGrowth = 2
)

// gcPacer re-applies GOGC after each collection (paceGC).
type gcPacer struct {
	gcPercent int // GOGC as the environment or the default set it

	mu      sync.Mutex
	live    [paceWindow]uint64 // the live heaps of the last collections, a ring
	prev    uint64             // the last collection's
	seen    int                // collections taken in
	set     int                // the percent set last
	sample  []metrics.Sample
	stopped atomic.Bool
	// cycle is the number of the last collection taken in
	// (/gc/cycles/total), for tests that wait for one.
	cycle atomic.Uint64
}

// paceGC starts pacing the collector around gcPercent (GOGC, not off).
func paceGC(gcPercent int) *gcPacer {
	p := &gcPacer{gcPercent: gcPercent, set: gcPercent, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}}
	p.arm()
	return p
}

// gcTick is unreachable as soon as it is made: its finalizer runs after
// the next collection, on the runtime's finalizer goroutine, so the pacer
// costs nothing between collections.
type gcTick struct{ p *gcPacer }

func (p *gcPacer) arm() {
	runtime.SetFinalizer(&gcTick{p: p}, func(t *gcTick) {
		if t.p.collected() {
			t.p.arm()
		}
	})
}

// collected sets GOGC for the cycle under way after a collection. It
// reports false, and the pacing ends, once stopped or once someone else
// set GOGC (debug.SetGCPercent).
func (p *gcPacer) collected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() {
		return false
	}
	metrics.Read(p.sample)
	live := p.sample[0].Value.Uint64()
	roots := p.sample[1].Value.Uint64() + p.sample[2].Value.Uint64()
	p.live[p.seen%paceWindow] = live
	p.seen++
	percent := pacedPercent(p.live[:min(p.seen, paceWindow)], p.prev, live, roots, p.gcPercent)
	p.prev = live
	if prev := debug.SetGCPercent(percent); prev != p.set {
		debug.SetGCPercent(prev) // set by someone else: theirs wins
		return false
	}
	p.set = percent
	p.cycle.Store(p.sample[3].Value.Uint64())
	return true
}

// stop ends the pacing at the next collection and puts GOGC back.
func (p *gcPacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped.Swap(true) {
		if prev := debug.SetGCPercent(p.gcPercent); prev != p.set {
			debug.SetGCPercent(prev)
		}
	}
}

// pacedPercent is the GOGC that gives the cycle after a collection which
// found live bytes live (and roots bytes of stacks and globals to scan)
// the goal gcPercent gives the second least of recent, what the last
// collections found live (the least of fewer than four), or, when this
// collection and the one before (prev) both found more than paceGrowth
// times that, the lesser of the two: the runtime's goal is live + (live +
// roots) * GOGC/100. It is at least paceFloorPercent (or gcPercent, if
// that is lower) and at most paceMostTimes gcPercent.
func pacedPercent(recent []uint64, prev, live, roots uint64, gcPercent int) int {
	if len(recent) == 0 || live == 0 {
		return gcPercent
	}
	sorted := slices.Clone(recent)
	slices.Sort(sorted)
	kept := float64(sorted[(len(sorted)-1)/3])
	if grown := paceGrowth * kept; float64(prev) > grown && float64(live) > grown {
		kept = float64(min(prev, live))
	}
	g := float64(gcPercent) / 100
	goal := kept + (kept+float64(roots))*g
	percent := int(100 * (goal - float64(live)) / (float64(live) + float64(roots)))
	return max(min(percent, paceMostTimes*gcPercent), min(paceFloorPercent, gcPercent))
}
