package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/bench/articles"
)

// catchupEnd is the title of the last write of the outage: once it is
// searchable, the stream's order says every write before it was taken in.
const catchupEnd = "catch-up end"

// runCatchup is the -catchup workload: one sidecar reindexes and follows
// -docs articles of -doc-kb KB; the test Meilisearch then stops processing
// tasks (it still answers, and enqueues) while -outage updates are
// written, each change event carrying its ~10 KB article; then it
// resumes. The sidecar's read-ahead is bounded in bytes, so what it holds
// while Meilisearch does nothing must not grow with the updates waiting in
// MongoDB: it reports the sidecar's RSS before the outage, its peak during
// the outage and during the catch-up, and how long the catch-up took.
func runCatchup(ctx context.Context, c config, tmp, transforms string, coll *mongo.Collection, ms meilisearch.ServiceManager, srv *servers, published int) error {
	size, err := bson.Marshal(articles.WithBody(1, c.docKB<<10))
	if err != nil {
		return err
	}
	r := &sidecar{label: "catch-up", bin: c.sidecar, prefix: "benchc_", state: "meilistream_c", ready: filepath.Join(tmp, "readyc")}
	if err := launch(ctx, c, ms, r, transforms); err != nil {
		return err
	}
	defer r.stop()
	paused := false
	fail := func(err error) error {
		if paused {
			srv.control("resume")
		}
		r.stop()
		return fmt.Errorf("%w\nsidecar log (tail):\n%s", err, tail(r.log(), 3000))
	}
	runs := []*sidecar{r}

	fmt.Fprintf(os.Stderr, "reindexing %d articles of %d KB ...\n", c.docs, len(size)>>10)
	if err := waitFor(ctx, runs, 30*time.Minute, nil, func() (bool, error) {
		addr, err := os.ReadFile(r.ready)
		if err != nil || len(addr) == 0 {
			return false, nil
		}
		if ok, err := following(strings.TrimSpace(string(addr))); !ok {
			return false, err
		}
		n, err := indexCount(ctx, ms, r.uid)
		return n == int64(published), err
	}); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}
	reindexPeak := hwm(r.pid)
	select {
	case <-time.After(c.settle):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	load0 := loadavg()
	before, heap0 := rss(r.pid), r.metrics(heapInuse, nextGC)

	// The outage: Meilisearch takes requests and processes none of their
	// tasks, as when it is busy for minutes with a large settings change.
	if err := srv.control("pause"); err != nil {
		return fail(err)
	}
	paused = true
	j0, err := r.job()
	if err != nil {
		return fail(err)
	}
	peak := r.watch()
	fmt.Fprintf(os.Stderr, "Meilisearch paused; %d updates ...\n", c.outage)
	t0 := time.Now()
	if err := outageWrites(ctx, coll, c.outage, c.docs); err != nil {
		peak()
		return fail(err)
	}
	written := time.Since(t0)
	// Until the sidecar stops taking changes in: it holds what its bounds
	// allow, and the rest waits in MongoDB.
	var (
		last   int64 = -1
		stable time.Time
		jOut   jobView
	)
	if err := waitFor(ctx, runs, 5*time.Minute, nil, func() (bool, error) {
		j, err := r.job()
		if err != nil {
			return false, err
		}
		if j.Counters.Changes != last {
			last, stable = j.Counters.Changes, time.Now()
			return false, nil
		}
		jOut = j
		return time.Since(stable) >= time.Second, nil
	}); err != nil {
		peak()
		return fail(fmt.Errorf("outage: %w", err))
	}
	end := lastPublished(min(c.outage, published))
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(end)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: catchupEnd}}}}); err != nil {
		peak()
		return fail(err)
	}
	outagePeak := peak()

	// The catch-up: from Meilisearch resuming until the last write is
	// searchable.
	peak = r.watch()
	r.begin()
	if err := srv.control("resume"); err != nil {
		peak()
		return fail(err)
	}
	paused = false
	if err := waitFor(ctx, runs, 30*time.Minute, nil, func() (bool, error) {
		return titleIs(ctx, ms, r.uid, end, catchupEnd)
	}); err != nil {
		peak()
		return fail(fmt.Errorf("catch-up: %w", err))
	}
	cost := r.end()
	catchupPeak := peak()
	if err := r.stop(); err != nil {
		return fail(fmt.Errorf("sidecar exit: %w", err))
	}

	how := "the kernel's peak (VmHWM, reset at each phase's start)"
	if !outagePeak.exact || !catchupPeak.exact {
		how = "VmRSS sampled every 10 ms: the kernel's peak could not be reset"
	}
	fmt.Printf("meilistream bench -catchup: %d articles of ~%.1f KB BSON (%d published), %d updates written while the test Meilisearch processed no task, flushInterval %s, %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, float64(len(size))/1024, published, c.outage, c.flush, runtime.NumCPU(), load0, loadavg())
	fmt.Printf("before the outage: RSS %.1f MB (Go heap in use %.1f MB, goal %.1f MB), peak while reindexing %.1f MB\n",
		mb(before), heap0[heapInuse]/(1<<20), heap0[nextGC]/(1<<20), mb(reindexPeak))
	queue := "no Meilisearch queue in /status"
	if jOut.Queue != nil {
		queue = fmt.Sprintf("%d tasks (%.1f MB of requests) enqueued in Meilisearch", jOut.Queue.Tasks, mb(jOut.Queue.Bytes))
	}
	fmt.Printf("outage:   %d updates written in %s; the sidecar took in %d changes and waited with %s; peak RSS %.1f MB (Go heap in use %.1f MB, goal %.1f MB)\n",
		c.outage, written.Round(time.Millisecond), jOut.Counters.Changes-j0.Counters.Changes, queue,
		mb(outagePeak.rss), mb(outagePeak.heap), mb(outagePeak.goal))
	fmt.Printf("catch-up: every update searchable %s after Meilisearch resumed (%.0f changes/s), peak RSS %.1f MB (Go heap in use %.1f MB, goal %.1f MB), %.1f µs sidecar CPU per change\n",
		cost.wall.Round(time.Millisecond), float64(c.outage+1)/cost.wall.Seconds(),
		mb(catchupPeak.rss), mb(catchupPeak.heap), mb(catchupPeak.goal),
		float64(cost.cpu.Microseconds())/float64(c.outage+1))
	fmt.Printf("peak RSS is %s; the Go heap's peaks are sampled from /metrics every 100 ms\n", how)
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// outageWrites sets the title of n articles, distinct while n <= docs
// (then in turn again), with a few writers in parallel: each change event
// carries its whole article (the stream's updateLookup).
func outageWrites(ctx context.Context, coll *mongo.Collection, n, docs int) error {
	ks := make(chan int)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range ks {
				_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(1 + k%docs)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: fmt.Sprintf("outage %d", k)}}}})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for k := 0; k < n; k++ {
		select {
		case ks <- k:
		case err := <-errc:
			close(ks)
			wg.Wait()
			return err
		}
	}
	close(ks)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// The Go heap's figures in the sidecar's /metrics (its Go collector's).
