package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/synccheck"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// itemsJS is the transform of most tests: hidden documents are kept out,
// a document with throw: true makes it throw, and bad: true makes it
// return a field Meilisearch refuses (a document id in a wrong form is
// impossible, so the test server's FailNextTask plays that part).
const itemsJS = `module.exports = {
  collection: "items",
  index: "items",
  transform(doc) {
    if (doc.hidden) return null;
    if (doc.throw) throw new Error("boom");
    return { title: doc.title, n: doc.n };
  },
};
`

// testTTL is the tests' lease period.
const testTTL = time.Minute

type env struct {
	t      *testing.T
	ctx    context.Context
	mongo  *mongotest.Server
	meili  *meilitest.Server
	client *mongo.Client
	db     *mongo.Database
	coll   *mongo.Collection
	state  *mongo.Collection
	errs   *mongo.Collection
	mc     *meili.Client
	leases *lease.Manager
	cfg    engine.Config
	log    hclog.Logger
	// metrics, when set, is what engine() reports to.
	metrics *httpapi.Metrics
}

func newEnv(t *testing.T, history int) *env {
	t.Helper()
	return newEnvOn(t, mongotest.Options{HistorySize: history})
}

// newEnvOn is newEnv on a test MongoDB started with opts.
func newEnvOn(t *testing.T, opts mongotest.Options) *env {
	t.Helper()
	// A bound for a test that hangs, not a speed: the race detector on a
	// loaded machine makes the largest tests (a 10 000-dependent fan-out)
	// take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	ms, client := testutil.StartMongo(t, opts)
	mm, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mm.Close() })
	db := client.Database("app")
	e := &env{
		t: t, ctx: ctx, mongo: ms, meili: mm, client: client, db: db,
		coll:  db.Collection("items"),
		state: db.Collection("meilistream"),
		errs:  db.Collection("meilistream_errors"),
		mc:    meili.NewClient(mm.URL(), ""),
		cfg: engine.Config{
			BatchSize: 100, PageSize: 200, FlushInterval: 20 * time.Millisecond,
			PositionInterval: 100 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryCap: 100 * time.Millisecond,
			// The brake reads a loaded machine's slowness as a busy
			// server's and slows the reindexes these tests wait for;
			// throttle_internal_test.go tests it with a clock of its own.
			ReindexMaxReadLatency: -1, ReindexMaxTasks: -1,
		},
		log: hclog.New(&hclog.LoggerOptions{Level: testLogLevel(), Output: testWriter{t}}),
	}
	// No renewer runs in these tests: the lease must hold, by the process's
	// clock too (Lease.Held), for a whole test on a slow machine.
	e.leases, err = lease.New(e.state, "test:1:a", lease.Options{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func (e *env) job(src string) *transform.Job {
	e.t.Helper()
	dir := e.t.TempDir()
	path := filepath.Join(dir, "items.js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		e.t.Fatal(err)
	}
	// The job's batchSize and flushInterval default to the configuration's,
	// as cmd_run wires them (a job's own options override the engine's).
	// No memory bound: it judges the process's heap, which here holds the
	// test servers too, and a call stopped for their growth would fail a
	// test of something else (the bound has its tests in transform).
	j, err := transform.LoadFile(path, []byte(src), transform.Options{Defaults: transform.JobDefaults{
		BatchSize: e.cfg.BatchSize, FlushInterval: e.cfg.FlushInterval,
	}, MemoryLimit: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// sink is the job's Meilisearch sink as production builds it: guarded by
// the lease l the engine is given.
func (e *env) sink(job *transform.Job, l engine.Lease) sink.Sink {
	return meili.NewSink(e.mc, &job.Job, sink.NewGuard(l.Held), e.log)
}

func (e *env) engine() *engine.Engine {
	return engine.New(e.db, e.state, e.errs, e.cfg, e.metrics, e.log)
}

// monitoredDB is the test MongoDB's app database through a client of its
// own that reports its commands to mon: what one process asks.
func (e *env) monitoredDB(mon *event.CommandMonitor) *mongo.Database {
	e.t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(e.mongo.URI()).SetMonitor(mon))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { client.Disconnect(context.Background()) })
	return client.Database("app")
}

func (e *env) acquire() *lease.Lease {
	e.t.Helper()
	l, err := e.leases.Acquire(e.ctx, "items")
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) insert(from, to int, extra bson.M) {
	e.t.Helper()
	docs := make([]any, 0, to-from)
	for i := from; i < to; i++ {
		d := bson.M{"_id": i, "title": fmt.Sprintf("item %d", i), "n": i}
		for k, v := range extra {
			d[k] = v
		}
		docs = append(docs, d)
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		e.t.Fatal(err)
	}
}

// freshItems is the items collection through a client of its own,
// connected now. After a DropConnections the test's writes must not go
// through e.client: the engine shares it, and their first use of it after
// the drop can meet the pool cleared by the engine's (or the monitor's)
// failure on a dropped connection, and fail even after the driver's one
// retry (1 run in 5 of TestMongoResumableErrorsAndDroppedConnectionsLoseNothing
// did). A client connected after the drop has no dropped connection.
func (e *env) freshItems() *mongo.Collection {
	e.t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(e.mongo.URI()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { client.Disconnect(context.Background()) })
	return client.Database("app").Collection("items")
}

// equal waits until the index holds exactly transform(collection) minus the
// recorded errors (up to hangBound).
func (e *env) equal(job *transform.Job) {
	e.t.Helper()
	if err := synccheck.Eventually(e.ctx, hangBound, e.coll, e.errs, job, e.mc, "items"); err != nil {
		e.t.Fatal(err)
	}
}

// settled waits until the index holds transform(collection) and the job's
// position is recorded with job's hash (a reindex finished).
func (e *env) settled(job *transform.Job) {
	e.t.Helper()
	e.equal(job)
	until(e.t, "position recorded", func() bool { return e.positionHash() == job.Hash })
}

// running is an Engine.Run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
	stats  *status.JobStats
}

func (e *env) run(job *transform.Job, l *lease.Lease) *running {
	ctx, cancel := context.WithCancel(e.ctx)
	r := &running{cancel: cancel, done: make(chan error, 1), stats: status.NewJobStats()}
	eng := e.engine()
	sink := e.sink(job, l)
	go func() { r.done <- eng.Run(ctx, job, sink, l, r.stats, nil) }()
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
		return nil
	}
}

func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// hangBound is how long a test waits for what must come: a bound for a
// hung test, never a measure of speed. A fan-out of ten thousand
// dependents took over a minute on a machine loaded twentyfold, so it is
// three; only a failing test waits it out.
const hangBound = 3 * time.Minute

// until polls cond for up to hangBound.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Until(t, hangBound, what, cond, nil)
}

