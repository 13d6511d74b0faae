package transform

import (
	"errors"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// DefaultMemoryLimit is how far the Go heap may grow past its steady size
// while a job's transform calls run before they are stopped
// (MEILISTREAM_TRANSFORM_MEMORY).
const DefaultMemoryLimit = 64 << 20

// goja counts no allocation and has no limit on a string's or an array's
// length: `s += s` in a loop doubles a string until the process dies of
// it, long before the call's time limit, and a container's memory limit
// kills the whole sidecar, which then starts again on the same document.
// So a job's calls are watched from outside (k6's answer to runaway
// scripts, applied to memory): while any of them runs, memWatch reads the
// Go heap every memTick. Once it holds more than the bound above its
// steady size, a collection is started (not waited for: the heap goes on
// growing meanwhile) to tell garbage from what is kept; when a collection
// has kept more than the bound above the steady live heap, or the heap
// is memHard times the bound past the collector's steady goal, every call
// of the job running then is interrupted, as the time limit does, and its
// runtime thrown away and collected (cleanUp). The call is tried once
// more on a fresh runtime (one stopped beside the call that grew is not at
// fault), then its document fails with TRANSFORM_FAILED saying so.
//
// The steady size is the least of what the collections of a recent
// window found (the live heap, and the collector's goal, which is where
// the heap goes between two collections: GOGC=400 lets it grow to five
// times the live heap). A runaway call lives through many collections as
// it grows (each doubling of a string is one); the least of a window
// longer than a call keeps them from raising its own bound, and what
// the jobs keep for good is the steady size once the window has passed.
// The heap is the process's: a call is stopped because the heap grew
// while it ran, whoever grew it.
//
// The heap overshoots the bound by what is allocated between two reads,
// and by the instruction running then: `s + s` of a 64 MiB string
// allocates 128 MiB before the interrupt can stop anything. On a machine
// whose CPUs are all busy the watcher itself may wait for one: a copy of
// a large string or array holds its CPU until it ends.
const (
	memTick = time.Millisecond
	// The window is memWindowCalls time limits of a call (at least
	// memWindowMin), kept in memBuckets buckets, each the least of its
	// collections: longer than a call and the retry after it, short
	// enough that the heap the engine itself needs for a while (a large
	// batch) soon counts as steady.
	memWindowCalls = 4
	memWindowMin   = 2 * time.Second
	memBuckets     = 8
	// memHard times the bound past the steady goal, the heap is more
	// than garbage whatever the collections say: the collector paces the
	// program so that garbage alone does not take it past its goal.
	memHard = 2
	// memIdleTicks is how long the watcher goroutine stays once no call
	// runs: a job's calls come and go between batches.
	memIdleTicks = 100
)

// errMemory is the interrupt's reason when the heap grew past the bound.
var errMemory = errors.New("transform memory bound")

var memMetrics = []string{
	"/memory/classes/heap/objects:bytes", // live and not yet swept
	"/gc/heap/live:bytes",                // kept by the last collection
	"/gc/heap/goal:bytes",
	"/gc/cycles/total:gc-cycles",
}

// memWatch watches the heap while any of a job's calls runs (one per
// job: its runtimes' guards).
type memWatch struct {
	bound   int64
	window  time.Duration
	active  atomic.Int64 // calls running
	running atomic.Bool  // the watcher goroutine is

	mu     sync.Mutex
	guards map[*guard]struct{}

	// Used by the watcher goroutine only.
	samples   []metrics.Sample
	cycles    uint64
	buckets   []memBucket // the newest last
	nextForce int64       // heap objects above which a collection may be forced again
	stoppedAt uint64      // collections when calls were last stopped

	collecting atomic.Bool // a collection forced is running
}

// memBucket is the least live heap and goal of the collections seen from
// start on.
type memBucket struct {
	start      time.Time
	live, goal int64
}

func newMemWatch(bound int64, timeout time.Duration) *memWatch {
	w := &memWatch{bound: bound, window: max(memWindowCalls*timeout, memWindowMin), guards: map[*guard]struct{}{}, samples: make([]metrics.Sample, len(memMetrics))}
	for i, name := range memMetrics {
		w.samples[i].Name = name
	}
	return w
}

// memoryLimit is the bound of j's calls; 0: none.
func (j *Job) memoryLimit() int64 {
	switch l := j.opts.MemoryLimit; {
	case l < 0:
		return 0
	case l == 0:
		return DefaultMemoryLimit
	default:
		return l
	}
}

func (w *memWatch) add(g *guard) {
	w.mu.Lock()
	w.guards[g] = struct{}{}
	w.mu.Unlock()
}

func (w *memWatch) remove(g *guard) {
	w.mu.Lock()
	delete(w.guards, g)
	w.mu.Unlock()
}

// begin and end count a call; the first call starts the watcher.
func (w *memWatch) begin() {
	if w.active.Add(1) == 1 && w.running.CompareAndSwap(false, true) {
		go w.watch()
	}
}

func (w *memWatch) end() { w.active.Add(-1) }

// watch reads the heap every memTick while calls run, and ends once none
// has for memIdleTicks.
func (w *memWatch) watch() {
	t := time.NewTicker(memTick)
	defer t.Stop()
	for idle := 0; ; {
		<-t.C
		if w.active.Load() > 0 {
			idle = 0
			w.check()
			continue
		}
		if idle++; idle < memIdleTicks {
			continue
		}
		w.running.Store(false)
		// A call that began as the flag went down found it up: go on.
		if w.active.Load() == 0 || !w.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// read takes the heap's figures, noting a new collection's.
func (w *memWatch) read(now time.Time) (objects, live int64) {
	metrics.Read(w.samples)
	objects = int64(w.samples[0].Value.Uint64())
	live = int64(w.samples[1].Value.Uint64())
	c := w.samples[3].Value.Uint64()
	if c == w.cycles && len(w.buckets) > 0 {
		return objects, live
	}
	w.cycles = c
	goal := int64(min(w.samples[2].Value.Uint64(), math.MaxInt64/4))
	n := len(w.buckets)
	if n == 0 || now.Sub(w.buckets[n-1].start) >= w.window/memBuckets {
		if n == memBuckets {
			w.buckets = append(w.buckets[:0], w.buckets[1:]...)
		}
		w.buckets = append(w.buckets, memBucket{start: now, live: live, goal: goal})
		return objects, live
	}
	b := &w.buckets[n-1]
	b.live, b.goal = min(b.live, live), min(b.goal, goal)
	return objects, live
}

// steady is the least live heap and goal of the window.
func (w *memWatch) steady() (live, goal int64) {
	live, goal = w.buckets[0].live, w.buckets[0].goal
	for _, b := range w.buckets[1:] {
		live, goal = min(live, b.live), min(goal, b.goal)
	}
	// Without a goal that bounds the heap (GOGC=off and no memory limit),
	// the live heap does.
	return live, min(goal, live+8*w.bound)
}

func (w *memWatch) check() {
	objects, live := w.read(time.Now())
	steadyLive, steadyGoal := w.steady()
	// What the collector found before the last calls were stopped was
	// theirs (each is collected before it is tried again: cleanUp).
	fresh := w.cycles > w.stoppedAt
	switch {
	case fresh && live > steadyLive+w.bound:
		// The collector kept more than the bound above the steady heap.
	case fresh && objects > steadyGoal+memHard*w.bound:
		// Far past where the collector lets garbage go: the collections
		// are too slow to tell, and waiting lets the heap double again.
	default:
		if objects > max(steadyGoal+w.bound, w.nextForce) && w.collecting.CompareAndSwap(false, true) {
			// More than garbage explains, perhaps: a collection tells,
			// without waiting for it here. Found to be garbage, the heap
			// must grow by half the bound again before the next.
			w.nextForce = objects + w.bound/2
			go func() {
				runtime.GC()
				w.collecting.Store(false)
			}()
		}
		return
	}
	w.stoppedAt, w.nextForce = w.cycles, 0
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for g := range w.guards {
		g.mu.Lock()
		if g.running {
			g.stopCall(now, errMemory)
		}
		g.mu.Unlock()
	}
}

// cleanUp collects what the calls stopped by the bound left, once v's
// goroutine is gone (its runtime unreachable): the next call, a retry of
// the same document perhaps, starts from the steady heap again, and is
// not judged by what the call before it kept.
func (w *memWatch) cleanUp(v *vm) {
	w.remove(v.guard)
	<-v.exited
	runtime.GC()
}

// ErrMemory is the cause of a document's TRANSFORM_FAILED when the memory
// bound stopped its call on every try (errors.Is). The bound is on the
// process's heap, which the job's other calls and the rest of the process
// share, so the stop may pass: the engine tries such a document again
// later, as it does one out of time (ErrTimeout). A call the bound could
// not stop, abandoned in a built-in, is not one of them.
var ErrMemory = errors.New("other work sharing the heap may have grown it, or the transform needs more than the bound for this document")

// memoryErr is the document's error when its call was stopped by the
// bound; abandoned: the call did not return to JavaScript, so it was left
// running in a built-in.
func memoryErr(j *Job, abandoned bool) error {
	const msg = "the transform call was stopped: the heap grew by more than %d MiB while it ran, the memory bound of a call (MEILISTREAM_TRANSFORM_MEMORY)"
	if abandoned {
		return errs.New(errs.TransformFailed, j.Name, msg+", and it was still in a built-in function %s later, so it was abandoned", j.memoryLimit()>>20, abandonGrace)
	}
	return errs.Wrap(errs.TransformFailed, j.Name, ErrMemory, msg, j.memoryLimit()>>20)
}
