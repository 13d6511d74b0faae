package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// -jobs N: many small jobs in one sidecar (jobs.go). N collections of
// -jobs-docs small documents, one identity job each; each sidecar (the
// build and, with -against, the other binary, side by side) follows its
// own database of them. Once every job follows and the streams settled,
// for -idle: the sidecar's CPU over that time, then its RSS, sockets
// (/proc/PID/fd), goroutines (/metrics go_goroutines) and the change
// streams open on the server for its database ($currentOp with
// idleCursors: tailable cursors of its namespace). Then -latency writes,
// each to the next collection in a shuffled order (a trickle over all of
// them), each timed from insertOne until the document is searchable in
// every sidecar's index, polled. With -jobs-databases D, job i reads the
// collection of its name in the i mod D-th of D databases: the main one
// and D-1 others (MEILISTREAM_JOB_<NAME>_DATABASE).

// jobsRun is one sidecar's part of the -jobs workload.
type jobsRun struct {
	*sidecar
	db  *mongo.Database // the main database
	dbs []*mongo.Database
	lat []time.Duration
}

// dbOf is the database of job i's collection.
func (r *jobsRun) dbOf(i int) *mongo.Database { return r.dbs[i%len(r.dbs)] }

func runJobs(ctx context.Context, c config, tmp string, mc *mongo.Client, ms meilisearch.ServiceManager) error {
	n := c.jobs
	transforms := filepath.Join(tmp, "jobs")
	if err := os.Mkdir(transforms, 0o755); err != nil {
		return err
	}
	for i := range n {
		// An identity job: the collection of its name, an index of its name.
		if err := os.WriteFile(filepath.Join(transforms, jobName(i)+".js"), []byte("module.exports = {};\n"), 0o644); err != nil {
			return err
		}
	}
	runs := []*jobsRun{{sidecar: &sidecar{label: "", bin: c.sidecar, prefix: "jobs_", state: "meilistream"}, db: mc.Database("benchjobs")}}
	if c.against != "" {
		runs[0].label = c.sidecar
		runs = append(runs, &jobsRun{sidecar: &sidecar{label: c.against, bin: c.against, prefix: "jobsb_", state: "meilistream"}, db: mc.Database("benchjobs_b")})
	}
	for _, r := range runs {
		r.dbs = []*mongo.Database{r.db}
		for d := 1; d < max(c.jobDBs, 1); d++ {
			r.dbs = append(r.dbs, mc.Database(fmt.Sprintf("%s_%d", r.db.Name(), d)))
		}
		for _, db := range r.dbs {
			_ = db.Drop(ctx)
		}
		fmt.Fprintf(os.Stderr, "seeding %d collections of %d documents in %s (and %d other databases) ...\n", n, c.jobDocs, r.db.Name(), len(r.dbs)-1)
		for i := range n {
			docs := make([]any, c.jobDocs)
			for k := range docs {
				docs[k] = bson.D{{Key: "_id", Value: int32(k)}, {Key: "title", Value: fmt.Sprintf("doc %d of %s", k, jobName(i))}}
			}
			if len(docs) > 0 {
				if _, err := r.dbOf(i).Collection(jobName(i)).InsertMany(ctx, docs); err != nil {
					return err
				}
			}
		}
	}
	sidecars := make([]*sidecar, len(runs))
	for i, r := range runs {
		sidecars[i] = r.sidecar
		r.ready = filepath.Join(tmp, fmt.Sprintf("jobsready%d", i))
		env := sidecarEnv(c, r.sidecar, transforms)
		env = append(env, "MEILISTREAM_MONGODB_DATABASE="+r.db.Name())
		for j := range n {
			if db := r.dbOf(j); db != r.db {
				env = append(env, "MEILISTREAM_JOB_"+strings.ToUpper(jobName(j))+"_DATABASE="+db.Name())
			}
		}
		if err := r.start(ctx, env, c.verbose); err != nil {
			return err
		}
		defer r.stop()
	}
	fail := func(err error) error {
		var b strings.Builder
		for _, r := range runs {
			r.stop()
			fmt.Fprintf(&b, "\nsidecar %s log (tail):\n%s", r.label, tail(r.log(), 3000))
		}
		return fmt.Errorf("%w%s", err, b.String())
	}
	t0 := time.Now()
	if err := waitFor(ctx, sidecars, 10*time.Minute, nil, func() (bool, error) {
		for _, r := range runs {
			if f, err := r.followingJobs(); err != nil || f < n {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return fail(fmt.Errorf("wait for %d jobs following: %w", n, err))
	}
	fmt.Fprintf(os.Stderr, "%d jobs following in every sidecar after %s; settling %s\n", n, time.Since(t0).Round(time.Millisecond), c.settle)
	// Catch-up streams merge at their first empty getMore; the heap
	// settles after the reindexes.
	if err := sleepCtx(ctx, max(c.settle, 5*time.Second)); err != nil {
		return fail(err)
	}
	for _, r := range runs {
		r.begin()
	}
	if err := sleepCtx(ctx, c.idle); err != nil {
		return fail(err)
	}
	type idle struct {
		cpu                 time.Duration
		rss                 int64
		sockets, goroutines int
		streams, allStreams int
	}
	all, err := changeStreams(ctx, mc, "")
	if err != nil {
		return fail(err)
	}
	idles := make([]idle, len(runs))
	for i, r := range runs {
		p := r.end()
		streams := 0
		for _, db := range r.dbs {
			k, err := changeStreams(ctx, mc, db.Name())
			if err != nil {
				return fail(err)
			}
			streams += k
		}
		idles[i] = idle{cpu: p.cpu, rss: rss(r.pid), sockets: sockets(r.pid), goroutines: int(r.metrics("go_goroutines")["go_goroutines"]), streams: streams, allStreams: all}
	}

	// The trickle: -latency writes, one at a time, each to the next
	// collection of a shuffled order, timed until searchable in every
	// sidecar.
	order := rand.Perm(n)
	for k := range c.latency {
		j := order[k%n]
		coll := jobName(j)
		id := int32(c.jobDocs + k)
		t := time.Now()
		for _, r := range runs {
			if _, err := r.dbOf(j).Collection(coll).InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "title", Value: "trickle"}}); err != nil {
				return fail(err)
			}
		}
		pending := slices.Clone(runs)
		for len(pending) > 0 {
			rest := pending[:0]
			for _, r := range pending {
				ok, err := titleIs(ctx, ms, r.prefix+coll, int(id), "trickle")
				if err != nil {
					return fail(err)
				}
				if ok {
					r.lat = append(r.lat, time.Since(t))
				} else {
					rest = append(rest, r)
				}
			}
			pending = rest
			if time.Since(t) > time.Minute {
				return fail(fmt.Errorf("write %d to %s not searchable after a minute", k, coll))
			}
			if len(pending) > 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}

	fmt.Printf("jobs: %d identity jobs on %d-document collections in %d source databases per sidecar; idle %s, then %d writes (one at a time, each to another collection)\n", n, c.jobDocs, max(c.jobDBs, 1), c.idle, c.latency)
	fmt.Printf("%-34s %8s %8s %8s %8s %9s %10s %9s %9s %9s\n", "sidecar", "streams", "sockets", "gorout.", "RSS MB", "RSS/job", "idle CPU %", "CPU%/job", "p50", "p99")
	for i, r := range runs {
		d := idles[i]
		label := r.label
		if label == "" {
			label = "meilistream"
		}
		pct := 100 * d.cpu.Seconds() / c.idle.Seconds()
		fmt.Printf("%-34s %8d %8d %8d %8.1f %8.2fM %10.3f %9.4f %9s %9s\n", shortLabel(label), d.streams, d.sockets, d.goroutines, mb(d.rss), mb(d.rss)/float64(n), pct, pct/float64(n),
			quantile(r.lat, 0.5).Round(100*time.Microsecond), quantile(r.lat, 0.99).Round(100*time.Microsecond))
	}
	fmt.Printf("change streams open on the server in all: %d (a cluster-wide one, for jobs beyond the main database, is on admin and counted only here)\n", idles[0].allStreams)
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fmt.Errorf("sidecar %s: %w", r.label, err)
		}
	}
	return nil
}