const (
	heapInuse = "go_memstats_heap_inuse_bytes"
	nextGC    = "go_memstats_next_gc_bytes"
)

// memPeak is the most memory a sidecar held in one phase.
type memPeak struct {
	rss int64 // bytes resident
	// exact: rss is the kernel's peak; otherwise the largest of VmRSS
	// sampled every 10 ms.
	exact bool
	// The Go heap's peak in use and the collector's peak goal (the heap
	// size at which the next collection starts: GOGC 400, the sidecar's
	// default, makes it five times the heap live after the last one),
	// sampled from /metrics every 100 ms: an RSS far above the heap is
	// memory the runtime has not given back yet, a goal that grows is
	// live data that grows.
	heap, goal int64
}

// watch starts measuring the sidecar's peak memory from now: it resets
// the kernel's peak RSS (VmHWM, by writing 5 to /proc/PID/clear_refs) and
// samples besides (memPeak). The function it returns stops the sampling
// and gives the peaks.
func (r *sidecar) watch() func() memPeak {
	p := memPeak{rss: rss(r.pid)}
	p.exact = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.pid), []byte("5"), 0) == nil
	var (
		mu   sync.Mutex
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			case <-t.C:
			}
			v := rss(r.pid)
			var m map[string]float64
			if k%10 == 0 {
				m = r.metrics(heapInuse, nextGC)
			}
			mu.Lock()
			p.rss = max(p.rss, v)
			p.heap = max(p.heap, int64(m[heapInuse]))
			p.goal = max(p.goal, int64(m[nextGC]))
			mu.Unlock()
		}
	}()
	var once sync.Once
	return func() memPeak {
		once.Do(func() {
			close(done)
			wg.Wait()
			if p.exact {
				p.rss = max(p.rss, hwm(r.pid))
			}
		})
		return p
	}
}