// positionHash is the hash of the job's recorded position, "" when it has
// none (a cleared position keeps its document, epoch and hashes).
func (e *env) positionHash() string {
	var d struct {
		Token bson.Raw `bson:"token"`
		Hash  string   `bson:"hash"`
	}
	err := e.state.FindOne(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: "items"}}}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if len(d.Token) == 0 {
		return ""
	}
	return d.Hash
}

func TestRunReindexesThenFollowsInsertUpdateReplaceDelete(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 2500, nil)
	e.insert(2500, 2600, bson.M{"hidden": true})
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.equal(job)
	until(t, "position recorded", func() bool { return e.positionHash() == job.Hash })

	// Follow: insert, update ($set), replace, delete, a document turned
	// away (null removes it), and one brought back.
	e.insert(5000, 5010, nil)
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"title": "updated"}}))
	e.ok(e.coll.ReplaceOne(e.ctx, bson.M{"_id": 2}, bson.M{"title": "replaced", "n": -2}))
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 3}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 4}, bson.M{"$set": bson.M{"hidden": true}}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2500}, bson.M{"$unset": bson.M{"hidden": ""}}))
	for i := 0; i < 20; i++ { // many changes to one id coalesce; the last wins
		e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 7}, bson.M{"$set": bson.M{"n": 1000 + i}}))
	}
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatalf("clean close: %v", err)
	}
	s := r.stats.Snapshot()
	if s.Reindexes != 1 || s.Changes == 0 {
		t.Fatalf("stats %+v", s)
	}
}

func (e *env) ok(_ any, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestRunResumesAfterRestartWithoutReindexing(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 500, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.equal(job)
	until(t, "position recorded", func() bool { return e.positionHash() == job.Hash })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Changes while no one follows are picked up from the position.
	e.insert(500, 600, nil)
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 0}))
	swaps := e.meili.Requests("POST /swap-indexes")
	r = e.run(job, l)
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 0 || e.meili.Requests("POST /swap-indexes") != swaps {
		t.Fatalf("restart reindexed: %+v", s)
	}
}

