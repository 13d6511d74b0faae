package supervisor_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
	"github.com/meilistream/meilistream/transform"
)

// Fifty jobs of one process start against the test servers through a
// MongoDB client of five connections: each reindexes its collection and
// follows, none failing or restarting, the jobs starting a few at a time,
// not all fifty at once.
func TestFiftyJobsStartThroughAPoolOfFive(t *testing.T) {
	const jobs, docs = 50, 3
	var timedOut, waiting, mostWaiting atomic.Int32
	pool := &event.PoolMonitor{Event: func(e *event.PoolEvent) {
		switch e.Type {
		case event.ConnectionCheckOutStarted:
			n := waiting.Add(1)
			for m := mostWaiting.Load(); n > m && !mostWaiting.CompareAndSwap(m, n); m = mostWaiting.Load() {
			}
		case event.ConnectionCheckOutFailed:
			waiting.Add(-1)
			if e.Reason == event.ReasonTimedOut {
				timedOut.Add(1)
			}
		case event.ConnectionCheckedOut:
			waiting.Add(-1)
		}
	}}
	sv := startServers(t, options.Client().SetMaxPoolSize(5).SetPoolMonitor(pool))
	var loaded []*transform.Job
	for i := range jobs {
		loaded = append(loaded, sv.load(fmt.Sprintf("items%02d", i), docs))
	}
	d := &startCounter{EngineDriver: sv.driver(engine.Config{PageSize: 200})}
	s := supervisor.New(supervisor.Config{Driver: d, Logger: sv.log, Holder: "test:1:a"})
	defer closeSupervisor(t, s)
	defs, other := supervisor.JobDefs(loaded, nil)
	if len(other) > 0 {
		t.Fatal(other)
	}
	began := time.Now()
	s.Apply(defs)
	describe := func() string {
		n := map[string]int{}
		var last string
		for _, j := range s.Status() {
			n[j.State]++
			if j.LastError != nil {
				last = j.Name + ": " + j.LastError.Code + ": " + j.LastError.Message
			}
		}
		return fmt.Sprintf("states %v, pool timeouts %d, last error %q", n, timedOut.Load(), last)
	}
	testutil.Until(t, time.Minute, "every job reindexed and follows", func() bool {
		for _, j := range s.Status() {
			if j.State != status.Following || j.Counters.Indexed != docs {
				return false
			}
		}
		return true
	}, describe)
	took := time.Since(began)
	for _, j := range s.Status() {
		if j.Restarts != 0 || j.LastError != nil {
			t.Errorf("%s restarted %d times, last error %+v", j.Name, j.Restarts, j.LastError)
		}
	}
	// An operation with a deadline of its own (a lease renewal) may give
	// up waiting for a connection on a loaded machine and be tried again:
	// what must not happen is a job failing or restarting for it, above.
	d.mu.Lock()
	starting := d.most
	d.mu.Unlock()
	if starting > supervisor.DefaultMaxStarts {
		t.Errorf("%d jobs were starting at once, more than %d", starting, supervisor.DefaultMaxStarts)
	}
	t.Logf("all following after %s; at most %d jobs starting and %d operations waiting for a connection at once, %d gave up waiting", took.Round(time.Millisecond), starting, mostWaiting.Load(), timedOut.Load())
}

// servers are the test MongoDB and Meilisearch of a test, its database
// "app" and a folder for its transform files.
type servers struct {
	t   *testing.T
	ctx context.Context
	log hclog.Logger
	db  *mongo.Database
	mm  *meilitest.Server
	dir string
}

func startServers(t *testing.T, opts ...*options.ClientOptions) *servers {
	t.Helper()
	_, client := testutil.StartMongo(t, mongotest.Options{}, opts...)
	mm, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mm.Close() })
	return &servers{
		t: t,
		// A bound for a hang, not a speed.
		ctx: testutil.Context(t, 2*time.Minute),
		log: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testLog{t}}),
		db:  client.Database("app"), mm: mm, dir: t.TempDir(),
	}
}

