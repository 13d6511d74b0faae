package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/bench/articles"
)

// renamedUser is the user the fan-out phase renames: the author of the
// first -fanout articles.
const renamedUser = 0

// authorID is the user who wrote article i: renamedUser for the first
// fanout articles, then the users 1..users in turn, so the articles of one
// reindex part (consecutive _ids) have as many distinct authors as the
// part has articles, up to users: each lookup query reads a user per
// article, the dearest case for a join.
func authorID(i, fanout, users int) int64 {
	if i <= fanout {
		return renamedUser
	}
	return 1 + int64(i%users)
}

// articleByUser is articles.Article(i) with an authorId: the same bytes and
// the one field the lookup joins on.
func articleByUser(i, fanout, users int) bson.D {
	return append(articles.Article(i), bson.E{Key: "authorId", Value: authorID(i, fanout, users)})
}

// user is the j-th document of the users collection: a name the lookup
// projects, and fields it leaves out.
func user(j int) bson.D {
	return bson.D{
		{Key: "_id", Value: int64(j)},
		{Key: "name", Value: "User " + strconv.Itoa(j)},
		{Key: "email", Value: fmt.Sprintf("user%d@example.com", j)},
		{Key: "bio", Value: "Writes about search, streams and the odd database; reads everything else."},
	}
}

// The articles example's author, from its embedded sub-document, and the
// same from a declared lookup of the users collection: withLookup makes
// the one transform from the other.
const (
	embeddedAuthor = "author: doc.author ? doc.author.name : null,"
	lookedUpAuthor = "author: ctx.lookups.author ? ctx.lookups.author.name : null,"
	transformKey   = "  transform(doc, ctx) {"
	authorLookup   = `  lookups: {
    author: { from: "users", localField: "authorId", foreignField: "_id", project: { name: 1 } },
  },

`
)

// withLookup is the transform src (the articles example) with its author
// taken from the users collection by one declared lookup instead of the
// article's own sub-document, and nothing else changed.
func withLookup(src []byte) ([]byte, error) {
	s := string(src)
	for _, want := range []string{embeddedAuthor, transformKey} {
		if n := strings.Count(s, want); n != 1 {
			return nil, fmt.Errorf("-lookups derives its transform from the articles example (examples/transforms/articles.js), which has %q once; the -transform file has it %d times", want, n)
		}
	}
	s = strings.Replace(s, embeddedAuthor, lookedUpAuthor, 1)
	return []byte(strings.Replace(s, transformKey, authorLookup+transformKey, 1)), nil
}

// lookupVariants are the two sidecars of -lookups, side by side on the
// same articles: the transform as given, and the same with its author
// looked up.
var lookupVariants = []struct{ label, prefix, state string }{
	{"without lookups", "benchl0_", "meilistream_l0"},
	{"with one lookup", "benchl1_", "meilistream_l1"},
}