func TestWritesDuringALongReindexAreAllPresent(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 3000, nil)
	job := e.job(itemsJS)
	e.meili.Close()
	var err error
	e.meili, err = meilitest.Start(meilitest.Options{TaskDelay: 15 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.meili.Close() })
	e.mc = meili.NewClient(e.meili.URL(), "")
	r := e.run(job, e.acquire())
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	e.insert(10000, 10050, nil)
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2999}, bson.M{"$set": bson.M{"title": "late update"}}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 5}, bson.M{"$set": bson.M{"title": "early update"}}))
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 6}))
	if s := r.stats.Snapshot(); s.Phase != status.PhaseReindexing {
		t.Fatalf("the reindex ended before the writes; make it longer (phase %q)", s.Phase)
	}
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseTakenOverMidReindexStopsWithNothingSwappedOrRecorded(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 2000, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	for e.meili.Requests("POST /indexes/{uid}/documents") == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	e.meili.PauseTasks()                        // batches stay in flight: the reindex is mid-way
	e.mongo.AdvanceClock(testTTL + time.Second) // past the TTL: the lease lapses
	other, err := lease.New(e.state, "test:2:b", lease.Options{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(e.ctx, "items"); err != nil {
		t.Fatal(err)
	}
	e.meili.ResumeTasks()
	err = r.wait(t)
	if !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("want LEASE_LOST, got %v", err)
	}
	if n := e.meili.Requests("POST /swap-indexes"); n != 0 {
		t.Fatalf("%d swaps after losing the lease", n)
	}
	if h := e.positionHash(); h != "" {
		t.Fatal("position recorded after losing the lease")
	}
	if docs := e.meili.Documents("items"); len(docs) != 0 {
		t.Fatalf("live index has %d documents", len(docs))
	}
}

func TestReindexKilledMidwayResumesFromItsCheckpoint(t *testing.T) {
	e := newEnv(t, 0)
	const total = 4000
	e.insert(0, total, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	eng := e.engine()
	sink := e.sink(job, l)
	ctx, cancel := context.WithCancel(e.ctx)
	st := status.NewJobStats()
	done := make(chan error, 1)
	go func() {
		_, err := eng.Reindex(ctx, job, sink, l, st)
		done <- err
	}()
	until(t, "half the reindex", func() bool { return st.Snapshot().Reindex.Done >= total/2 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled reindex reported success")
	}
	if h := e.positionHash(); h != "" {
		t.Fatal("a cancelled reindex recorded a position")
	}
	states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
	if err != nil || len(states) != 1 || states[0].Reindex == nil {
		t.Fatalf("no checkpoint: %+v %v", states, err)
	}
	cp := states[0].Reindex.Count
	sum, err := eng.Reindex(e.ctx, job, sink, l, status.NewJobStats())
	if err != nil {
		t.Fatal(err)
	}
	read := sum.Indexed + sum.Skipped + sum.Errors
	if !sum.Resumed || sum.Previous != cp || sum.Previous+read != total {
		t.Fatalf("resumed=%v previous=%d (checkpoint %d) read again=%d, total %d", sum.Resumed, sum.Previous, cp, read, total)
	}
	t.Logf("killed at %d done, checkpoint at %d: re-read %d documents", st.Snapshot().Reindex.Done, cp, st.Snapshot().Reindex.Done-cp)
	if e.positionHash() != job.Hash {
		t.Fatal("no position after the resumed reindex")
	}
	e.equal(job)
}

// killSink plays kill -9 on a reindex once it was sent a random number of
// documents: the batch it was handed then and everything after is never
// sent, nothing more becomes durable, and the reindex's context is
// cancelled. A dead process's sends and waits fail at once (with a code
// the engine does not retry), so the reindex stops without waiting for
// its drain timeout: how long anything takes plays no part.
type killSink struct {
	sink.Sink
	k *killer
}

type killer struct {
	mu     sync.Mutex
	sent   int
	killAt int // 0: never
	dead   bool
	kill   func()
}

// hit says whether the process is dead, counting n documents about to be
// sent.
func (k *killer) hit(n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.dead && k.killAt > 0 && k.sent+n >= k.killAt {
		k.dead = true
		k.kill()
	}
	if !k.dead {
		k.sent += n
	}
	return k.dead
}

func (s killSink) Stage(ctx context.Context, resume bool) (sink.Staged, error) {
	st, err := s.Sink.Stage(ctx, resume)
	if err != nil {
		return nil, err
	}
	return killStaged{st, s.k}, nil
}

type killStaged struct {
	sink.Staged
	k *killer
}

// errKilled is what a dead process's sink answers: not retried.
var errKilled = errs.New(errs.LeaseLost, "items", "the process was killed: nothing it sends reaches the destination")

func (s killStaged) Send(ctx context.Context, b sink.Batch) (sink.Receipt, error) {
	if s.k.hit(len(b.Writes)) {
		return nil, errKilled
	}
	return s.Staged.Send(ctx, b)
}

func (s killStaged) Wait(ctx context.Context, r sink.Receipt) ([]sink.DocFailure, error) {
	if s.k.hit(0) {
		return nil, errKilled
	}
	return s.Staged.Wait(ctx, r)
}

// readIDs connects to the test MongoDB with a monitor that collects the
// _ids of the items the server returned (find and getMore replies): what
// a process read, whether or not it got as far as sending it.
func (e *env) readIDs() (*mongo.Database, func() map[int64]bool) {
	e.t.Helper()
	var mu sync.Mutex
	ids := map[int64]bool{}
	mon := &event.CommandMonitor{Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
		if ns, _ := ev.Reply.Lookup("cursor", "ns").StringValueOK(); ns != "app.items" {
			return
		}
		batch, ok := ev.Reply.Lookup("cursor", "firstBatch").ArrayOK()
		if !ok {
			batch, _ = ev.Reply.Lookup("cursor", "nextBatch").ArrayOK()
		}
		vals, _ := batch.Values()
		mu.Lock()
		defer mu.Unlock()
		for _, v := range vals {
			doc, ok := v.DocumentOK()
			if !ok {
				continue
			}
			// Items have integer _ids; a change event's _id (its resume
			// token) is a document.
			if id, ok := doc.Lookup("_id").AsInt64OK(); ok {
				ids[id] = true
			}
		}
	}}
	return e.monitoredDB(mon), func() map[int64]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(ids)
	}
}

// A process killed at any point of a reindex reads again, on restart, at
// most one page of what it had read: the reader never runs more than a
// page ahead of the last checkpoint, yet still reads while earlier parts
// are transformed and sent.
func TestReindexKilledAnywhereReadsAtMostOnePageAgain(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize, e.cfg.BatchSize = 100, 100
	const total = 2000
	e.insert(0, total, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	// Renewed while the runs take however long a loaded machine makes
	// them: the property is about pages read, not about time.
	lctx, stopKeep := l.Keep(e.ctx)
	defer stopKeep()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var before map[int64]bool // read by the run before
	for run := 0; ; run++ {
		src, read := e.readIDs()
		eng := engine.New(src, e.state, e.errs, e.cfg, nil, e.log)
		ctx, cancel := context.WithCancel(lctx)
		k := &killer{kill: cancel}
		if run < 8 {
			k.killAt = 1 + rng.IntN(4*e.cfg.PageSize)
		}
		sum, err := eng.Reindex(ctx, job, killSink{e.sink(job, l), k}, l, nil)
		cancel()
		ids := read()
		twice := 0
		for id := range ids {
			if before[id] {
				twice++
			}
		}
		t.Logf("run %d: sent %d (kill at %d), read %d, %d of them read by the run before", run, k.sent, k.killAt, len(ids), twice)
		if twice > e.cfg.PageSize {
			t.Fatalf("run %d read %d documents again, more than a page (%d)", run, twice, e.cfg.PageSize)
		}
		if err == nil {
			// The last run, or one that finished before its kill.
			if k.dead {
				t.Fatalf("run %d killed after %d sent reported success", run, k.sent)
			}
			if run > 0 && !sum.Resumed {
				t.Fatalf("run %d did not resume: %+v", run, sum)
			}
			break
		}
		if k.killAt == 0 {
			t.Fatal(err)
		}
		before = ids
	}
	if e.positionHash() != job.Hash {
		t.Fatal("no position after the resumed reindex")
	}
	e.equal(job)
}

func TestHistoryLostReindexes(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 300, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.mongo.SetHistorySize(10)
	e.insert(300, 400, nil) // 100 events: the position falls out of the history
	r = e.run(job, l)
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 1 {
		t.Fatalf("want a reindex, stats %+v", s)
	}
}

func TestHistoryLostFailsWithOnHistoryLostFail(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	job := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items", onHistoryLost: "fail",`, 1))
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.mongo.SetHistorySize(10)
	e.insert(100, 200, nil)
	r = e.run(job, l)
	if err := r.wait(t); !errors.Is(err, errs.ErrHistoryLost) {
		t.Fatalf("want HISTORY_LOST, got %v", err)
	}
}

func TestDroppedCollectionStopsClearsPositionAndRestartReindexes(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.equal(job)
	if err := e.coll.Drop(e.ctx); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t)
	if !errors.Is(err, engine.ErrInvalidated) || errs.CodeOf(err) != errs.Failed {
		t.Fatalf("want FAILED wrapping ErrInvalidated, got %v", err)
	}
	if h := e.positionHash(); h != "" {
		t.Fatal("position not cleared")
	}
	if n := len(e.meili.Documents("items")); n != 100 {
		t.Fatalf("the index was changed: %d documents", n)
	}
	e.insert(1000, 1010, nil)
	r = e.run(job, l)
	e.equal(job) // what the collection now holds
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestMeilisearchFailingThenRecoveringLosesNothing(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 200, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.equal(job)
	e.meili.FailNext(6, meilitest.Fail5xx)
	e.insert(1000, 1100, nil)
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 1}))
	e.equal(job)
	e.meili.FailNext(4, meilitest.FailDrop)
	for i := 0; i < 50; i++ {
		e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 1000 + i}, bson.M{"$set": bson.M{"n": -i}}))
	}
	e.meili.FailNextTask("internal", "simulated")
	e.insert(2000, 2010, nil)
	e.equal(job)
	// A task failed for a document reason: the batch is bisected; with a
	// one-document task the document is recorded and left out. Either way
	// the index equals transform(collection) minus the records.
	e.meili.FailNextTask("invalid_document_id", "simulated")
	e.insert(3000, 3040, nil)
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Retries == 0 {
		t.Fatalf("no retries counted: %+v", s)
	}
}

