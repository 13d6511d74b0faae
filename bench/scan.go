package main

// The scan workload (-scan): two sidecars side by side on one collection
// and the same servers, one following the change stream, one in scan mode
// (reading the collection by an update key every -scan-interval); every
// write sets the key, as an application using scan mode must. Reported
// for each: CPU per change followed over a burst of -changes updates (the
// scan's passes between included), the write-to-searchable latency of
// -latency single writes, and the CPU an idle second costs.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/bench/articles"
)

// scanKey is the update key of the scan workload's writes.
const scanKey = "benchAt"

func runScan(ctx context.Context, c config, tmp, transforms string, coll *mongo.Collection, ms meilisearch.ServiceManager, published int) error {
	variants := []struct{ label, mode string }{{"stream mode", "stream"}, {"scan mode", "scan"}}
	var runs []*sidecar
	for i, v := range variants {
		r := &sidecar{label: v.label, bin: c.sidecar, prefix: fmt.Sprintf("benchs%d_", i), state: fmt.Sprintf("meilistream_s%d", i)}
		r.ready = filepath.Join(tmp, fmt.Sprintf("readys%d", i))
		extra := []string{"MEILISTREAM_JOB_ARTICLES_MODE=" + v.mode}
		if v.mode == "scan" {
			extra = append(extra, "MEILISTREAM_JOB_ARTICLES_KEY="+scanKey,
				"MEILISTREAM_JOB_ARTICLES_SCAN_INTERVAL="+c.scanInterval.String(),
				"MEILISTREAM_JOB_ARTICLES_SCAN_OVERLAP=0")
		}
		if err := launch(ctx, c, ms, r, transforms, extra...); err != nil {
			return err
		}
		defer r.stop()
		runs = append(runs, r)
	}
	fail := func(err error) error {
		var b strings.Builder
		for _, r := range runs {
			r.stop()
			fmt.Fprintf(&b, "\nsidecar %s log (tail):\n%s", r.label, tail(r.log(), 3000))
		}
		return fmt.Errorf("%w%s", err, b.String())
	}
	fmt.Fprintf(os.Stderr, "reindexing %d articles in %d sidecars ...\n", c.docs, len(runs))
	if err := waitFor(ctx, runs, 30*time.Minute, nil, func() (bool, error) {
		for _, r := range runs {
			addr, err := os.ReadFile(r.ready)
			if err != nil || len(addr) == 0 {
				return false, nil
			}
			if ok, err := following(strings.TrimSpace(string(addr))); !ok {
				return false, err
			}
			if n, err := indexCount(ctx, ms, r.uid); err != nil || n != int64(published) {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}

	// Idle: what following nothing costs.
	for _, r := range runs {
		r.begin()
	}
	select {
	case <-time.After(c.scanIdle):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	idle := make([]phase, len(runs))
	for i, r := range runs {
		idle[i] = r.end()
	}

	// A burst of updates of distinct published articles, then one last
	// write: once it is searchable every update before it was followed.
	n := min(c.changes, published-1)
	for _, r := range runs {
		r.begin()
	}
	fmt.Fprintf(os.Stderr, "%d updates setting %s ...\n", n, scanKey)
	if err := keyedUpdates(ctx, coll, n, "burst"); err != nil {
		return fail(err)
	}
	end := lastPublished(n + 1)
	if err := keyedUpdate(ctx, coll, end, "end"); err != nil {
		return fail(err)
	}
	if err := waitFollowed(ctx, ms, runs, true, end, "end"); err != nil {
		return fail(fmt.Errorf("follow: %w", err))
	}

	// Single writes, each timed until searchable in each sidecar's index.
	fmt.Fprintf(os.Stderr, "%d single writes ...\n", c.latency)
	lat := make([][]time.Duration, len(runs))
	for k := 0; k < c.latency; k++ {
		id := lastPublished(1 + k%max(published-1, 1))
		title := fmt.Sprintf("latency %d", k)
		t0 := time.Now()
		if err := keyedUpdate(ctx, coll, id, title); err != nil {
			return fail(err)
		}
		seen := make([]bool, len(runs))
		for left := len(runs); left > 0; {
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
			if time.Since(t0) > time.Minute {
				return fail(fmt.Errorf("write %d not searchable after a minute", k))
			}
			for i, r := range runs {
				if seen[i] {
					continue
				}
				ok, err := titleIs(ctx, ms, r.uid, id, title)
				if err != nil {
					return fail(err)
				}
				if ok {
					seen[i] = true
					lat[i] = append(lat[i], time.Since(t0))
					left--
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fail(fmt.Errorf("sidecar exit: %w", err))
		}
	}
	fmt.Printf("meilistream bench -scan: %d articles (~1 KB BSON each, %d published), %d updates of distinct published articles setting %s, %d single writes, flushInterval %s, scanInterval %s, 2 sidecars side by side on one replica set, load average %s\n",
		c.docs, published, n, scanKey, c.latency, c.flush, c.scanInterval, loadavg())
	ref := runs[0].follow.cpu
	for i, r := range runs {
		cpu := r.follow.cpu
		fmt.Printf("%-12s follow: CPU %.1f µs per change (%.2f of stream mode's), %s wall; write to searchable: median %s, p90 %s, max %s; idle: CPU %.2f ms per second\n",
			r.label+":", float64(cpu.Microseconds())/float64(n+1), float64(cpu)/float64(max(ref, 1)), r.follow.wall.Round(time.Millisecond),
			pct(lat[i], 50), pct(lat[i], 90), pct(lat[i], 100),
			float64(idle[i].cpu.Microseconds())/1000/max(idle[i].wall.Seconds(), 1e-9))
	}
	return nil
}

// pct is the p-th percentile of ds, rounded to the millisecond's tenth.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min((len(s)*p+99)/100, len(s)) - 1
	return s[max(i, 0)].Round(100 * time.Microsecond)
}

// keyedUpdate sets article id's title and its update key to the server's
// time, as an application using scan mode writes.
func keyedUpdate(ctx context.Context, coll *mongo.Collection, id int, title string) error {
	_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(id)}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "title", Value: title}}},
		{Key: "$currentDate", Value: bson.D{{Key: scanKey, Value: true}}},
	})
	return err
}

// keyedUpdates is keyedUpdate on the first n published articles, eight
// writers in parallel.
func keyedUpdates(ctx context.Context, coll *mongo.Collection, n int, title string) error {
	ids := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				if err := keyedUpdate(ctx, coll, id, title); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for id := 1; id <= lastPublished(n); id++ {
		if articles.Published(id) {
			ids <- id
		}
	}
	close(ids)
	wg.Wait()
	return first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
