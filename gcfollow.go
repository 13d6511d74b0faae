package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Without a memory limit of its own (no container limit, no GOMEMLIMIT),
// GOGC alone would set the heap's goal at five times what the last
// collection found live. What a collection finds live includes what the
// program allocated while it marked (those objects are marked at once):
// on a busy machine a long mark counts megabytes of a reindex's
// short-lived garbage as live, GOGC multiplies them by five, and the
// longest reindex meets the worst of these moments: its peak RSS grew
// with the collection. So the sidecar sets a soft limit that follows the
// heap: GOGC's goal for the least heap found live over the last
// followWindow collections (what the work keeps), with room for the
// runtime's own memory, and never below followFloor. A heap that keeps
// more (a catch-up holds tens of megabytes of changes) raises it within
// followWindow collections.
const (
	followFloor  = 64 << 20
	followWindow = 8
	// followRoom is the share added for what the limit counts beside the
	// heap's objects: the runtime's metadata, stacks, free spans.
	followRoom = 1.25
)

// heapFollower keeps the soft memory limit that follows the heap.
type heapFollower struct {
	gcPercent int
	live      [followWindow]uint64
	n         int
	set       int64 // the limit it set last
	sample    []metrics.Sample
	stopped   atomic.Bool
}

// followHeap starts following the heap with the collector's gcPercent.
func followHeap(gcPercent int) *heapFollower {
	f := &heapFollower{gcPercent: gcPercent, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	f.arm()
	return f
}

// gcTick is unreachable as soon as it is made: its finalizer runs after
// the next collection.
type gcTick struct{ f *heapFollower }

func (f *heapFollower) arm() {
	runtime.SetFinalizer(&gcTick{f: f}, func(t *gcTick) {
		if t.f.collected() {
			t.f.arm()
		}
	})
}

// collected sets the limit after a collection; it reports false, and the
// following stops, once another limit is in effect (GOMEMLIMIT set by
// debug.SetMemoryLimit, a container's found later by the refresh).
func (f *heapFollower) collected() bool {
	if f.stopped.Load() {
		return false
	}
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 && cur != f.set {
		return false
	}
	metrics.Read(f.sample)
	f.live[f.n%followWindow] = f.sample[0].Value.Uint64()
	f.n++
	least := uint64(math.MaxUint64)
	for _, v := range f.live[:min(f.n, followWindow)] {
		least = min(least, v)
	}
	f.set = max(followFloor, int64(float64(least)*float64(100+f.gcPercent)/100*followRoom))
	debug.SetMemoryLimit(f.set)
	return true
}

// stop ends the following after the next collection; the limit stays as
// it was last set.
func (f *heapFollower) stop() { f.stopped.Store(true) }