// load seeds collection name with docs titled documents and loads the job
// indexing their titles into the index of that name.
func (sv *servers) load(name string, docs int) *transform.Job {
	t := sv.t
	t.Helper()
	var rows []any
	for n := range docs {
		rows = append(rows, bson.M{"_id": n, "title": fmt.Sprintf("%s %d", name, n)})
	}
	if _, err := sv.db.Collection(name).InsertMany(sv.ctx, rows); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`module.exports = { collection: %q, index: %q, transform(doc) { return { title: doc.title }; } };`, name, name)
	j, err := transform.LoadFile(filepath.Join(sv.dir, name+".js"), []byte(src), transform.Options{Defaults: transform.JobDefaults{BatchSize: 100, FlushInterval: 20 * time.Millisecond}, MemoryLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// driver is the engine's driver on the servers, its leases held by
// "test:1:a"; cfg's PageSize and ReindexRate are kept, the rest set for
// a quick test.
func (sv *servers) driver(cfg engine.Config) *supervisor.EngineDriver {
	t := sv.t
	t.Helper()
	state := sv.db.Collection("meilistream")
	leases, err := lease.New(state, "test:1:a", lease.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cfg.BatchSize, cfg.FlushInterval = 100, 20*time.Millisecond
	cfg.PositionInterval, cfg.RetryBase, cfg.RetryCap = 100*time.Millisecond, 10*time.Millisecond, 100*time.Millisecond
	cfg.ReindexMaxReadLatency, cfg.ReindexMaxTasks = -1, -1
	eng := engine.New(sv.db, state, sv.db.Collection("meilistream_errors"), cfg, nil, sv.log)
	mc := meili.NewClient(sv.mm.URL(), "")
	return &supervisor.EngineDriver{Leases: leases, Engine: eng, Sinks: func(job *transform.Job, guard sink.Guard) (sink.Sink, error) {
		return meili.NewSink(mc, &job.Job, guard, sv.log), nil
	}}
}

// testLog writes the log of a test to its output.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// startCounter is the engine's driver, counting, as each run begins, the
// runs in their start: begun, not ended, and not started in the engine's
// figures (JobStats.Started: the stream read, or following or paused). A slot freed by a job that follows is freed after
// its phase says so, so the count never sees a job that gave its slot up.
type startCounter struct {
	*supervisor.EngineDriver
	mu      sync.Mutex
	running map[string]*status.JobStats
	most    int
}

func (d *startCounter) Run(ctx context.Context, def supervisor.JobDef, h supervisor.HeldLease, st *supervisor.SupervisedJob) error {
	d.mu.Lock()
	n := 1
	for _, o := range d.running {
		select {
		case <-o.Started():
		default:
			n++
		}
	}
	d.most = max(d.most, n)
	if d.running == nil {
		d.running = map[string]*status.JobStats{}
	}
	d.running[def.Name] = st.Stats
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.running, def.Name)
		d.mu.Unlock()
	}()
	return d.EngineDriver.Run(ctx, def, h, st)
}

// A reindex at start goes on past the job's start slot: with one slot, a
// job whose reindex takes long (held to 20 documents a second) leaves the
// slot once its stream is read, and a job started after it follows while
// the first still reindexes, instead of waiting queued, its lease held,
// until the long reindex ends.
func TestALongReindexDoesNotKeepTheNextJobQueued(t *testing.T) {
	sv := startServers(t)
	big, small := sv.load("big", 2000), sv.load("small", 3)
	d := sv.driver(engine.Config{PageSize: 100, ReindexRate: 20})
	s := supervisor.New(supervisor.Config{Driver: d, Logger: sv.log, Holder: "test:1:a", MaxStarts: 1})
	defer closeSupervisor(t, s)
	stateOf := func(name string) string {
		for _, j := range s.Status() {
			if j.Name == name {
				return j.State
			}
		}
		return ""
	}
	defs, _ := supervisor.JobDefs([]*transform.Job{big}, nil)
	s.Apply(defs)
	testutil.Until(t, time.Minute, "the big job reindexing", func() bool {
		return stateOf("big") == status.Reindexing
	}, nil)
	defs, _ = supervisor.JobDefs([]*transform.Job{big, small}, nil)
	s.Apply(defs)
	testutil.Until(t, time.Minute, "the small job following", func() bool {
		return stateOf("small") == status.Following
	}, func() string { return fmt.Sprintf("small %s, big %s", stateOf("small"), stateOf("big")) })
	if st := stateOf("big"); st != status.Reindexing {
		t.Fatalf("the big job's reindex is over (%s): the test proves nothing; make it longer", st)
	}
}