// runLookups is the -lookups workload: the two sidecars of lookupVariants
// reindex the same articles side by side (CPU per document and its ratio,
// the bound being 1.5), then the lookup's sidecar alone follows
// the renaming of the user -fanout articles depend on: the batches it
// sent, the tasks Meilisearch received, and the time until every
// dependent is searchable with the new name.
func runLookups(ctx context.Context, c config, tmp, transforms string, db *mongo.Database, ms meilisearch.ServiceManager, published int) error {
	fmt.Fprintf(os.Stderr, "seeding %d users ...\n", c.users+1)
	if err := seed(ctx, db.Collection("users"), 0, c.users+1, user); err != nil {
		return fmt.Errorf("seed users: %w", err)
	}
	src, err := os.ReadFile(filepath.Join(transforms, "articles.js"))
	if err != nil {
		return err
	}
	looked, err := withLookup(src)
	if err != nil {
		return err
	}
	lookupDir := filepath.Join(tmp, "transforms-lookup")
	if err := os.Mkdir(lookupDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(lookupDir, "articles.js"), looked, 0o644); err != nil {
		return err
	}

	var runs []*sidecar
	for i, v := range lookupVariants {
		r := &sidecar{label: v.label, bin: c.sidecar, prefix: v.prefix, state: v.state}
		r.ready = filepath.Join(tmp, fmt.Sprintf("readyl%d", i))
		dir := transforms
		if i == 1 {
			dir = lookupDir
		}
		if err := launch(ctx, c, ms, r, dir); err != nil {
			return err
		}
		defer r.stop()
		runs = append(runs, r)
	}
	base, look := runs[0], runs[1]
	fail := func(err error) error {
		var b strings.Builder
		for _, r := range runs {
			r.stop()
			fmt.Fprintf(&b, "\nsidecar %s log (tail):\n%s", r.label, tail(r.log(), 3000))
		}
		return fmt.Errorf("%w%s", err, b.String())
	}

	// Reindex, as the default workload counts it: from when each serves
	// until its live index holds every published article.
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		for _, r := range runs {
			if b, err := os.ReadFile(r.ready); err != nil || len(b) == 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	load0 := loadavg()
	fmt.Fprintf(os.Stderr, "reindexing %d articles in %d sidecars ...\n", c.docs, len(runs))
	for _, r := range runs {
		r.begin()
	}
	if err := waitReindexed(ctx, ms, runs, published); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		for _, r := range runs {
			addr, _ := os.ReadFile(r.ready)
			if ok, err := following(strings.TrimSpace(string(addr))); !ok {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return fail(fmt.Errorf("wait for follow: %w", err))
	}
	// The sidecar without lookups does not follow users: the fan-out is
	// the other's alone.
	if err := base.stop(); err != nil {
		return fail(fmt.Errorf("sidecar %s exit: %w", base.label, err))
	}
	select {
	case <-time.After(c.settle):
	case <-ctx.Done():
		return fail(ctx.Err())
	}

	fo, err := fanOut(ctx, c, db, ms, look)
	if err != nil {
		return fail(fmt.Errorf("fan-out: %w", err))
	}
	if err := look.stop(); err != nil {
		return fail(fmt.Errorf("sidecar %s exit: %w", look.label, err))
	}

	fmt.Printf("meilistream bench -lookups: %d articles (~1 KB BSON each, %d published) by %d users, flushInterval %s, %d sidecars side by side, %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, published, c.users+1, c.flush, len(runs), runtime.NumCPU(), load0, loadavg())
	for _, r := range runs {
		fmt.Printf("reindex %-16s %.1f µs sidecar CPU per document, %s wall (%.0f docs/s), peak RSS %.1f MB, allocated %.0f bytes in %.0f objects per document\n",
			r.label+":", float64(r.reindex.cpu.Microseconds())/float64(c.docs), r.reindex.wall.Round(time.Millisecond),
			float64(c.docs)/r.reindex.wall.Seconds(), float64(r.peak)/(1<<20),
			r.reindex.heap.bytes/float64(c.docs), r.reindex.heap.objects/float64(c.docs))
	}
	middle := ""
	if b, _, ok := base.middle(c.docs, published); ok {
		if l, _, ok := look.middle(c.docs, published); ok {
			middle = fmt.Sprintf(" (over the middle half of the articles %.1f / %.1f µs = %.2f)", l, b, l/b)
		}
	}
	fmt.Printf("with one lookup / without: CPU per document %.2f%s (the bound: 1.5), wall %.2f, bytes allocated %.2f\n",
		float64(look.reindex.cpu)/float64(max(base.reindex.cpu, 1)), middle,
		float64(look.reindex.wall)/float64(max(base.reindex.wall, 1)),
		look.reindex.heap.bytes/max(base.reindex.heap.bytes, 1))
	fo.print(c)
	return nil
}

// fanOutResult is what renaming the user of -fanout articles cost.
type fanOutResult struct {
	dependents, published int
	batchSize, pageSize   int
	searchable, durable   time.Duration // from the write until every published dependent shows the new name; until the sidecar counted them all durable
	batches               float64       // the sidecar's batches made durable (meilistream_batch_documents_count)
	fanOuts, resent       int64         // its /status counters
	tasks                 taskTally     // the tasks Meilisearch received for the index
	cost                  phase
}

// newName is what the fan-out renames the user to: one word, so the
// filter that counts the dependents showing it needs no quoting.
const newName = "Renamed"

// fanOut renames renamedUser and waits until every published article of
// theirs shows the new name in r's index and r's /status counts every
// dependent sent again and nothing left enqueued in Meilisearch.
func fanOut(ctx context.Context, c config, db *mongo.Database, ms meilisearch.ServiceManager, r *sidecar) (fanOutResult, error) {
	res := fanOutResult{dependents: c.fanout}
	for i := 1; i <= c.fanout; i++ {
		if articles.Published(i) {
			res.published++
		}
	}
	j0, err := r.job()
	if err != nil {
		return res, err
	}
	res.batchSize, res.pageSize = j0.BatchSize, j0.PageSize
	t0, err := tally(ctx, ms, r.uid)
	if err != nil {
		return res, err
	}
	const batches = "meilistream_batch_documents_count"
	b0 := r.metrics(batches)[batches]
	fmt.Fprintf(os.Stderr, "renaming the author of %d articles ...\n", c.fanout)
	r.begin()
	start := time.Now()
	if _, err := db.Collection("users").UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(renamedUser)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: newName}}}}); err != nil {
		return res, err
	}
	polls := 0
	err = waitFor(ctx, []*sidecar{r}, 10*time.Minute, r.sample, func() (bool, error) {
		polls++
		// Counting the renamed dependents is a filtered scan of the
		// index: every fifth poll, so the servers' work does not crowd
		// the sidecar's on a small machine.
		if res.searchable == 0 && polls%5 == 0 {
			n, err := filteredCount(ctx, ms, r.uid, "author = "+newName)
			if err != nil {
				return false, err
			}
			if n == int64(res.published) {
				res.searchable = time.Since(start)
			}
		}
		if res.durable == 0 {
			j, err := r.job()
			if err != nil {
				return false, err
			}
			if j.Counters.Resent-j0.Counters.Resent >= int64(c.fanout) && (j.Queue == nil || j.Queue.Tasks == 0) {
				res.durable = time.Since(start)
				res.cost = r.end()
				res.fanOuts, res.resent = j.Counters.FanOuts-j0.Counters.FanOuts, j.Counters.Resent-j0.Counters.Resent
			}
		}
		return res.searchable > 0 && res.durable > 0, nil
	})
	if err != nil {
		return res, err
	}
	res.batches = r.metrics(batches)[batches] - b0
	t1, err := tally(ctx, ms, r.uid)
	if err != nil {
		return res, err
	}
	res.tasks = t1.minus(t0)
	return res, nil
}

