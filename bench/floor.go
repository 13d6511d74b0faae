package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/bench/articles"
)

// identityJS is the job of -identity: the articles collection into the
// articles index with no transform function, every document as it is.
const identityJS = `module.exports = { collection: "articles", index: "articles", primaryKey: "id" };
`

// printFloorRatios prints each sidecar's CPU per document and per change
// as a ratio to the floor build's, which ran beside it: how far the real
// sidecar is from what the work itself costs.
func printFloorRatios(runs []*sidecar, floor *sidecar, docs, published, changes int) {
	per := func(p phase, n int) float64 {
		if n == 0 {
			return 0
		}
		return float64(p.cpu.Microseconds()) / float64(n)
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fr, ff := per(floor.reindex, docs), per(floor.follow, changes)
	for _, r := range runs {
		if r == floor {
			continue
		}
		rr, rf := per(r.reindex, docs), per(r.follow, changes)
		line := fmt.Sprintf("to the floor: %s reindex %.1f / %.1f µs per document = %s, peak RSS %.1f / %.1f MB",
			r.label, rr, fr, ratio(rr, fr), float64(r.peak)/(1<<20), float64(floor.peak)/(1<<20))
		if changes > 0 {
			line += fmt.Sprintf("; follow %.1f / %.1f µs per change = %s", rf, ff, ratio(rf, ff))
		}
		if each, _, ok := r.middle(docs, published); ok {
			if feach, _, fok := floor.middle(docs, published); fok {
				line += fmt.Sprintf("; middle half of the reindex %.1f / %.1f µs = %s", each, feach, ratio(each, feach))
			}
		}
		fmt.Println(line)
	}
}

// background writes c.background updates a second (with -background),
// from four writers, to published articles the latency samples do not
// touch, until the returned function is called; it returns how many it
// wrote a second.
func background(ctx context.Context, c config, coll *mongo.Collection) (stop func() float64) {
	if c.background <= 0 {
		return func() float64 { return 0 }
	}
	timed := map[int]bool{}
	for k := 0; k < c.latency; k++ {
		id := 1 + (k*7919)%c.docs // as the latency samples choose them
		timed[id], timed[id+1] = true, true
	}
	ctx, cancel := context.WithCancel(ctx)
	const writers = 4
	var (
		wg    sync.WaitGroup
		wrote atomic.Int64
	)
	t0 := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(writers * time.Second / time.Duration(c.background))
			defer t.Stop()
			for k := w; ; k += writers {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				id := c.docs - k%max(c.docs/2, 1)
				if !articles.Published(id) || timed[id] {
					id--
				}
				if !articles.Published(id) || timed[id] {
					continue
				}
				if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(id)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: fmt.Sprintf("bg%d", k)}}}}); err == nil {
					wrote.Add(1)
				}
			}
		}()
	}
	return func() float64 { cancel(); wg.Wait(); return float64(wrote.Load()) / time.Since(t0).Seconds() }
}
