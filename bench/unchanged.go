package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/bench/articles"
)

// articleFields are the fields examples/transforms/articles.js reads.
const articleFields = "status,title,summary,body,tags,author,publishedAt,updatedAt"

// unchangedVariants are the sidecars of the -unchanged workload, side by
// side on the same collection: the same transform, with every update sent
// (what a job did before skipUnchanged), with skipUnchanged (the
// default), and with fields declared too.
var unchangedVariants = []struct{ label, env string }{
	{"every update sent (skipUnchanged false)", "MEILISTREAM_JOB_ARTICLES_SKIP_UNCHANGED=false"},
	{"skipUnchanged (the default)", ""},
	{"skipUnchanged and fields", "MEILISTREAM_JOB_ARTICLES_FIELDS=" + articleFields},
}

// runUnchanged is the -unchanged workload: -changes updates of distinct
// published articles, four in five incrementing views (which the
// transform does not read), one in five setting the title, followed by
// three sidecars side by side (unchangedVariants). For each it reports
// the documents Meilisearch received per change (the receivedDocuments of
// the index's document additions during the phase) and its CPU per
// change.
func runUnchanged(ctx context.Context, c config, tmp, transforms string, coll *mongo.Collection, ms meilisearch.ServiceManager, published int) error {
	var runs []*sidecar
	for i, v := range unchangedVariants {
		r := &sidecar{label: v.label, bin: c.sidecar, prefix: fmt.Sprintf("benchu%d_", i), state: fmt.Sprintf("meilistream_u%d", i)}
		r.ready = filepath.Join(tmp, fmt.Sprintf("readyu%d", i))
		var extra []string
		if v.env != "" {
			extra = append(extra, v.env)
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
	select {
	case <-time.After(c.settle):
	case <-ctx.Done():
		return fail(ctx.Err())
	}

	n := min(c.changes, published-1)
	before := make([]int64, len(runs))
	for i, r := range runs {
		got, err := receivedDocuments(ctx, ms, r.uid)
		if err != nil {
			return fail(err)
		}
		before[i] = got
		r.begin()
	}
	fmt.Fprintf(os.Stderr, "%d updates, 4 in 5 of views ...\n", n)
	if err := countersAndTitles(ctx, coll, n); err != nil {
		return fail(err)
	}
	// One last title, after every update above: the stream keeps order,
	// so once it is searchable everything before it was taken in.
	end := lastPublished(n + 1)
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(end)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: "end"}}}}); err != nil {
		return fail(err)
	}
	if err := waitFollowed(ctx, ms, runs, true, end, "end"); err != nil {
		return fail(fmt.Errorf("follow: %w", err))
	}
	received := make([]int64, len(runs))
	for i, r := range runs {
		got, err := receivedDocuments(ctx, ms, r.uid)
		if err != nil {
			return fail(err)
		}
		received[i] = got - before[i] - 1 // the last title
	}
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fail(fmt.Errorf("sidecar exit: %w", err))
		}
	}
	fmt.Printf("meilistream bench -unchanged: %d articles (~1 KB BSON each, %d published), %d updates of distinct published articles (%d of views, which the transform does not read; %d of titles), flushInterval %s, %d sidecars side by side, load average %s\n",
		c.docs, published, n, n-titles(n), titles(n), c.flush, len(runs), loadavg())
	ref := runs[0].follow.cpu
	for i, r := range runs {
		cpu := r.follow.cpu
		fmt.Printf("%-42s Meilisearch received %.3f documents per change (%d), sidecar CPU %.1f µs per change (%.2f of the first), %s wall\n",
			r.label+":", float64(received[i])/float64(n), received[i],
			float64(cpu.Microseconds())/float64(n), float64(cpu)/float64(max(ref, 1)), r.follow.wall.Round(time.Millisecond))
	}
	return nil
}

// titles is how many of the first n updates of countersAndTitles set a
// title: one in five.
func titles(n int) int { return (n + 4) / 5 }

// countersAndTitles updates the first n published articles, one each, with
// a few writers in parallel: the k-th sets its title (k divisible by 5),
// the others increment views.
func countersAndTitles(ctx context.Context, coll *mongo.Collection, n int) error {
	type job struct{ id, k int }
	jobs := make(chan job)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				u := bson.D{{Key: "$inc", Value: bson.D{{Key: "views", Value: 1}}}}
				if j.k%5 == 0 {
					u = bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: fmt.Sprintf("title %d", j.k)}}}}
				}
				if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(j.id)}}, u); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	k := 0
	for id := 1; k < n; id++ {
		if articles.Published(id) {
			jobs <- job{id: id, k: k}
			k++
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// receivedDocuments is the sum of receivedDocuments of the document
// additions to index uid that Meilisearch has taken so far.
func receivedDocuments(ctx context.Context, ms meilisearch.ServiceManager, uid string) (int64, error) {
	var n int64
	q := &meilisearch.TasksQuery{Types: []meilisearch.TaskType{meilisearch.TaskTypeDocumentAdditionOrUpdate}, IndexUIDS: []string{uid}, Limit: 1000}
	for {
		res, err := ms.GetTasks(ctx, q)
		if err != nil {
			return 0, err
		}
		for _, t := range res.Results {
			n += t.Details.ReceivedDocuments
		}
		if res.Next <= 0 || len(res.Results) == 0 {
			return n, nil
		}
		q.From = res.Next
	}
}