func (f fanOutResult) print(c config) {
	fmt.Printf("fan-out: the author of %d articles (%d published) renamed: all searchable with the new name after %s, all counted durable by the sidecar after %s; %.1f µs sidecar CPU per dependent\n",
		f.dependents, f.published, f.searchable.Round(time.Millisecond), f.durable.Round(time.Millisecond),
		float64(f.cost.cpu.Microseconds())/float64(f.dependents))
	// Dependents are read, as a reindex's documents, in parts of half a
	// page: a fan-out's batches are parts.
	part := max(f.pageSize/2, 1)
	fmt.Printf("fan-out: %.0f batches made durable by the sidecar (dependents / batch size %d = %.1f, / part size %d = %.1f); Meilisearch received %d document additions (%d documents) and %d deletions (%d ids); /status: %d fan-outs, %d documents sent again\n",
		f.batches, f.batchSize, float64(f.dependents)/float64(max(f.batchSize, 1)), part, float64(f.dependents)/float64(part),
		f.tasks.additions, f.tasks.documents, f.tasks.deletions, f.tasks.ids, f.fanOuts, f.resent)
}

// taskTally counts the document tasks of an index: additions (and the
// documents they carried) and deletions (and the ids they named). Each is
// one request of the sidecar's.
type taskTally struct{ additions, documents, deletions, ids int64 }

func (t taskTally) minus(o taskTally) taskTally {
	return taskTally{t.additions - o.additions, t.documents - o.documents, t.deletions - o.deletions, t.ids - o.ids}
}

// tally counts the document tasks Meilisearch has for index uid.
func tally(ctx context.Context, ms meilisearch.ServiceManager, uid string) (taskTally, error) {
	var t taskTally
	q := &meilisearch.TasksQuery{
		Types:     []meilisearch.TaskType{meilisearch.TaskTypeDocumentAdditionOrUpdate, meilisearch.TaskTypeDocumentDeletion},
		IndexUIDS: []string{uid},
		Limit:     1000,
	}
	for {
		res, err := ms.GetTasks(ctx, q)
		if err != nil {
			return t, fmt.Errorf("tasks of %s: %w", uid, err)
		}
		for _, task := range res.Results {
			if task.Type == meilisearch.TaskTypeDocumentDeletion {
				t.deletions++
				t.ids += task.Details.ProvidedIds
			} else {
				t.additions++
				t.documents += task.Details.ReceivedDocuments
			}
		}
		if res.Next <= 0 || len(res.Results) == 0 {
			return t, nil
		}
		q.From = res.Next
	}
}

// filteredCount is how many documents of index uid match filter.
func filteredCount(ctx context.Context, ms meilisearch.ServiceManager, uid, filter string) (int64, error) {
	var res meilisearch.DocumentsResult
	if err := ms.Index(uid).GetDocuments(ctx, &meilisearch.DocumentsQuery{Limit: 1, Filter: filter}, &res); err != nil {
		return 0, fmt.Errorf("count %s in %s: %w", filter, uid, err)
	}
	return res.Total, nil
}