func jobName(i int) string { return fmt.Sprintf("c%04d", i) }

func shortLabel(s string) string {
	if len(s) > 34 {
		return "…" + s[len(s)-33:]
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// followingJobs counts the sidecar's jobs in /status that follow.
func (r *jobsRun) followingJobs() (int, error) {
	addr, _ := os.ReadFile(r.ready)
	if len(addr) == 0 {
		return 0, nil
	}
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/status")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var rep struct {
		Jobs []struct {
			State string `json:"state"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return 0, nil
	}
	n := 0
	for _, j := range rep.Jobs {
		if j.State == "following" {
			n++
		}
	}
	return n, nil
}

// changeStreams counts the change-stream cursors open on the server
// (tailable cursors, idle between getMores or in one) on database db, or
// on every database when db is empty, from $currentOp with idleCursors.
func changeStreams(ctx context.Context, mc *mongo.Client, db string) (int, error) {
	cur, err := mc.Database("admin").Aggregate(ctx, mongo.Pipeline{
		{{Key: "$currentOp", Value: bson.D{{Key: "idleCursors", Value: true}, {Key: "allUsers", Value: true}}}},
	})
	if err != nil {
		return 0, fmt.Errorf("$currentOp: %w", err)
	}
	defer cur.Close(ctx)
	n := 0
	for cur.Next(ctx) {
		if tail, _ := cur.Current.Lookup("cursor", "tailable").BooleanOK(); !tail {
			continue
		}
		ns, _ := cur.Current.Lookup("ns").StringValueOK()
		if d, _, _ := strings.Cut(ns, "."); db == "" || d == db {
			n++
		}
	}
	return n, cur.Err()
}

// sockets counts the process's open sockets (/proc/PID/fd).
func sockets(pid int) int {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// quantile is the q-quantile of ds (nearest rank), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