func TestMongoResumableErrorsAndDroppedConnectionsLoseNothing(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 200, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.equal(job)
	e.mongo.FailCommand(bson.D{
		{Key: "mode", Value: bson.D{{Key: "times", Value: 2}}},
		{Key: "data", Value: bson.D{
			{Key: "failCommands", Value: bson.A{"getMore"}},
			{Key: "errorCode", Value: 234},
			{Key: "errorLabels", Value: bson.A{"ResumableChangeStreamError"}},
		}},
	})
	e.insert(1000, 1050, nil)
	e.equal(job)
	// The engine's connections drop; the test's writes go through a client
	// connected after the drop (freshItems).
	e.mongo.DropConnections()
	e.coll = e.freshItems()
	e.insert(2000, 2050, nil)
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 1000}))
	e.mongo.DropConnections()
	e.coll = e.freshItems()
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2001}, bson.M{"$set": bson.M{"title": "after blip"}}))
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestEditedTransformTriggersReindex(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 300, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	edited := e.job(strings.Replace(itemsJS, "n: doc.n", "n: doc.n * 2", 1))
	r = e.run(edited, l)
	e.settled(edited)
	until(t, "new hash recorded", func() bool { return e.positionHash() == edited.Hash })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBadDocumentIsRecordedAndRetryClearsIt(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	e.insert(100, 102, bson.M{"throw": true}) // refused while reindexing
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.equal(job)
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 5}, bson.M{"$set": bson.M{"throw": true}})) // while following
	e.insert(200, 210, nil)                                                                // the job goes on
	until(t, "three error records", func() bool {
		n, _ := e.errs.CountDocuments(e.ctx, bson.M{"job": "items"})
		return n == 3
	})
	e.equal(job) // the index holds transform(collection) minus the three
	var rec bson.M
	if err := e.errs.FindOne(e.ctx, bson.M{"sourceId": 5}).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if rec["code"] != "TRANSFORM_FAILED" || rec["job"] != "items" {
		t.Fatalf("record %v", rec)
	}
	states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
	if err != nil || len(states) != 1 || states[0].Errors != 3 {
		t.Fatalf("state %+v %v", states, err)
	}
	// A later change that transforms without error clears its record.
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 101}, bson.M{"$unset": bson.M{"throw": ""}}))
	until(t, "record of 101 cleared", func() bool {
		n, _ := e.errs.CountDocuments(e.ctx, bson.M{"job": "items"})
		return n == 2
	})
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// The transform is fixed; retry writes the other two and clears them.
	fixed := e.job(strings.Replace(itemsJS, `if (doc.throw) throw new Error("boom");`, "", 1))
	sum, err := e.engine().Retry(e.ctx, fixed, e.sink(fixed, l), l)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Retried != 2 || sum.Written != 2 || sum.Failed != 0 {
		t.Fatalf("retry %+v", sum)
	}
	if n, _ := e.errs.CountDocuments(e.ctx, bson.M{}); n != 0 {
		t.Fatalf("%d records left", n)
	}
	if err := synccheck.Eventually(e.ctx, 5*time.Second, e.coll, e.errs, fixed, e.mc, "items"); err == nil {
		// fixed differs from the indexed transform only for thrown docs;
		// the others were indexed by the same code.
	} else {
		t.Fatal(err)
	}
}

func TestCloseFlushesPendingChanges(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.FlushInterval = time.Hour
	e.cfg.BatchSize = 100000
	e.insert(0, 50, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.equal(job)
	e.insert(100, 130, nil)
	until(t, "changes read", func() bool { return r.stats.Snapshot().Changes >= 30 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := e.meili.WaitIdle(e.ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := synccheck.Check(e.ctx, e.coll, e.errs, job, e.mc, "items"); err != nil || d != "" {
		t.Fatalf("not flushed on close: %s %v", d, err)
	}
}

func TestInPlaceReindexSweepsWhatIsNoLongerWanted(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 300, nil)
	job := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items", reindex: "inplace",`, 1))
	// The live index holds documents that no longer exist or are now kept
	// out: the sweep and the in-place deletes remove them.
	ti, err := e.mc.Index("items").AddDocuments(e.ctx, []map[string]any{{"id": 99999, "title": "gone"}, {"id": 7, "title": "stale"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mc.WaitForTask(e.ctx, ti.TaskUID, 0); err != nil {
		t.Fatal(err)
	}
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 7}, bson.M{"$set": bson.M{"hidden": true}}))
	l := e.acquire()
	sum, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Removed != 1 || sum.Skipped != 1 || sum.Indexed != 299 {
		t.Fatalf("summary %+v", sum)
	}
	if e.meili.Requests("POST /swap-indexes") != 0 {
		t.Fatal("an in-place reindex swapped")
	}
	e.equal(job)
}

func TestResumedReindexKeepsIdsOfEveryType(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.BatchSize, e.cfg.PageSize = 10, 10
	e.cfg.DrainTimeout = 200 * time.Millisecond
	// Integers sort before strings, strings before ObjectIds: a resume
	// after an integer _id must still read the others.
	var docs []any
	for i := 0; i < 40; i++ {
		docs = append(docs, bson.M{"_id": i, "title": "int"})
		docs = append(docs, bson.M{"_id": fmt.Sprintf("s%03d", i), "title": "string"})
		docs = append(docs, bson.M{"_id": bson.NewObjectID(), "title": "oid"})
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	// A slow transform (about 3 ms a document) keeps the first run from
	// finishing before the test stops it once a checkpoint is recorded.
	job := e.job(strings.Replace(itemsJS, "transform(doc) {", "transform(doc) { const t = Date.now(); while (Date.now() - t < 3) {}", 1))
	l := e.acquire()
	eng := e.engine()
	sink := e.sink(job, l)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { _, err := eng.Reindex(ctx, job, sink, l, nil); done <- err }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var cp struct {
			Count int64 `bson:"count"`
		}
		err := e.state.FindOne(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "reindex", Value: "items"}}}}).Decode(&cp)
		if err == nil && cp.Count >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of 10 documents within 15s (last count %d, %v)", cp.Count, err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the first reindex finished before it was stopped; the test cannot see a resume")
	}
	sum, err := eng.Reindex(e.ctx, job, sink, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Resumed || sum.Previous == 0 || sum.Previous+sum.Indexed != 120 {
		t.Fatalf("summary %+v: want a resumed reindex and 120 documents in all", sum)
	}
	e.equal(job)
}

