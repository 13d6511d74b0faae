package transform_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// heapPeak samples the heap (live and unswept objects) until stop is
// called, and returns the most it saw; past limit it calls over (once).
func heapPeak(limit int64, over func()) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := int64(s[0].Value.Uint64()); v > peak.Load() {
				if v > limit && peak.Load() <= limit {
					over()
				}
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

func heapNow() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// heapChild names the test a child process runs alone: the heap it
// measures is then its calls' only, not that of the calls earlier tests
// abandoned in built-ins, which run on in the background.
const heapChild = "MEILISTREAM_TEST_HEAP_CHILD"

func TestACallThatGrowsTheHeapPastTheBoundFailsItsDocument(t *testing.T) {
	if os.Getenv(heapChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		// Two Ps for the two calls, one for the watcher and one for the
		// test's sampler: with every P in a call, the watcher waits for
		// the runtime to preempt one (its package doc says so), and on a
		// loaded machine that wait lets a doubling string run past the
		// test's ceiling. What is tested is how far the bound lets the
		// heap go once the watcher runs.
		cmd.Env = append(os.Environ(), heapChild+"=1", "GOMAXPROCS=4")
		out, err := cmd.CombinedOutput()
		t.Logf("alone in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("the test failed alone: %v", err)
		}
		return
	}
	const bound = 16 << 20
	// The time limit is the longest there is: only the memory bound can
	// stop these calls in the test's time.
	j := loadJob(t, `module.exports = { transform(doc) {
		if (doc.kind === "string") { let s = "x"; for (;;) s += s; }
		if (doc.kind === "array") { const a = []; for (let i = 0; ; i++) a[i] = i; }
		if (doc.kind === "objects") { const a = []; for (let i = 0; ; i++) a[i] = {i: i, s: "x" + i}; }
		return {t: doc.title};
	} };`, transform.Options{Pool: 2, Timeout: transform.MaxTimeout, MemoryLimit: bound})
	kinds := []string{"string", "array", "objects"}
	runtime.GC()
	base := heapNow()
	// The bound stops a call once the heap has grown by it; the heap goes
	// further by what is allocated before the interrupt reaches the call
	// (a string doubling allocates twice the string at once), for the two
	// calls running at once, and by the garbage of the calls stopped
	// until it is collected. Past limit, the calls are cancelled: the
	// test fails without taking the machine's memory.
	limit := base + 64*bound
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := heapPeak(limit, cancel)
	var wg sync.WaitGroup
	errsOf := make([]error, 10)
	for i := range errsOf {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc := marshal(t, bson.D{{Key: "_id", Value: i}, {Key: "kind", Value: kinds[i%len(kinds)]}})
			_, errsOf[i] = j.Apply(ctx, doc, transform.OpInsert, nil)
		}()
	}
	wg.Wait()
	peak := stop()
	t.Logf("heap: %d MiB before, at most %d MiB while the calls ran (%d MiB above)", base>>20, peak>>20, (peak-base)>>20)
	if peak > limit {
		t.Errorf("the heap grew to %d MiB, past %d MiB", peak>>20, limit>>20)
	}
	for i, err := range errsOf {
		if errs.CodeOf(err) != errs.TransformFailed || !strings.Contains(err.Error(), "MEILISTREAM_TRANSFORM_MEMORY") {
			t.Errorf("document %d (%s): %v; want TRANSFORM_FAILED saying the memory bound", i, kinds[i%len(kinds)], err)
		}
		// ErrMemory tells the engine to try the document again later; a
		// call abandoned in a built-in is not to be tried again.
		if abandoned := strings.Contains(err.Error(), "abandoned"); errors.Is(err, transform.ErrMemory) == abandoned {
			t.Errorf("document %d (%s): %v; ErrMemory %v, abandoned %v: want ErrMemory exactly when not abandoned", i, kinds[i%len(kinds)], err, errors.Is(err, transform.ErrMemory), abandoned)
		}
	}
	// A document that keeps within it is transformed as before.
	if res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 99}, {Key: "title", Value: "T"}}), transform.OpInsert, nil); err != nil || res.Doc["t"] != "T" {
		t.Errorf("a document within the bound: %v, %v", res.Doc, err)
	}
}
