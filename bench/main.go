// Command bench measures the sidecar's own cost on the articles example:
//
//	go run ./bench -docs 100000
//
// It starts the test servers (internal/mongotest, internal/meilitest) in a
// child process of its own, seeds -docs generated ~1 KB articles
// (bench/articles), builds and starts the real meilistream binary on
// examples/transforms/articles.js, and reads the sidecar process's CPU time
// and peak RSS from /proc (Linux), so neither the servers' work nor the
// benchmark's own is counted. It reports:
//
//   - reindex: sidecar CPU µs per document, wall time, docs/s, peak RSS,
//     and the CPU per document over the middle half of the articles,
//     apart from what a reindex costs whatever its size (its start: the
//     heap growing to its working size);
//   - follow: sidecar CPU µs per change for -changes updates (begun
//     -settle after the reindex: its steady state, once the reindex's
//     memory was given back);
//   - latency: write in MongoDB until the document is visible in
//     Meilisearch (median, p99) over -latency sequential writes;
//   - with -unchanged, instead of all of the above: a follow where four
//     updates in five increment a counter the transform does not read,
//     followed by three sidecars side by side (every update sent, the
//     default skipUnchanged, skipUnchanged with the transform's fields
//     declared), each reported as Meilisearch documents received per
//     change and sidecar CPU per change (unchanged.go);
//   - with -lookups, instead: two sidecars side by side reindex the same
//     articles, each with an authorId, with the articles example and with
//     the same transform taking the author from a users collection by one
//     declared lookup (reindex CPU per document, whole and over the
//     middle half, and their ratio); then the user the first -fanout
//     articles depend on is renamed, and the lookup's sidecar alone is
//     measured until every dependent shows the new name: its batches
//     (/metrics), the document tasks Meilisearch received for the index,
//     the time and its CPU per dependent (lookups.go). -users sets how
//     many other users write the other articles in turn;
//   - with -verify, instead: one sidecar reindexes the articles, then
//     `meilistream verify articles` compares the index with the
//     collection while it follows: documents verified per second and CPU
//     per document of the verify's process beside the reindex's (verify.go);
//   - with -catchup, instead: one sidecar reindexes and follows articles
//     of -doc-kb KB (-docs defaults to -outage); the test Meilisearch then
//     processes no task (it still answers and enqueues) while -outage
//     updates are written, and resumes: the sidecar's RSS before the
//     outage, its peak RSS during the outage and during the catch-up (the
//     kernel's peak, reset at each phase's start), the Go heap's peaks
//     beside them, what it took in while Meilisearch waited, and how long
//     until every update was searchable (catchup.go). It needs the test
//     Meilisearch (not -meili), whose child process takes the pause;
//   - with -wait, instead: read your writes. A holder and a standby
//     sidecar on one job; -latency writes, one at a time, each with its
//     operationTime, timed until GET /wait for it returns on the holder
//     and on the standby, and until the document is searchable (polled as
//     the latency figure is), all three at once: the same writes, side by
//     side (wait.go);
//   - with -pods K, instead: K = 1 up to K sidecar processes on one job
//     reindex the articles, each trial into its own index and state
//     collection, each process held to -cpu-limit cores by a cgroup v1
//     cpu group of its own (the output says when it cannot be, and that
//     its figures are then not comparable): wall time, documents per
//     second and the speed-up over K = 1, CPU per document of the K
//     together, and the writes and bytes per document the state
//     collections took in the test MongoDB's history (serverStatus's
//     mongotest.oplog); -against runs the old binary's K = 1 beside the
//     new one's (pods.go);
//   - live reindex (with -live > 0): the transform file is edited, which
//     starts a swap reindex; meanwhile an update every -live-every is
//     timed from MongoDB until it is visible in the live index (median,
//     p99, and the longest), for as long as the reindex lasts: how stale
//     search goes while an index is rebuilt.
//
// CPU time on a shared machine varies with its load far more than most
// changes move it. -against OTHER runs a second sidecar binary side by
// side with the first (same collection, servers and moment; its own index
// and state collection) and reports both: compare those two figures, not
// runs made minutes apart. -cpuprofile DIR writes CPU profiles of the
// sidecar's reindex and follow phases.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		serve()
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// serve is the child process: the test servers, their addresses as one JSON
// line on stdout, then commands read from stdin, one a line, each answered
// with one line on stdout ("ok", or what went wrong), until stdin closes:
//
//	pause   the test Meilisearch stops processing tasks: requests are
//	        still answered and their tasks stay enqueued (an outage of
//	        the indexing, as a Meilisearch busy for minutes shows it)
//	resume  it processes them again
func serve() {
	ms, err := mongotest.Start(mongotest.Options{HistorySize: 2_000_000})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ml, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]string{"mongo": ms.URI(), "meili": ml.URL()})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "pause":
			ml.PauseTasks()
			fmt.Println("ok")
		case "resume":
			ml.ResumeTasks()
			fmt.Println("ok")
		default:
			fmt.Printf("unknown command %q (pause, resume)\n", cmd)
		}
	}
	ml.Close()
	ms.Close()
}

type config struct {
	docs, changes, latency int
	scan                   bool
	scanInterval, scanIdle time.Duration
	flush, settle          time.Duration
	transform, sidecar     string
	mongoURI, meiliURL     string
	verbose                bool
	profile, against       string
	memprofile             string
	live                   bool
	liveEvery              time.Duration
	unchanged              bool
	lookups                bool
	fanout, users          int
	catchup                bool
	wait                   bool
	flood                  int
	outage, docKB          int
	verify                 bool
	verifyRounds           int
	floor, floorFirst      bool
	identity               bool
	background             int
	pods                   int
	cpuLimit               float64
	jobs, jobDocs, jobDBs  int
	idle                   time.Duration
}