// A reindex that gives up waiting for its swap (Meilisearch slow, or the
// process killed) leaves a swap task that may still succeed: the staged index
// is then the old live one. The next run must not resume into it and swap a
// partial index live; it starts over.
func TestReindexStoppedWhileSwappingStartsOverInsteadOfResuming(t *testing.T) {
	e := newEnv(t, 0)
	// Each task takes longer than the commit's time limit, so the swap's
	// wait gives up; the MongoDB writes before it (the last checkpoint,
	// the lease's confirmation, the checkpoint saying a swap began) fit
	// in it many times over, so the swap is always asked for.
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	e.cfg.DrainTimeout = 200 * time.Millisecond
	e.insert(0, 50, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	eng := e.engine()
	sink := e.sink(job, l)
	if err := sink.Prepare(e.ctx); err != nil { // the live index exists: a swap, not a rename
		t.Fatal(err)
	}
	if _, err := eng.Reindex(e.ctx, job, sink, l, nil); err == nil {
		t.Fatal("the first reindex did not give up waiting for its swap")
	}
	if err := slow.WaitIdle(e.ctx); err != nil { // the swap lands anyway
		t.Fatal(err)
	}
	e.cfg.DrainTimeout = 15 * time.Second
	sum, err := e.engine().Reindex(e.ctx, job, sink, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resumed || sum.Indexed != 50 {
		t.Fatalf("summary %+v: want a reindex started over with 50 documents", sum)
	}
	e.equal(job)
}

func TestDeposedFollowerStopsWithLeaseLostWhenItsPositionWriteIsFenced(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	job := e.job(itemsJS)
	old := e.run(job, e.acquire())
	e.equal(job)
	e.mongo.AdvanceClock(testTTL + time.Second) // the old holder stalls past its lease
	other, err := lease.New(e.state, "test:2:b", lease.Options{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := other.Acquire(e.ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	next := e.run(job, l2) // stamps the job's state with the new epoch
	e.insert(100, 110, nil)
	if err := old.wait(t); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed holder: want LEASE_LOST, got %v", err)
	}
	e.equal(job)
	if err := next.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestLagGrowsWhileMeilisearchIsStuckAndFallsBackToZero(t *testing.T) {
	e := newEnv(t, 0)
	reg := prometheus.NewRegistry()
	e.metrics = httpapi.NewMetrics(reg)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	e.meili.PauseTasks()
	e.insert(100, 110, nil)
	until(t, "lag over 300ms", func() bool { return r.stats.Snapshot().LagSeconds > 0.3 })
	// The metric (what alerts read) grows too, not only /status.
	lag := func() float64 { return metric(t, reg, "meilistream_follow_lag_seconds", "items") }
	until(t, "lag metric over 1s", func() bool { return lag() > 1 })
	e.meili.ResumeTasks()
	e.equal(job)
	until(t, "lag back to 0 when idle", func() bool { return r.stats.Snapshot().LagSeconds == 0 })
	until(t, "lag metric back to 0", func() bool { return lag() == 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestOrderHoldsUnderRandomFaults(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.BatchSize = 7
	e.cfg.FlushInterval = 5 * time.Millisecond
	e.insert(0, 50, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 8; round++ {
		switch round % 4 {
		case 0:
			e.meili.FailNextOn("POST /indexes/{uid}/documents", 1+rng.IntN(4), meilitest.Fail5xx)
		case 1:
			e.meili.FailNextOn("POST /indexes/{uid}/documents/delete-batch", 1+rng.IntN(3), meilitest.FailDrop)
		case 2:
			e.meili.FailNextTask("internal", "simulated")
		case 3:
			e.meili.FailNextOn("GET /tasks/{taskUid}", 1+rng.IntN(5), meilitest.FailDrop)
		}
		for i := 0; i < 60; i++ {
			id := rng.IntN(60)
			switch rng.IntN(5) {
			case 0:
				e.coll.DeleteOne(e.ctx, bson.M{"_id": id})
			case 1:
				e.coll.ReplaceOne(e.ctx, bson.M{"_id": id}, bson.M{"title": fmt.Sprint("r", round, i), "n": i}, options.Replace().SetUpsert(true))
			case 2:
				e.coll.UpdateOne(e.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"hidden": rng.IntN(2) == 0}})
			default:
				e.coll.UpdateOne(e.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"n": round*1000 + i}}, options.UpdateOne().SetUpsert(true))
			}
		}
		e.equal(job)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Retries < 4 {
		t.Fatalf("faults not met: %+v", s)
	}
}

func TestHistoryLostWhileFollowingReindexes(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	// settled means the reindex recorded its position, not that the
	// follower has opened its stream yet: on a slow machine the trim below
	// would then hit the position it is about to open, and the reindex for
	// that loss would race the insert below (still with a history of 5) and
	// lose its own start: a second loss, rightly fatal. One change through
	// the stream proves it is following.
	e.insert(100, 101, nil)
	e.equal(job)
	// The follower falls behind (Meilisearch stuck, its pipe and event
	// buffer full) while the history is trimmed past its stream. The insert
	// is one command, trimmed under the server's write lock: when it
	// returns the stream's position is gone (its next getMore fails with
	// 286), so no sleep is needed before enlarging the history again.
	e.mongo.SetHistorySize(5)
	e.meili.PauseTasks()
	e.insert(101, 2100, nil)
	// Room again for the reindex's own writes (its checkpoints are oplog
	// entries too: with 5 the new start would be lost again at once).
	e.mongo.SetHistorySize(100000)
	e.meili.ResumeTasks()
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 2 {
		t.Fatalf("want the first reindex and one after the history was lost: %+v", s)
	}
}

func TestReindexReadsOnAfterDroppedConnections(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 50
	e.insert(0, 3000, nil)
	job := e.job(itemsJS)
	st := status.NewJobStats()
	done := make(chan error, 1)
	go func() {
		l := e.acquire()
		_, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, st)
		done <- err
	}()
	until(t, "reindex under way", func() bool { return st.Snapshot().Reindex.Done > 0 })
	e.mongo.DropConnections()
	e.mongo.FailCommand(bson.D{
		{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 43}}},
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.equal(job)
}

func TestCloseWithMeilisearchStuckReturnsWithinTheDrainTimeout(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.DrainTimeout = 300 * time.Millisecond
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	e.meili.PauseTasks()
	e.insert(100, 110, nil)
	until(t, "changes read", func() bool { return r.stats.Snapshot().Changes >= 10 })
	start := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Meilisearch stays stuck until ResumeTasks: a close that waited for
	// it would not return before stop gives up; one bounded by the drain
	// timeout returns far within this bound, however slow the machine.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("close took %s with a drain timeout of %s", d, e.cfg.DrainTimeout)
	}
	e.meili.ResumeTasks()
	// Not recorded: the next run applies them again.
	r = e.run(job, l)
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsCountWhatTheEngineDid(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, nil)
	e.insert(100, 110, bson.M{"hidden": true})
	e.insert(110, 111, bson.M{"throw": true})
	job := e.job(itemsJS)
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	eng := engine.New(e.db, e.state, e.errs, e.cfg, m, e.log)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	l := e.acquire()
	go func() {
		done <- eng.Run(ctx, job, e.sink(job, l), l, status.NewJobStats(), nil)
	}()
	e.settled(job)
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 1}))
	until(t, "delete counted", func() bool { return metric(t, reg, "meilistream_documents_deleted_total", "") >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, label string }{
		{"meilistream_documents_indexed_total", ""},
		{"meilistream_documents_skipped_total", ""},
		{"meilistream_errors_total", "TRANSFORM_FAILED"},
		{"meilistream_reindexes_total", ""},
		{"meilistream_dead_letters", ""},
		{"meilistream_batch_duration_seconds", ""},
	} {
		if v := metric(t, reg, c.name, c.label); v < 1 {
			t.Errorf("%s{%s} = %v", c.name, c.label, v)
		}
	}
}

// metric sums the values (histograms: sample counts) of name's series
// that have a label with value label ("" for any).
func metric(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					ok = true
				}
			}
			if !ok {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// A reindex no longer needs the change history to cover it: with a history
// far shorter than what the reindex and the writes during it add, the job
// still converges to an exact copy, because only the stream has to keep up.
func TestHistoryShorterThanAReindexStillConverges(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 40 // many chunks, each with its mark in the history
	var logs testutil.SyncBuffer
	e.log = hclog.New(&hclog.LoggerOptions{Level: testLogLevel(), Output: io.MultiWriter(&logs, testWriter{t})})
	e.insert(0, 2000, nil)
	job := e.job(itemsJS)
	const history = 400
	e.mongo.SetHistorySize(history)
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	r := e.run(job, e.acquire())
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	// Five times more changes than the history holds, while the reindex
	// reads: the reindex's start is long gone from the history when it ends.
	// The writes come no faster than the stream reads them (the test's
	// writer shares the process, and so the CPU, with the server and the
	// engine; a real server's history is far larger than a burst).
	writes, seen0 := 0, r.stats.Snapshot().Changes
	for round := 0; writes < 5*history; round++ {
		until(t, "the stream keeping up", func() bool { return r.stats.Snapshot().Changes-seen0 >= int64(writes-history/2) })
		lo := (round * 150) % 1800
		res, err := e.coll.UpdateMany(e.ctx, bson.M{"_id": bson.M{"$gte": lo, "$lt": lo + 150}}, bson.M{"$set": bson.M{"title": fmt.Sprintf("round %d", round)}})
		if err != nil {
			t.Fatal(err)
		}
		writes += int(res.ModifiedCount)
		e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 1900 + round}))
		e.insert(5000+round, 5001+round, nil)
		writes += 2
	}
	if s := r.stats.Snapshot(); s.Phase != status.PhaseReindexing {
		t.Fatalf("the reindex ended before the writes; make it longer (phase %q)", s.Phase)
	}
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 1 || strings.Contains(logs.String(), "history lost") {
		t.Fatalf("want one reindex and no history lost: %+v\n%s", s, logs.String())
	}
}