func run() error {
	var c config
	flag.IntVar(&c.docs, "docs", 100000, "articles to seed and reindex")
	flag.IntVar(&c.changes, "changes", 20000, "updates to follow")
	flag.IntVar(&c.latency, "latency", 200, "sequential writes timed from MongoDB to searchable")
	flag.DurationVar(&c.flush, "flush", time.Second, "MEILISTREAM_FLUSH_INTERVAL of the sidecar")
	flag.DurationVar(&c.settle, "settle", 0, "wait this long between the reindex and the follow, so the follow is measured after the reindex's memory was given back (a follow's steady state) rather than right after it")
	flag.StringVar(&c.transform, "transform", "examples/transforms/articles.js", "the job's transform file")
	flag.StringVar(&c.sidecar, "sidecar", "", "meilistream binary (default: go build . into a temp dir)")
	flag.StringVar(&c.mongoURI, "mongo", "", "use this MongoDB (replica set) instead of the test server")
	flag.StringVar(&c.meiliURL, "meili", "", "use this Meilisearch instead of the test server")
	flag.BoolVar(&c.verbose, "v", false, "show the sidecar's log")
	flag.StringVar(&c.profile, "cpuprofile", "", "write CPU profiles of the sidecar process (reindex.pprof, follow.pprof; with -verify, reindex.pprof and the verify process's whole run: verify.pprof) and its binary (meilistream) into this directory; builds the sidecar with a profiling hook (-sidecar is then not allowed)")
	flag.StringVar(&c.memprofile, "memprofile", "", "write the sidecar's heap profile and memory classes at its peak (peak-heap.pprof, peak-mem.txt; with -verify, what the verify process allocated: verify-allocs.pprof) and its binary (meilistream) into this directory; builds the sidecar with a profiling hook (-sidecar is then not allowed)")
	flag.BoolVar(&c.live, "live", true, "after the latency samples, edit the transform and time writes made during the reindex it starts until each is visible in the live index")
	flag.DurationVar(&c.liveEvery, "live-every", 20*time.Millisecond, "with -live, one update this often while the reindex runs")
	flag.BoolVar(&c.unchanged, "unchanged", false, "instead of the phases above, the workload of updates that cannot change a search document: -changes updates, 4 in 5 incrementing a counter the transform does not read, followed by three sidecars side by side (every update sent, skipUnchanged, skipUnchanged with fields); reports Meilisearch documents received and sidecar CPU per change")
	flag.BoolVar(&c.lookups, "lookups", false, "instead of the phases above, the lookups workload: two sidecars side by side reindex articles with and without a lookup of their author in a users collection (reindex CPU per document and the ratio), then one user on whom -fanout articles depend is renamed (batches and Meilisearch tasks it took, time until all are searchable)")
	flag.IntVar(&c.fanout, "fanout", 10000, "with -lookups, the articles written by the user who is renamed (at most -docs)")
	flag.IntVar(&c.users, "users", 10000, "with -lookups, the other users, authors of the other articles in turn")
	flag.BoolVar(&c.catchup, "catchup", false, "instead of the phases above, the catch-up workload: articles of -doc-kb KB are reindexed and followed, the test Meilisearch stops processing tasks while -outage updates are written, then resumes; reports the sidecar's RSS before, peak RSS during the outage and the catch-up, and the catch-up's time")
	flag.IntVar(&c.outage, "outage", 50000, "with -catchup, the updates written while Meilisearch processes no task (to distinct articles while -docs allows; -docs defaults to this)")
	flag.IntVar(&c.docKB, "doc-kb", 10, "with -catchup, the size of each article's body in KB")
	flag.IntVar(&c.verifyRounds, "verify-rounds", 1, "with -verify: rounds of a reindex and the verify (and -against's verify, which going first alternating)")
	flag.BoolVar(&c.verify, "verify", false, "instead of the phases above, the verify workload: a sidecar reindexes the articles, then `meilistream verify` compares its index with the collection while it follows; reports documents verified per second and CPU per document beside the reindex's")
	flag.BoolVar(&c.wait, "wait", false, "instead of the phases above, the read-your-writes workload: a holder and a standby sidecar on one job (-docs defaults to 2000); -latency writes one at a time, each timed until GET /wait for its operationTime returns on the holder and on the standby, and until searchable (polled), side by side (wait.go)")
	flag.IntVar(&c.flood, "flood", 200, "with -wait, then as many writes again while this many more waiters (half on each sidecar) ask GET /wait for the latest write again and again: whether a flood of waits slows the pipeline")
	flag.BoolVar(&c.floor, "floor", false, "also run the floor build side by side (go build -tags floor: the same engine with the transform of articles.js compiled in Go in place of goja, see transform/floor.go) and print each sidecar's cost as a ratio to it")
	flag.BoolVar(&c.floorFirst, "floor-first", false, "with -floor, start the floor build first (the order the sidecars start and are polled in), so runs can swap it")
	flag.IntVar(&c.background, "background", 0, "while the latency samples are taken, this many other updates a second (titles of other published articles), so each timed write meets batches as a busy collection makes them rather than a quiet stream")
	flag.BoolVar(&c.identity, "identity", false, "the job without a transform function (the identity: each document indexed as it is) instead of -transform")
	flag.BoolVar(&c.scan, "scan", false, "instead of the phases above, the scan-mode workload: two sidecars side by side, one following the change stream and one in scan mode (mode scan, key "+scanKey+"), on the same collection; every write sets the key; reports CPU per change followed over -changes updates, write-to-searchable latency of -latency single writes and idle CPU, side by side (scan.go)")
	flag.DurationVar(&c.scanInterval, "scan-interval", time.Second, "with -scan, the scan-mode sidecar's scanInterval")
	flag.DurationVar(&c.scanIdle, "scan-idle", 10*time.Second, "with -scan, how long both sidecars are measured idle")
	flag.IntVar(&c.pods, "pods", 0, "instead of the phases above, the pods workload: K = 1 up to this many sidecar processes on one job reindex the articles, each trial into its own index (wall time, documents per second, CPU and MongoDB writes per document; with -against, the old binary's K = 1 beside the new one's; -docs defaults to 1000000; pods.go)")
	flag.Float64Var(&c.cpuLimit, "cpu-limit", 0, "with -pods, the cores each sidecar may use, by a cgroup v1 cpu controller of its own (needs root; 0: no limit)")
	flag.StringVar(&c.against, "against", "", "another meilistream binary to run side by side with the first on the same collection and servers (its own index and state collection), so both meet the same load: an A/B comparison on a noisy machine")
	flag.IntVar(&c.jobs, "jobs", 0, "instead of the phases above, the many-jobs workload: this many identity jobs on small collections in one sidecar (and with -against the other binary, side by side, its own database); after -idle, the change streams open on the server, sockets, goroutines, RSS and idle CPU of each sidecar, then -latency writes, each to another collection, timed until searchable (jobs.go)")
	flag.IntVar(&c.jobDocs, "jobs-docs", 10, "with -jobs, documents in each collection")
	flag.IntVar(&c.jobDBs, "jobs-databases", 1, "with -jobs, the source databases the collections are spread over in turn (the first the main one, the others named by each job's database option)")
	flag.DurationVar(&c.idle, "idle", 20*time.Second, "with -jobs, how long the idle CPU is counted")
	breakdownOf := flag.String("breakdown", "", "only print the parts (transform, conversion, encoding, driver, HTTP, GC...) of the CPU profiles a -cpuprofile run wrote into this directory, and exit")
	flag.Parse()
	if *breakdownOf != "" {
		return printBreakdown(*breakdownOf)
	}
	modes := 0
	for _, on := range []bool{c.unchanged, c.lookups, c.catchup, c.wait, c.verify, c.scan, c.pods > 0, c.jobs > 0} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return errors.New("-unchanged, -lookups, -catchup, -wait, -verify, -scan, -pods and -jobs are workloads of their own: give one")
	}
	if c.floor && modes > 0 {
		return errors.New("-floor measures the default workload: drop -unchanged, -lookups, -catchup, -wait, -verify, -scan, -pods or -jobs")
	}
	if c.against != "" && modes > 0 && c.pods == 0 && c.jobs == 0 && !c.verify {
		// The other workloads run one binary; an -against they ignored
		// would make a run of one binary look like a comparison.
		return errors.New("-against runs beside the default, -verify, -pods and -jobs workloads only: for the others run each binary with -sidecar in turn")
	}
	if c.wait && !flagSet("docs") {
		c.docs = 2000
	}
	if c.pods > 0 && !flagSet("docs") {
		c.docs = 1000000 // the measure: a million articles
	}
	if c.catchup && !flagSet("docs") {
		c.docs = c.outage
	}
	if runtime.GOOS != "linux" {
		return errors.New("reads the sidecar's CPU and RSS from /proc: Linux only")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	tmp, err := os.MkdirTemp("", "meilistream-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var srv *servers
	if c.mongoURI == "" || c.meiliURL == "" {
		s, err := startServers(ctx)
		if err != nil {
			return err
		}
		defer s.close()
		srv = s
		if c.mongoURI == "" {
			c.mongoURI = s.addrs["mongo"]
		}
		if c.meiliURL == "" {
			c.meiliURL = s.addrs["meili"]
		} else {
			srv.meili = false
		}
	}
	var build []string
	if c.profile != "" || c.memprofile != "" {
		if c.sidecar != "" {
			return errors.New("-cpuprofile and -memprofile build the sidecar themselves: drop -sidecar")
		}
		for _, dir := range []*string{&c.memprofile, &c.profile} {
			if *dir == "" {
				continue
			}
			if err := os.MkdirAll(*dir, 0o755); err != nil {
				return err
			}
			if *dir, err = filepath.Abs(*dir); err != nil {
				return err
			}
			c.sidecar = filepath.Join(*dir, "meilistream")
		}
		overlay, err := profileOverlay(tmp)
		if err != nil {
			return err
		}
		build = append(build, "-overlay", overlay)
	}
	built := c.sidecar == "" || c.profile != "" || c.memprofile != ""
	if built {
		if c.sidecar == "" {
			c.sidecar = filepath.Join(tmp, "meilistream")
		}
		fmt.Fprintln(os.Stderr, "building meilistream ...")
		b := exec.CommandContext(ctx, "go", append(append([]string{"build"}, build...), "-o", c.sidecar, ".")...)
		b.Stderr = os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("go build: %w", err)
		}
	}
	var floorBin string
	if c.floor {
		floorBin = filepath.Join(tmp, "meilistream-floor")
		fmt.Fprintln(os.Stderr, "building the floor (go build -tags floor) ...")
		b := exec.CommandContext(ctx, "go", "build", "-tags", "floor", "-o", floorBin, ".")
		b.Stderr = os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("go build -tags floor: %w", err)
		}
	}
	transforms := filepath.Join(tmp, "transforms")
	if err := os.Mkdir(transforms, 0o755); err != nil {
		return err
	}
	src, err := os.ReadFile(c.transform)
	if c.identity {
		src, err = []byte(identityJS), nil
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(transforms, "articles.js"), src, 0o644); err != nil {
		return err
	}

	mc, err := mongo.Connect(options.Client().ApplyURI(c.mongoURI))
	if err != nil {
		return err
	}
	defer mc.Disconnect(context.Background())
	db := mc.Database("bench")
	coll := db.Collection("articles")
	_ = db.Drop(ctx)
	ms := meilisearch.New(c.meiliURL, meilisearch.DisableRetries())
	if c.jobs > 0 {
		return runJobs(ctx, c, tmp, mc, ms)
	}

	article := articles.Article
	switch {
	case c.lookups:
		if c.fanout < 1 || c.fanout > c.docs || c.users < 1 {
			return fmt.Errorf("-lookups needs 1 <= -fanout <= -docs (%d) and -users >= 1: -fanout %d, -users %d", c.docs, c.fanout, c.users)
		}
		article = func(i int) bson.D { return articleByUser(i, c.fanout, c.users) }
	case c.catchup:
		if srv == nil || !srv.meili {
			return errors.New("-catchup pauses the test Meilisearch's tasks: it cannot run with -meili")
		}
		if c.docKB < 1 || c.outage < 1 {
			return fmt.Errorf("-catchup needs -doc-kb >= 1 and -outage >= 1: -doc-kb %d, -outage %d", c.docKB, c.outage)
		}
		article = func(i int) bson.D { return articles.WithBody(i, c.docKB<<10) }
	}
	fmt.Fprintf(os.Stderr, "seeding %d articles ...\n", c.docs)
	t0 := time.Now()
	if err := seed(ctx, coll, 1, c.docs, article); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "seeded in %s\n", time.Since(t0).Round(time.Millisecond))
	published := 0
	for i := 1; i <= c.docs; i++ {
		if articles.Published(i) {
			published++
		}
	}

	if c.identity {
		published = c.docs // the identity indexes drafts too
	}

	switch {
	case c.unchanged:
		return runUnchanged(ctx, c, tmp, transforms, coll, ms, published)
	case c.lookups:
		return runLookups(ctx, c, tmp, transforms, db, ms, published)
	case c.catchup:
		return runCatchup(ctx, c, tmp, transforms, coll, ms, srv, published)
	case c.wait:
		return runWait(ctx, c, tmp, transforms, coll, ms, published)
	case c.verify:
		return runVerifyBench(ctx, c, tmp, transforms, ms, published)
	case c.scan:
		return runScan(ctx, c, tmp, transforms, coll, ms, published)
	case c.pods > 0:
		return runPods(ctx, c, tmp, transforms, db, ms, published)
	}

	// The sidecar, and with -against the other one, run side by side: each
	// its own index and state collection, the same collection and servers
	// and the same moment's load on the machine.
	// With -floor the floor build runs beside them, first or last.
	runs := []*sidecar{{label: "", bin: c.sidecar, prefix: "bench_", state: "meilistream"}}
	if c.against != "" || c.floor {
		runs[0].label = c.sidecar
		if built {
			runs[0].label = "meilistream (go build .)"
		}
	}
	if c.against != "" {
		runs = append(runs, &sidecar{label: c.against, bin: c.against, prefix: "benchb_", state: "meilistream_b"})
	}
	var floor *sidecar
	if c.floor {
		floor = &sidecar{label: "floor (go build -tags floor)", bin: floorBin, prefix: "benchf_", state: "meilistream_f", isFloor: true}
		if c.floorFirst {
			runs = append([]*sidecar{floor}, runs...)
		} else {
			runs = append(runs, floor)
		}
	}
	for i, r := range runs {
		r.ready = filepath.Join(tmp, fmt.Sprintf("ready%d", i))
		var extra []string
		if c.profile != "" && r.bin == c.sidecar {
			extra = append(extra, profileDirEnv+"="+c.profile)
		}
		if c.memprofile != "" && r.bin == c.sidecar {
			extra = append(extra, memProfileDirEnv+"="+c.memprofile)
		}
		if err := launch(ctx, c, ms, r, transforms, extra...); err != nil {
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

	// Reindex: from when each serves HTTP (the process's start, runtime,
	// clients, loading transforms, is not the reindex's) until its live
	// index holds every published article (the swap makes them appear at
	// once).
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
	profiled := runs[0]
	if profiled.isFloor {
		profiled = runs[1]
	}
	toggleProfile(c, profiled.pid) // start reindex.pprof
	load0 := loadavg()
	for _, r := range runs {
		r.begin()
	}
	if err := waitReindexed(ctx, ms, runs, published); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}
	toggleProfile(c, profiled.pid) // stop reindex.pprof
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

	// Follow: -changes updates of distinct published articles, counted
	// from the first write until the last one is searchable.
	// With -changes 0 there is nothing to wait for.
	select {
	case <-time.After(c.settle):
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	n := min(c.changes, published)
	toggleProfile(c, profiled.pid) // start follow.pprof
	for _, r := range runs {
		r.begin()
	}
	if err := update(ctx, coll, n, "follow"); err != nil {
		return fail(err)
	}
	last := lastPublished(n)
	if err := waitFollowed(ctx, ms, runs, n > 0, last, "follow"); err != nil {
		return fail(fmt.Errorf("follow: %w", err))
	}
	toggleProfile(c, profiled.pid) // stop follow.pprof

	// Latency: one write at a time, until searchable (in every index),
	// with -background a steady stream of other writes meanwhile.
	stopBackground := background(ctx, c, coll)
	const batchesMetric = "meilistream_batch_documents_count"
	latStart := time.Now()
	for _, r := range runs {
		r.latBatches = r.metrics(batchesMetric)[batchesMetric]
	}
	var lat []time.Duration
	for k := 0; k < c.latency; k++ {
		id := 1 + (k*7919)%c.docs
		if !articles.Published(id) {
			id++
		}
		mark := fmt.Sprintf("lat%d", k)
		t := time.Now()
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(id)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: mark}}}}); err != nil {
			return fail(err)
		}
		// Each index is polled in turn until it shows the write: each
		// sidecar's own latency, and the write's (the last of them).
		seen := make([]bool, len(runs))
		for left := len(runs); left > 0; {
			for i, r := range runs {
				if seen[i] {
					continue
				}
				ok, err := titleIs(ctx, ms, r.uid, id, mark)
				if err != nil {
					return fail(err)
				}
				if ok {
					seen[i] = true
					r.lat = append(r.lat, time.Since(t))
					left--
				}
			}
			if left > 0 {
				time.Sleep(time.Millisecond)
			}
		}
		lat = append(lat, time.Since(t))
	}

	latWall := time.Since(latStart)
	for _, r := range runs {
		r.latBatches = r.metrics(batchesMetric)[batchesMetric] - r.latBatches
	}
	bgRate := stopBackground()

	// Live reindex: an edited transform starts a swap reindex in each
	// sidecar; writes made meanwhile are timed until visible in each live
	// index.
	if c.live {
		if err := liveReindex(ctx, c, coll, ms, runs, filepath.Join(transforms, "articles.js"), src); err != nil {
			return fail(fmt.Errorf("live reindex: %w", err))
		}
	}

	// Clean shutdown.
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fail(fmt.Errorf("sidecar exit: %w", err))
		}
	}

	if c.profile != "" {
		fmt.Fprintf(os.Stderr, "profiles: go tool pprof -top %[1]s/meilistream %[1]s/reindex.pprof (and follow.pprof)\n", c.profile)
	}
	if c.profile != "" {
		defer func() {
			if err := printBreakdown(c.profile); err != nil {
				fmt.Fprintln(os.Stderr, "breakdown:", err)
			}
		}()
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	bg := ""
	if c.background > 0 {
		bg = fmt.Sprintf(" (beside %.0f other updates a second, of -background %d)", bgRate, c.background)
	}
	fmt.Printf("meilistream bench: %d articles (~1 KB BSON each, %d published), %d followed updates, %d latency samples%s, flushInterval %s, %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, published, n, len(lat), bg, c.flush, runtime.NumCPU(), load0, loadavg())
	for _, r := range runs {
		if r.label != "" {
			fmt.Printf("%s (side by side with the other):\n", r.label)
		}
		fmt.Printf("reindex: %.1f µs sidecar CPU per document, %s wall (%.0f docs/s), peak RSS %.1f MB\n",
			float64(r.reindex.cpu.Microseconds())/float64(c.docs), r.reindex.wall.Round(time.Millisecond),
			float64(c.docs)/r.reindex.wall.Seconds(), float64(r.peak)/(1<<20))
		if each, faults, ok := r.middle(c.docs, published); ok {
			fmt.Printf("of which the middle half of the documents %.1f µs each (%.2f page faults each), and %.2f s of CPU beyond that rate (fixed: the start, the heap's growth, the swap)\n",
				each, faults, (float64(r.reindex.cpu.Microseconds())-each*float64(c.docs))/1e6)
		}
		if n == 0 {
			fmt.Printf("of which system time (kernel: sockets, page faults, thread switches): reindex %.1f µs, %.2f page faults and %.3f switches per document\n",
				float64(r.reindex.sys.Microseconds())/float64(c.docs), float64(r.reindex.faults)/float64(c.docs), float64(r.reindex.switches)/float64(c.docs))
			fmt.Printf("allocated (Go heap, from /metrics): reindex %.0f bytes in %.0f objects per document\n",
				r.reindex.heap.bytes/float64(c.docs), r.reindex.heap.objects/float64(c.docs))
			continue
		}
		settled := ""
		if c.settle > 0 {
			settled = fmt.Sprintf(", begun %s after the reindex", c.settle)
		}
		fmt.Printf("follow:  %.1f µs sidecar CPU per change, %s wall (%.0f changes/s)%s\n",
			float64(r.follow.cpu.Microseconds())/float64(n), r.follow.wall.Round(time.Millisecond), float64(n)/r.follow.wall.Seconds(), settled)
		fmt.Printf("of which system time (kernel: sockets, page faults, thread switches): reindex %.1f µs, %.2f page faults and %.3f switches per document; follow %.1f µs, %.2f page faults and %.3f switches per change\n",
			float64(r.reindex.sys.Microseconds())/float64(c.docs), float64(r.reindex.faults)/float64(c.docs), float64(r.reindex.switches)/float64(c.docs),
			float64(r.follow.sys.Microseconds())/float64(n), float64(r.follow.faults)/float64(n), float64(r.follow.switches)/float64(n))
		fmt.Printf("allocated (Go heap, from /metrics): reindex %.0f bytes in %.0f objects per document; follow %.0f bytes in %.0f objects per change\n",
			r.reindex.heap.bytes/float64(c.docs), r.reindex.heap.objects/float64(c.docs),
			r.follow.heap.bytes/float64(n), r.follow.heap.objects/float64(n))
	}
	if len(lat) > 0 {
		what := ""
		if len(runs) > 1 {
			what = " (in both indexes)"
		}
		fmt.Printf("latency: write to searchable%s median %s, p99 %s (flushInterval %s)\n",
			what, lat[len(lat)/2].Round(time.Millisecond), lat[min(len(lat)-1, len(lat)*99/100)].Round(time.Millisecond), c.flush)
		for _, r := range runs {
			if len(runs) == 1 {
				break
			}
			l := r.lat
			sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
			fmt.Printf("latency of %s alone: median %s, p99 %s; %.2f batches a second meanwhile\n", r.label, l[len(l)/2].Round(time.Millisecond), l[min(len(l)-1, len(l)*99/100)].Round(time.Millisecond), r.latBatches/latWall.Seconds())
		}
	}
	if floor != nil {
		printFloorRatios(runs, floor, c.docs, published, n)
	}
	for _, r := range runs {
		if len(r.stale) == 0 {
			continue
		}
		if r.label != "" {
			fmt.Printf("%s: ", r.label)
		}
		st := r.stale
		sort.Slice(st, func(a, b int) bool { return st[a] < st[b] })
		fmt.Printf("live index during a reindex: %d writes, write to searchable median %s, p99 %s, longest %s (written %s after the edit; reindex of %d articles in %s)\n",
			len(st), st[len(st)/2].Round(time.Millisecond), st[min(len(st)-1, len(st)*99/100)].Round(time.Millisecond),
			st[len(st)-1].Round(time.Millisecond), r.longestAt.Round(time.Millisecond), c.docs, r.rebuild.Round(time.Millisecond))
	}
	return nil
}

// liveReindex edits the transform (a statement that changes its tokens, not
// its output), so each sidecar starts a swap reindex, and times an update
// every c.liveEvery until visible in each live index, for as long as a
// reindex runs.
func liveReindex(ctx context.Context, c config, coll *mongo.Collection, ms meilisearch.ServiceManager, runs []*sidecar, file string, src []byte) error {
	edited := append([]byte("const BENCH_REINDEX = 1;\n"), src...)
	if err := os.WriteFile(file, edited, 0o644); err != nil {
		return err
	}
	start := time.Now()
	reindexing := func(r *sidecar) bool {
		addr, _ := os.ReadFile(r.ready)
		ok, _ := following(strings.TrimSpace(string(addr)))
		return !ok
	}
	// Until each sidecar has seen the edit (its reindex began).
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		for _, r := range runs {
			if !reindexing(r) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("the edit started no reindex: %w", err)
	}
	type write struct {
		id    int
		mark  string
		at    time.Time
		seen  []bool
		nseen int
	}
	var (
		mu      sync.Mutex
		pending []*write
		done    = make(chan struct{})
		pollErr error
	)
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				todo := make([]*write, 0, len(pending))
				for _, w := range pending {
					if !w.seen[i] {
						todo = append(todo, w)
					}
				}
				mu.Unlock()
				for _, w := range todo {
					ok, err := titleIs(ctx, ms, r.uid, w.id, w.mark)
					if err != nil {
						mu.Lock()
						pollErr = err
						mu.Unlock()
						return
					}
					if ok {
						mu.Lock()
						w.seen[i] = true
						w.nseen++
						d := time.Since(w.at)
						if len(r.stale) == 0 || d > slices.Max(r.stale) {
							r.longestAt = w.at.Sub(start)
						}
						r.stale = append(r.stale, d)
						mu.Unlock()
					}
				}
				select {
				case <-done:
					if len(todo) == 0 {
						return
					}
				case <-ctx.Done():
					return
				default:
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	tick := time.NewTicker(c.liveEvery)
	defer tick.Stop()
	for k := 0; ; k++ {
		any := false
		for _, r := range runs {
			if r.rebuild == 0 {
				if reindexing(r) {
					any = true
				} else {
					r.rebuild = time.Since(start)
				}
			}
		}
		if !any {
			break
		}
		id := 1 + (k*104729)%c.docs
		if !articles.Published(id) {
			id++
		}
		w := &write{id: id, mark: fmt.Sprintf("live%d", k), at: time.Now(), seen: make([]bool, len(runs))}
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(id)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: w.mark}}}}); err != nil {
			close(done)
			wg.Wait()
			return err
		}
		mu.Lock()
		pending = append(pending, w)
		mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
			close(done)
			wg.Wait()
			return ctx.Err()
		}
	}
	// A write the reindex overtook (a later write to the same article
	// changed its title again) is never seen with its own mark: only the
	// last write to each article counts.
	mu.Lock()
	last := map[int]*write{}
	for _, w := range pending {
		last[w.id] = w
	}
	kept := pending[:0]
	for _, w := range pending {
		if last[w.id] == w {
			kept = append(kept, w)
		}
	}
	pending = kept
	mu.Unlock()
	close(done)
	wg.Wait()
	return pollErr
}

// sidecar is one meilistream process under measurement.
type sidecar struct {
	label, bin, prefix, state string
	uid, ready                string
	isFloor                   bool // the floor build (-floor)
	// lat: each latency sample, until this sidecar's index showed it.
	lat        []time.Duration
	latBatches float64 // batches made durable while they were taken

	cmd    *exec.Cmd
	pid    int
	exited chan error
	done   bool // exited was received
	err    error
	logMu  sync.Mutex
	logBuf strings.Builder

	// The phase being counted.
	running         bool
	t0              time.Time
	cpu0, sys0      time.Duration
	flt0, csw0      int64
	heap0           heapCount
	peak            int64
	reindex, follow phase
	// The reindex's cost until about a quarter and three quarters of the
	// published articles were in the index being rebuilt (q1In and q3In
	// of them; 0: not seen, e.g. a reindex faster than the polling). The
	// half between is the cost per document once running; the rest of
	// the reindex's cost is fixed (the heap growing to its working size).
	q1, q3     phase
	q1In, q3In int64
	// stale holds, for each write made while an edited transform's
	// reindex ran, the time until it was visible in the live index;
	// rebuild is how long that reindex took.
	stale []time.Duration
	// longestAt is when the slowest of them was written, from the edit.
	longestAt time.Duration
	rebuild   time.Duration
}