// A history that does not even cover the stream (every read of it finds its
// position gone) must not start a reindex over and over: lost again before
// anything was recorded, the job stops with HISTORY_LOST naming the oplog.
func TestHistoryTooShortForTheStreamFailsInsteadOfLooping(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 300, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.mongo.FailCommand(bson.D{
		{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{
			{Key: "failCommands", Value: bson.A{"getMore"}},
			{Key: "errorCode", Value: 136},
		}},
	})
	e.insert(300, 320, nil)
	r = e.run(job, l)
	if err := r.wait(t); !errors.Is(err, errs.ErrHistoryLost) || !strings.Contains(err.Error(), "oplog") {
		t.Fatalf("want HISTORY_LOST naming the oplog, got %v", err)
	}
}

func TestOnDocumentErrorFailNamesTheDocumentAndRecordsIt(t *testing.T) {
	e := newEnv(t, 0)
	var logs testutil.SyncBuffer
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs, JSONFormat: true})
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	job.OnDocumentError = "fail"
	r := e.run(job, e.acquire())
	e.settled(job)
	e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": "f1", "throw": true}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	err := r.wait(t)
	if !errors.Is(err, errs.ErrTransformFailed) {
		t.Fatalf("want TRANSFORM_FAILED, got %v", err)
	}
	t.Log(err)
	for _, want := range []string{`items: document _id "f1" (insert)`, "boom", "fix the transform or the document; onDocumentError is fail"} {
		if !strings.Contains(errs.Format(err), want) {
			t.Errorf("error %q does not say %q", errs.Format(err), want)
		}
	}
	var rec bson.M
	if err := e.errs.FindOne(e.ctx, bson.M{"sourceId": "f1"}).Decode(&rec); err != nil {
		t.Fatalf("no error record for the failing document: %v", err)
	}
	if rec["code"] != "TRANSFORM_FAILED" || !strings.Contains(rec["message"].(string), "boom") {
		t.Fatalf("record %v", rec)
	}
	if !strings.Contains(logs.String(), `"id":"\"f1\""`) {
		t.Errorf("the log does not name the document:\n%s", logs.String())
	}
	states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
	if err != nil || len(states) != 1 || states[0].Errors != 1 {
		t.Fatalf("state %+v %v", states, err)
	}
}