// midway notes, while a reindex is counted, what it has cost when about a
// quarter and three quarters of the published articles are in the index
// being rebuilt (r.q1, r.q3).
func (r *sidecar) midway(ctx context.Context, ms meilisearch.ServiceManager, published int) error {
	if r.q3In != 0 {
		return nil
	}
	// The index being rebuilt: its count trails what the sidecar has
	// read by the batches in flight, by about as much at both points.
	m, err := indexCount(ctx, ms, r.uid+"__reindex")
	if err != nil {
		return err
	}
	if r.q1In == 0 && m >= int64(published)/4 {
		r.q1, r.q1In = r.sofar(), m
	} else if r.q1In > 0 && m >= int64(published)*3/4 {
		r.q3, r.q3In = r.sofar(), m
	}
	return nil
}

// middle is the reindex's CPU µs and page faults per document between the
// points midway noted; ok is false when it saw neither (a reindex faster
// than the polling).
func (r *sidecar) middle(docs, published int) (each, faults float64, ok bool) {
	if r.q3In == 0 {
		return 0, 0, false
	}
	// Documents read, drafts included, in the same proportion as the
	// published ones counted in the index.
	mid := float64(r.q3In-r.q1In) * float64(docs) / float64(published)
	return float64((r.q3.cpu - r.q1.cpu).Microseconds()) / mid, float64(r.q3.faults-r.q1.faults) / mid, true
}