func TestChangedJobDefinitionSaysSoAndLeavesTheOldIndex(t *testing.T) {
	e := newEnv(t, 0)
	var logs testutil.SyncBuffer
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	e.insert(0, 20, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// The file changed: said so.
	edited := e.job(strings.Replace(itemsJS, "n: doc.n", "n: doc.n * 2", 1))
	r = e.run(edited, l)
	e.settled(edited)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "transform changed since the position was recorded: reindexing") {
		t.Errorf("file change not said:\n%s", logs.String())
	}
	// The destination changed (as an index prefix or override does).
	moved := e.job(strings.Replace(itemsJS, `index: "items"`, `index: "items_v2"`, 1))
	r = e.run(moved, l)
	if err := synccheck.Eventually(e.ctx, 15*time.Second, e.coll, e.errs, moved, e.mc, "items_v2"); err != nil {
		t.Fatal(err)
	}
	until(t, "position recorded", func() bool { return e.positionHash() == moved.Hash })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	want := `job definition changed (index "items_v2", was "items"): reindexing into index items_v2; the old index items is left in place for you to delete when no longer needed`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, logs.String())
	}
	if n := len(e.meili.Documents("items")); n != 20 {
		t.Fatalf("old index: %d documents, want it left as it was", n)
	}
}

func testLogLevel() hclog.Level {
	if os.Getenv("ENGINE_TEST_LOG") != "" {
		return hclog.LevelFromString(os.Getenv("ENGINE_TEST_LOG"))
	}
	return hclog.Warn
}

// liveHas reports whether the live index holds document id with title.
func (e *env) liveHas(id int, title string) bool {
	for _, d := range e.meili.Documents("items") {
		if fmt.Sprint(d["id"]) == fmt.Sprint(id) && d["title"] == title {
			return true
		}
	}
	return false
}

// During a swap reindex the live index keeps taking every followed change:
// search never freezes while the new index is built.
func TestWritesDuringASwapReindexReachTheLiveIndexAtOnce(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 50
	// A slow Meilisearch makes the reindex last long enough to write into.
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	e.insert(0, 3000, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	edited := e.job(strings.Replace(itemsJS, "n: doc.n", "n: doc.n * 2", 1))
	r = e.run(edited, l)
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	e.insert(10000, 10001, nil)
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2900}, bson.M{"$set": bson.M{"title": "updated while reindexing"}}))
	until(t, "the writes in the live index", func() bool {
		return e.liveHas(10000, "item 10000") && e.liveHas(2900, "updated while reindexing")
	})
	if s := r.stats.Snapshot(); s.Phase != status.PhaseReindexing {
		t.Fatalf("the reindex ended before the writes were seen live; make it longer (phase %q)", s.Phase)
	}
	e.settled(edited)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A process killed between two marks of a reindex (a chunk read, its mark
// not yet written) resumes the reindex from its checkpoint, and the index
// converges to the collection, writes made meanwhile included.
func TestReindexKilledBetweenTwoMarksResumesAndConverges(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize, e.cfg.BatchSize = 100, 100
	e.cfg.DrainTimeout = 100 * time.Millisecond
	const total = 2000
	e.insert(0, total, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	k := &killer{}
	var chunks atomic.Int32
	mon := &event.CommandMonitor{Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
		if ev.CommandName != "find" {
			return
		}
		if ns, _ := ev.Reply.Lookup("cursor", "ns").StringValueOK(); ns == "app.items" && chunks.Add(1) == 8 {
			k.mu.Lock()
			k.killAt = 1 // the next send, or wait, finds the process dead
			k.mu.Unlock()
			k.kill()
		}
	}}
	db := e.monitoredDB(mon)
	eng := engine.New(db, db.Collection("meilistream"), e.errs, e.cfg, nil, e.log)
	ctx, cancel := context.WithCancel(e.ctx)
	k.kill = cancel
	_, err := eng.Reindex(ctx, job, killSink{e.sink(job, l), k}, l, nil)
	if err == nil {
		t.Fatal("a reindex killed between two marks reported success")
	}
	states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
	if err != nil || len(states) != 1 || states[0].Reindex == nil {
		t.Fatalf("no checkpoint: %+v %v", states, err)
	}
	// Writes while it is down, some of them to documents already read.
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 10}, bson.M{"$set": bson.M{"title": "while down"}}))
	e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": 11}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 1990}, bson.M{"$set": bson.M{"title": "while down, ahead"}}))
	sum, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Resumed || sum.Previous == 0 {
		t.Fatalf("did not resume: %+v", sum)
	}
	e.settled(job)
}

// An in-place sweep deletes what the collection no longer holds, but never
// a document deleted and created again while the reindex runs: the
// stream's version wins.
func TestInPlaceSweepNeverDeletesADocumentCreatedAgainDuringTheReindex(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 300, nil)
	job := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items", reindex: "inplace",`, 1))
	// The index holds a document the collection lost while no one followed.
	ti, err := e.mc.Index("items").AddDocuments(e.ctx, []map[string]any{{"id": 99999, "title": "gone"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mc.WaitForTask(e.ctx, ti.TaskUID, 0); err != nil {
		t.Fatal(err)
	}
	// Document 5 disappears just before the sweep asks the collection
	// which ids it holds, and comes back just after.
	other := e.freshItems()
	var swept atomic.Bool
	mon := &event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName == "find" && ev.DatabaseName == "app" && strings.Contains(ev.Command.String(), `"$in"`) && swept.CompareAndSwap(false, true) {
				if _, err := other.DeleteOne(context.Background(), bson.M{"_id": 5}); err != nil {
					t.Error(err)
				}
			}
		},
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
			if ev.CommandName == "find" && swept.Load() && !strings.Contains(ev.Reply.String(), `"_id": {"$numberInt":"5"}`) {
				if _, err := other.InsertOne(context.Background(), bson.M{"_id": 5, "title": "back again", "n": 5}); err != nil && !mongo.IsDuplicateKeyError(err) {
					t.Error(err)
				}
			}
		},
	}
	db := e.monitoredDB(mon)
	eng := engine.New(db, db.Collection("meilistream"), e.errs, e.cfg, nil, e.log)
	l := e.acquire()
	sum, err := eng.Reindex(e.ctx, job, e.sink(job, l), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !swept.Load() {
		t.Fatal("the sweep never asked the collection")
	}
	if sum.Removed != 1 {
		t.Fatalf("summary %+v: want the one stale document removed", sum)
	}
	e.equal(job)
	if !e.liveHas(5, "back again") {
		t.Fatal("the document created again during the sweep is not in the index")
	}
}