// phase is what a sidecar cost in one phase.
type phase struct {
	cpu, sys, wall   time.Duration
	faults, switches int64
	heap             heapCount
}

// heapCount is what the sidecar's Go heap has allocated so far, in bytes
// and objects, as its /metrics reports it (go_memstats_alloc_bytes_total,
// go_memstats_mallocs_total): unlike CPU time it does not depend on the
// machine's speed, so it shows a change in what the code allocates in a
// single run.
type heapCount struct{ bytes, objects float64 }

// heap reads the sidecar's heapCount from its /metrics (zero when it
// cannot).
func (r *sidecar) heap() heapCount {
	addr, _ := os.ReadFile(r.ready)
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
	if err != nil {
		return heapCount{}
	}
	defer resp.Body.Close()
	var h heapCount
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_memstats_alloc_bytes_total":
			h.bytes, _ = strconv.ParseFloat(val, 64)
		case "go_memstats_mallocs_total":
			h.objects, _ = strconv.ParseFloat(val, 64)
		}
	}
	return h
}

// metrics reads the families named from the sidecar's /metrics, each the
// sum over its series (all their labels), e.g.
// meilistream_batch_documents_count: a family absent, or /metrics
// unreadable, is 0.
func (r *sidecar) metrics(families ...string) map[string]float64 {
	sums := make(map[string]float64, len(families))
	addr, _ := os.ReadFile(r.ready)
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
	if err != nil {
		return sums
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		series, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		for _, f := range families {
			if name == f {
				v, _ := strconv.ParseFloat(val, 64)
				sums[f] += v
			}
		}
	}
	return sums
}

// jobView is what the bench reads of the sidecar's one job in /status
// (the sidecar's status.Job, its counters and its Meilisearch queue).
type jobView struct {
	State    string `json:"state"`
	Counters struct {
		Changes int64 `json:"changes"`
		FanOuts int64 `json:"fan_outs"`
		Resent  int64 `json:"resent"`
	} `json:"counters"`
	Queue *struct {
		Tasks int   `json:"tasks"`
		Bytes int64 `json:"bytes"`
	} `json:"queue"`
	// BatchSize and PageSize are the configuration's batch_size and
	// page_size (a job's own batchSize, when its transform sets one, is
	// not shown there).
	BatchSize, PageSize int `json:"-"`
}

// job reads the sidecar's /status: its only job, and its batch size.
func (r *sidecar) job() (jobView, error) {
	addr, _ := os.ReadFile(r.ready)
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/status")
	if err != nil {
		return jobView{}, fmt.Errorf("status of the sidecar %s: %w", r.label, err)
	}
	defer resp.Body.Close()
	var rep struct {
		Jobs   []jobView `json:"jobs"`
		Config struct {
			BatchSize int `json:"batch_size"`
			PageSize  int `json:"page_size"`
		} `json:"config"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return jobView{}, fmt.Errorf("status of the sidecar %s: %w", r.label, err)
	}
	if len(rep.Jobs) != 1 {
		return jobView{}, fmt.Errorf("status of the sidecar %s: %d jobs, the bench runs one", r.label, len(rep.Jobs))
	}
	j := rep.Jobs[0]
	j.BatchSize, j.PageSize = rep.Config.BatchSize, rep.Config.PageSize
	return j, nil
}

// launch starts r on the transforms folder with its own index prefix and
// state collection and the extra variables, its index deleted first (each
// run reindexes into an empty one). r.ready must be set.
func launch(ctx context.Context, c config, ms meilisearch.ServiceManager, r *sidecar, transforms string, extra ...string) error {
	r.uid = r.prefix + "articles"
	if t, err := ms.DeleteIndex(ctx, r.uid); err == nil {
		ms.WaitForTask(ctx, t.TaskUID, 10*time.Millisecond)
	}
	return r.start(ctx, append(sidecarEnv(c, r, transforms), extra...), c.verbose)
}

// sidecarEnv is the environment of sidecar r on the job in transforms.
func sidecarEnv(c config, r *sidecar, transforms string) []string {
	return []string{
		"MEILISTREAM_MONGODB_URI=" + c.mongoURI,
		"MEILISTREAM_MONGODB_DATABASE=bench",
		"MEILISTREAM_MEILI_URL=" + c.meiliURL,
		"MEILISTREAM_TRANSFORMS=" + transforms,
		"MEILISTREAM_INDEX_PREFIX=" + r.prefix,
		"MEILISTREAM_STATE_COLLECTION=" + r.state,
		"MEILISTREAM_HTTP_ADDR=127.0.0.1:0",
		"MEILISTREAM_READY_FILE=" + r.ready,
		"MEILISTREAM_FLUSH_INTERVAL=" + c.flush.String(),
		"MEILISTREAM_LOG_LEVEL=info",
	}
}

func (r *sidecar) start(ctx context.Context, env []string, verbose bool) error {
	return r.startCmd(ctx, exec.CommandContext(ctx, r.bin, "run"), env, verbose)
}

// startCmd starts cmd, which runs the sidecar, as r's process.
func (r *sidecar) startCmd(ctx context.Context, cmd *exec.Cmd, env []string, verbose bool) error {
	r.cmd = cmd
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Cancel = func() error { return r.cmd.Process.Signal(os.Interrupt) }
	r.cmd.WaitDelay = 30 * time.Second
	if verbose {
		r.cmd.Stderr = os.Stderr
	} else {
		r.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
			r.logMu.Lock()
			defer r.logMu.Unlock()
			if r.logBuf.Len() < 1<<20 {
				r.logBuf.Write(p)
			}
			return len(p), nil
		})
	}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.exited = make(chan error, 1)
	go func() { r.exited <- r.cmd.Wait() }()
	r.pid = r.cmd.Process.Pid
	return nil
}

// stop interrupts the sidecar (a clean shutdown) and returns how it
// exited; it may be called again.
func (r *sidecar) stop() error {
	if r.cmd == nil || r.done {
		return r.err
	}
	r.cmd.Process.Signal(os.Interrupt)
	r.err, r.done = <-r.exited, true
	return r.err
}

func (r *sidecar) log() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.logBuf.String()
}

// begin starts counting a phase; end returns what it cost.
func (r *sidecar) begin() {
	r.running, r.t0 = true, time.Now()
	u, s := cpuSplit(r.pid)
	r.cpu0, r.sys0, r.flt0, r.csw0 = u+s, s, faults(r.pid), switches(r.pid)
	r.heap0 = r.heap()
}

func (r *sidecar) end() phase {
	r.running = false
	return r.sofar()
}

// sofar is what the phase being counted has cost until now.
func (r *sidecar) sofar() phase {
	u, s := cpuSplit(r.pid)
	h := r.heap()
	return phase{cpu: u + s - r.cpu0, sys: s - r.sys0, wall: time.Since(r.t0), faults: faults(r.pid) - r.flt0,
		switches: switches(r.pid) - r.csw0, heap: heapCount{bytes: h.bytes - r.heap0.bytes, objects: h.objects - r.heap0.objects}}
}

func (r *sidecar) sample() {
	if rs := rss(r.pid); rs > r.peak {
		r.peak = rs
	}
}

// servers is the child process running the test servers (serve).
type servers struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	addrs map[string]string // "mongo": its URI, "meili": its URL
	// meili is false when the bench was given another Meilisearch (-meili):
	// then the test one is not the sidecar's, and control cannot pause it.
	meili bool
}

func startServers(ctx context.Context) (*servers, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	child := exec.Command(self, "-serve")
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := child.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := child.Start(); err != nil {
		return nil, err
	}
	s := &servers{cmd: child, in: in, out: bufio.NewReader(out), meili: true}
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		s.close()
		return nil, fmt.Errorf("test servers: %w", err)
	}
	if err := json.Unmarshal(line, &s.addrs); err != nil {
		s.close()
		return nil, fmt.Errorf("test servers' addresses %q: %w", line, err)
	}
	return s, nil
}

// control sends the child one command of serve's and waits for its "ok".
func (s *servers) control(cmd string) error {
	if _, err := fmt.Fprintln(s.in, cmd); err != nil {
		return fmt.Errorf("test servers, %s: %w", cmd, err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("test servers, %s: %w", cmd, err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return fmt.Errorf("test servers, %s: %s", cmd, line)
	}
	return nil
}

// close stops the child (it stops at EOF on its stdin) and waits for it.
func (s *servers) close() {
	s.in.Close()
	s.cmd.Wait()
}

// seed inserts article(first) .. article(first+n-1), with a few writers in
// parallel.
func seed(ctx context.Context, coll *mongo.Collection, first, n int, article func(int) bson.D) error {
	const chunk = 1000
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	next := make(chan int)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := range next {
				docs := make([]any, 0, chunk)
				for i := from; i < min(from+chunk, first+n); i++ {
					docs = append(docs, article(i))
				}
				if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
			}
		}()
	}
	for from := first; from < first+n; from += chunk {
		select {
		case next <- from:
		case err := <-errc:
			close(next)
			wg.Wait()
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// update sets title to mark+id on the first n published articles, with a
// few writers in parallel.
func update(ctx context.Context, coll *mongo.Collection, n int, mark string) error {
	ids := make(chan int)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int64(id)}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: mark}}}})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
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
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// lastPublished is the id of the n-th published article.
func lastPublished(n int) int {
	id, k := 0, 0
	for k < n {
		id++
		if articles.Published(id) {
			k++
		}
	}
	return id
}

func titleIs(ctx context.Context, ms meilisearch.ServiceManager, uid string, id int, title string) (bool, error) {
	var doc map[string]any
	err := ms.Index(uid).GetDocument(ctx, strconv.Itoa(id), &meilisearch.DocumentQuery{Fields: []string{"title"}}, &doc)
	if err != nil {
		var me *meilisearch.Error
		if errors.As(err, &me) && me.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, err
	}
	return doc["title"] == title, nil
}

func indexCount(ctx context.Context, ms meilisearch.ServiceManager, uid string) (int64, error) {
	var res meilisearch.DocumentsResult
	err := ms.Index(uid).GetDocuments(ctx, &meilisearch.DocumentsQuery{Limit: 1}, &res)
	if err != nil {
		var me *meilisearch.Error
		if errors.As(err, &me) && me.StatusCode == http.StatusNotFound {
			return 0, nil
		}
		return 0, err
	}
	return res.Total, nil
}

// following reports whether /status shows every job following.
func following(addr string) (bool, error) {
	if addr == "" {
		return false, nil
	}
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `"following"`), nil
}

// waitFor polls cond every 20ms (calling each, when set, at every poll)
// until it holds, a sidecar exits or the timeout passes.
// waitReindexed ends each sidecar's reindex phase once its index holds
// the published articles, sampling their CPU and memory meanwhile and
// counting the middle half of the reindex as it passes.
func waitReindexed(ctx context.Context, ms meilisearch.ServiceManager, runs []*sidecar, published int) error {
	return waitFor(ctx, runs, 30*time.Minute, func() {
		for _, r := range runs {
			r.sample()
		}
	}, func() (bool, error) {
		all := true
		for _, r := range runs {
			if r.running {
				n, err := indexCount(ctx, ms, r.uid)
				if err != nil {
					return false, err
				}
				if n == int64(published) {
					r.reindex = r.end()
					r.peak = max(r.peak, hwm(r.pid))
				} else if err := r.midway(ctx, ms, published); err != nil {
					return false, err
				}
			}
			all = all && !r.running
		}
		return all, nil
	})
}

// waitFollowed ends each sidecar's follow phase once article id shows
// title in its index: the stream keeps order, so everything written
// before it was taken in. With nothing written (wrote false) it ends at
// once.
func waitFollowed(ctx context.Context, ms meilisearch.ServiceManager, runs []*sidecar, wrote bool, id int, title string) error {
	return waitFor(ctx, runs, 10*time.Minute, nil, func() (bool, error) {
		if !wrote {
			return true, nil
		}
		all := true
		for _, r := range runs {
			if r.running {
				ok, err := titleIs(ctx, ms, r.uid, id, title)
				if err != nil {
					return false, err
				}
				if ok {
					r.follow = r.end()
				}
			}
			all = all && !r.running
		}
		return all, nil
	})
}

func waitFor(ctx context.Context, runs []*sidecar, timeout time.Duration, each func(), cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		if each != nil {
			each()
		}
		ok, err := cond()
		if ok {
			return nil
		}
		lastErr = err
		for _, r := range runs {
			select {
			case err := <-r.exited:
				r.exited <- err
				return fmt.Errorf("the sidecar %s exited: %v", r.label, err)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s (last error: %v)", timeout, lastErr)
		}
	}
}

// cpu is the process's user+system CPU time from /proc/PID/stat (fields 14
// and 15, in clock ticks of 1/100 s on Linux): every thread's, the
// collector's included.
func cpu(pid int) time.Duration {
	u, s := cpuSplit(pid)
	return u + s
}

// cpuSplit is cpu as user and system time.
func cpuSplit(pid int) (user, system time.Duration) {
	f := procStat(pid)
	if f == nil {
		return 0, 0
	}
	// f[0] is field 3 (state): utime is field 14, stime 15.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * 10 * time.Millisecond, time.Duration(st) * 10 * time.Millisecond
}

// faults is the process's count of minor page faults (field 10 of
// /proc/PID/stat): each is a fresh page of memory touched for the first
// time, much of the system CPU time of a process that allocates a lot (its
// heap returned to the kernel and taken again).
func faults(pid int) int64 {
	f := procStat(pid)
	if f == nil {
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

// switches is how many times the process's threads were switched out of
// a CPU, waiting (voluntary: a futex, epoll, the runtime's sysmon sleeping)
// or preempted: the sum over /proc/PID/task/*/status. Switches are dear on
// a virtual machine, where a wake-up can cost tens of microseconds. A count
// is not inflated when the machine runs slow, as CPU time is; a follow's
// switches per change still
// grow when changes arrive more slowly (fewer share each wake-up).
func switches(pid int) int64 {
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, d := range dirs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, d.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "voluntary_ctxt_switches:") || strings.HasPrefix(l, "nonvoluntary_ctxt_switches:") {
				k, _ := strconv.ParseInt(strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]), 10, 64)
				n += k
			}
		}
	}
	return n
}

// procStat returns the fields of /proc/PID/stat from field 3 (state) on.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// rss and hwm read VmRSS and VmHWM (peak) from /proc/PID/status, in bytes.
func rss(pid int) int64 { return procStatus(pid, "VmRSS:") }
func hwm(pid int) int64 { return procStatus(pid, "VmHWM:") }

func procStatus(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key) {
			f := strings.Fields(l)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// loadavg is the machine's 1-minute load average (/proc/loadavg): the
// figures are CPU time of the sidecar alone, but a loaded machine makes
// every instruction slower (caches, frequency, hyperthreads).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// flagSet reports whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