// A standby that takes the lease over in the middle of a reindex continues
// the same reindex from its checkpoint.
func TestStandbyTakingOverMidReindexContinuesIt(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 100
	e.insert(0, 3000, nil)
	job := e.job(itemsJS)
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	r := e.run(job, e.acquire())
	until(t, "a third of the reindex", func() bool { return r.stats.Snapshot().Reindex.Done >= 1000 })
	e.mongo.AdvanceClock(testTTL + time.Second) // past the TTL: the lease lapses
	other, err := lease.New(e.state, "test:2:b", lease.Options{TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := other.Acquire(e.ctx, "items")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.wait(t); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed holder: want LEASE_LOST, got %v", err)
	}
	r2 := e.run(job, l2)
	e.settled(job)
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r2.stats.Snapshot(); !s.Reindex.Resumed || s.Reindexes != 1 {
		t.Fatalf("the standby did not continue the reindex: %+v", s)
	}
}

// The in-place sweep compares the ids it reads back from the index with
// the collection's by MongoDB's identity of _ids: an int64 or a double
// holding an integer comes back from Meilisearch as a plain integer, and is
// still the same document.
func TestInPlaceSweepKeepsIntegerIDsOfEveryNumericType(t *testing.T) {
	e := newEnv(t, 0)
	job := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items", reindex: "inplace",`, 1))
	e.ok(e.coll.InsertMany(e.ctx, []any{
		bson.M{"_id": int64(5), "title": "int64", "n": 5},
		bson.M{"_id": 7.0, "title": "double", "n": 7},
		bson.M{"_id": int64(1) << 40, "title": "large int64", "n": 8},
		bson.M{"_id": int32(9), "title": "int32", "n": 9},
	}))
	l := e.acquire()
	if _, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil); err != nil {
		t.Fatal(err)
	}
	e.equal(job)
	// A second in-place reindex sweeps: nothing may go.
	sum, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Removed != 0 {
		t.Fatalf("the sweep removed %d documents still in the collection", sum.Removed)
	}
	e.equal(job)
}

// lapsingLease is a held lease whose own-clock deadline can be made to
// pass while nothing has told its renewer yet: a process frozen past its
// lease and just continued, whose follow loop runs before the renewer.
type lapsingLease struct {
	*lease.Lease
	lapsed atomic.Bool
}

func (l *lapsingLease) Held() error {
	if l.lapsed.Load() {
		return errs.New(errs.LeaseLost, "items", "lease lost: no renewal succeeded for 8s (the process was paused or starved)")
	}
	return l.Lease.Held()
}

// A holder whose lease lapsed by its own clock sends nothing more to
// Meilisearch, even before its renewer notices: the change read after the
// lapse is not written, and the job stops with LEASE_LOST.
func TestHolderPastItsLeaseDeadlineSendsNothingMore(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	l := &lapsingLease{Lease: e.acquire()}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	go func() { done <- e.engine().Run(ctx, job, e.sink(job, l), l, nil, nil) }()
	e.settled(job)
	l.lapsed.Store(true)
	e.insert(100, 101, nil)
	select {
	case err := <-done:
		if !errors.Is(err, errs.ErrLeaseLost) {
			t.Fatalf("Run: %v, want LEASE_LOST", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a holder past its lease deadline kept running")
	}
	if e.liveHas(100, "item 100") {
		t.Fatal("a change read after the lease lapsed was written to Meilisearch")
	}
}

// A job's start makes the errors collection's index; a user who may not
// create it gets a warning saying what to do, once, and the job runs.
func TestJobStartMakesTheErrorsIndexOrSaysWhyNot(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	e.mongo.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"createIndexes"}}, {Key: "errorCode", Value: 13}}}})
	logs := &testutil.SyncBuffer{}
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	eng := e.engine()
	for range 2 { // two starts: one warning
		l := e.acquire()
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		st := status.NewJobStats()
		go func() { done <- eng.Run(ctx, job, e.sink(job, l), l, st, nil) }()
		e.settled(job)
		// Following comes after the start's attempt at the index.
		until(t, "following", func() bool { return st.Snapshot().Phase == status.PhaseFollowing })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := l.Release(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "the errors collection has no index"); n != 1 || !strings.Contains(logs.String(), "createIndex") {
		t.Fatalf("%d warnings about the missing index (want 1 naming createIndex):\n%s", n, logs.String())
	}
	e.mongo.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"createIndexes"}}}}})
	l := e.acquire()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx, job, e.sink(job, l), l, nil, nil) }()
	// The index and the position are already as the earlier runs left
	// them, so nothing tells this run's start is past the index: wait for
	// the index itself while the job runs.
	var names []string
	until(t, "the errors collection's index made by the job's start", func() bool {
		cur, err := e.errs.Indexes().List(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for cur.Next(e.ctx) {
			names = append(names, cur.Current.Lookup("name").StringValue())
		}
		return slices.Contains(names, "job_1_at_-1__id_-1")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// prepFailSink fails Prepare as the destination would while unreachable,
// fails times, then prepares for real.
type prepFailSink struct {
	sink.Sink
	mu    sync.Mutex
	fails int
}

func (s *prepFailSink) Prepare(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return errs.Wrap(errs.Failed, "items", errors.New("connection refused"), "read index items")
	}
	return s.Sink.Prepare(ctx)
}

// Run retries preparing the destination and tells the caller of every
// attempt (the supervisor shows the failures in /status), then runs the
// job.
func TestRunReportsEachAttemptToPrepare(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	var (
		mu       sync.Mutex
		outcomes []error
	)
	prepared := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	l := e.acquire()
	dst := &prepFailSink{Sink: e.sink(job, l), fails: 2}
	go func() { done <- e.engine().Run(ctx, job, dst, l, nil, prepared) }()
	e.settled(job)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 3 || outcomes[0] == nil || outcomes[1] == nil || outcomes[2] != nil ||
		!strings.Contains(outcomes[0].Error(), "connection refused") {
		t.Fatalf("prepare outcomes %v, want the two failures then nil", outcomes)
	}
}
