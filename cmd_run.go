package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongoerr"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/replicate"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/sidecar/durable"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/sidecar/supervisor"
	"github.com/meilistream/meilistream/transform"
)

// runRun is the body of "meilistream run": every job of the transforms
// folder under the supervisor, the HTTP endpoints, hot reload of the
// folder, and a clean shutdown on SIGINT/SIGTERM (ctx cancelled): every job
// flushes, records its position and releases its lease, within
// MEILISTREAM_SHUTDOWN_TIMEOUT, and the process exits 0. A job that fails
// for good (HISTORY_LOST with onHistoryLost: fail, see Supervisor.Fatal)
// starts the same shutdown, and the process exits 1, its last stderr line
// that job's error: the loud signal the user asked for (in Kubernetes, a
// CrashLoopBackOff).
func runRun(ctx context.Context, inv *invocation) int {
	cfg, log := inv.Config, inv.Log
	log.Info("starting", "transforms", cfg.Transforms, "database", cfg.MongoDBDatabase, "holder", lease.Holder(),
		"gomaxprocs", runtime.GOMAXPROCS(0), "memory_limit", memoryLimitText(debug.SetMemoryLimit(-1)))

	w, err := connect(ctx, cfg, log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()

	go w.warnUnreachable(ctx, log)
	go collectWhenIdle(ctx, idleCollectEvery)
	set, loadErr := w.loadJobs(log)
	if set == nil {
		return fail(inv.Stderr, loadErr)
	}
	// A setting a job needs that is missing, or a job on meilistream's own
	// state, stops the start: no restart of a job fixes either.
	if err := jobProblems(cfg, set.Jobs()); err != nil {
		return fail(inv.Stderr, err)
	}
	if err := w.probeSource(ctx, set.Jobs(), log); err != nil {
		return fail(inv.Stderr, err)
	}
	if err := w.checkMeiliKey(ctx, set.Jobs(), log); err != nil {
		return fail(inv.Stderr, err)
	}
	if len(set.Jobs()) == 0 && loadErr == nil {
		// Not an error: a folder mounted before its files, or jobs still
		// to come, is fine, and the watcher picks them up. But a wrong
		// path must not look like a sidecar at work.
		log.Warn("no jobs to run: the transforms folder holds no *.js file and no MEILISTREAM_JOB_<NAME>_* variable declares a job; waiting for files to appear",
			"transforms", cfg.Transforms)
	}

	sup := supervisor.New(supervisor.Config{
		Driver:  &supervisor.EngineDriver{Leases: w.leases, Engine: w.engine, Sinks: w.sinkFactory(log)},
		Logger:  log.Named("supervisor"),
		Metrics: w.metrics,
		Holder:  w.leases.Holder(),
		Probe:   w.probe,
		// After losing a lease, let another pod take it (see LostPause).
		LostPause: cfg.Lease,
		// The drain gets 3/4 of the shutdown timeout (engineConfig), the
		// release an eighth: together they end within it.
		ReleaseTimeout: max(cfg.ShutdownTimeout/8, 100*time.Millisecond),
		Holders:        w.holders,
		// Pods share the jobs (at most ceil(jobs / pods) each), and a
		// holder that makes no progress while failing gives its job up.
		Peers:           w.peers,
		BalanceInterval: cfg.Lease / 3,
		HoldOff:         cfg.Lease,
		StallTimeout:    cfg.StallTimeout,
		// The oplog's headroom: read as often as the balance, a few
		// finds per reading.
		Headroom:         w.headroom,
		HeadroomInterval: min(cfg.Lease/3, supervisor.DefaultHeadroomInterval),
	})
	// job_state and the lag read what /status says, at each scrape.
	w.metrics.SetStatus(sup)
	w.jobs.sup.Store(sup)

	srv, err := httpapi.Start(httpapi.Options{
		Addr:      cfg.HTTPAddr,
		ReadyFile: cfg.ReadyFile,
		Status:    sup,
		Gatherer:  w.registry,
		Config:    &cfg,
		Scrub:     inv.Scrub.Scrub,
		Version:   buildVersion(),
		Process:   w.leases.Holder(),
		Log:       log.Named("http"),
		Wait:      w.waiter,
		Waited:    w.metrics.ObserveWait,
	})
	if err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.ConfigInvalid, "", err, "MEILISTREAM_HTTP_ADDR"))
	}
	defer srv.Close()
	log.Info("serving", "addr", srv.Addr())

	applyDefs := func(set *transform.Set, err error) {
		defs, other := supervisor.JobDefs(set.Jobs(), err)
		for _, e := range other {
			log.Error("transform problem", "error", e)
		}
		for i, d := range defs {
			// A job a hot reload brings that cannot run with this
			// configuration fails alone (at start, none could).
			if job, ok := d.Spec.(*transform.Job); ok && d.Err == nil {
				if perr := jobProblem(cfg, job); perr != nil {
					defs[i].Err = perr
				} else if src, ok := w.prober.Known(); ok {
					// Nor can one the source lacks what for.
					if perr := sourceProblem(src, []*transform.Job{job}); perr != nil {
						defs[i].Err = perr
					}
				}
			}
		}
		sup.Apply(defs)
	}
	applyDefs(set, loadErr)
	watcher := transform.NewWatcher(set, 0, func(next *transform.Set, err error) {
		log.Info("transforms folder changed, applying it")
		applyDefs(next, err)
	})
	watcher.Start(ctx)

	var fatal error
	select {
	case <-ctx.Done():
		log.Info("shutting down: flushing, recording positions, releasing leases", "timeout", cfg.ShutdownTimeout.String())
	case fatal = <-sup.Fatal():
		// The supervisor logged the job's error and what to do.
		log.Info("a job failed for good: shutting down, then exiting 1; flushing, recording positions, releasing leases",
			"timeout", cfg.ShutdownTimeout.String())
	}
	watcher.Close()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := sup.Close(sctx); err != nil {
		// Exit 1: what was not durable is replayed by the next holder
		// from the recorded position (README "Exit codes").
		log.Error("shutdown timed out (MEILISTREAM_SHUTDOWN_TIMEOUT); exiting 1, the next holder replays what was not durable",
			"timeout", cfg.ShutdownTimeout.String(), "error", err)
		if fatal != nil {
			return fail(inv.Stderr, fatal)
		}
		return exitFailed
	}
	log.Info("shutdown complete")
	// The job's error (code, job, what to do) is the last line, exit 1.
	return fail(inv.Stderr, fatal)
}

// wiring is what the server-facing commands share: clients, the lease
// manager, the engine, metrics.
type wiring struct {
	cfg     config.Config
	scrub   *config.Scrubber // the configuration's secrets, masked in error text
	client  *mongo.Client
	source  *mongo.Database
	state   *mongo.Collection
	errColl *mongo.Collection
	meili   *meili.Client // nil without MEILISTREAM_MEILI_URL
	replica *mongo.Client // nil without MEILISTREAM_REPLICA_URI
	leases  *lease.Manager
	// prober asks the source once what it can do (capability package):
	// the leases and the job state's records take its answer.
	prober   *capability.Prober
	engine   *engine.Engine
	metrics  *httpapi.Metrics
	registry *prometheus.Registry
	// waiter answers read-your-writes waits (GET /wait, `meilistream
	// wait`); the engine advances it, jobs says which jobs it serves.
	waiter   *durable.Waiter
	jobs     supervisedJobs
	closeFns []func()
}

// supervisedJobs is durable.Jobs over the supervisor, once there is one
// (none: no job is known, as in `meilistream wait`, which says its own).
type supervisedJobs struct {
	sup  atomic.Pointer[supervisor.Supervisor]
	only string // `meilistream wait`: the one job, held by no process of its own
}

func (s *supervisedJobs) Job(name string) (known, held bool) {
	if s.only != "" {
		return name == s.only, false
	}
	sup := s.sup.Load()
	if sup == nil {
		return false, false
	}
	for _, j := range sup.Jobs() {
		if j.Name == name {
			return true, j.Held
		}
	}
	return false, false
}

// idleConnTime is how long an unused connection to the source stays
// open, unless the URI says (maxIdleTimeMS): the jobs of a process share
// one change stream per database, so once their start is over (each
// reindex and catch-up read on its own connection) a quiet process needs
// few connections, and the driver's default keeps every one for good.
const idleConnTime = 30 * time.Second

// sourceOptions are the source client's options from uri.
func sourceOptions(uri string) *options.ClientOptions {
	o := options.Client().ApplyURI(uri).SetAppName("meilistream")
	if o.MaxConnIdleTime == nil {
		o.SetMaxConnIdleTime(idleConnTime)
	}
	return o
}

// connect builds the clients (the driver connects lazily: a server down at
// start makes the jobs retry, it does not stop the process) and the engine.
func connect(ctx context.Context, cfg config.Config, log hclog.Logger) (*wiring, error) {
	w := &wiring{cfg: cfg, scrub: config.NewScrubber(cfg.Secrets()), registry: httpapi.NewRegistry(buildVersion())}
	w.metrics = httpapi.NewMetrics(w.registry)
	client, err := mongo.Connect(sourceOptions(cfg.MongoDBURI))
	if err != nil {
		return nil, errs.Wrap(errs.ConfigInvalid, "", err, "MEILISTREAM_MONGODB_URI")
	}
	w.client = client
	w.closeFns = append(w.closeFns, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	w.source = client.Database(cfg.MongoDBDatabase)
	w.state = w.source.Collection(cfg.StateCollection)
	w.errColl = w.source.Collection(cfg.StateCollection + "_errors")
	if cfg.MeiliURL != "" {
		// The engine retries with its own backoff and keeps batches in
		// order; the client's own retries would only hide failures. The
		// sidecar's client also posts document batches itself (see
		// meili.NewClient).
		w.meili = meili.NewClient(cfg.MeiliURL, cfg.MeiliAPIKey)
		w.closeFns = append(w.closeFns, w.meili.Close)
	}
	if cfg.ReplicaURI != "" {
		rc, err := mongo.Connect(options.Client().ApplyURI(cfg.ReplicaURI).SetAppName("meilistream"))
		if err != nil {
			w.close()
			return nil, errs.Wrap(errs.ConfigInvalid, "", err, "MEILISTREAM_REPLICA_URI")
		}
		w.replica = rc
		w.closeFns = append(w.closeFns, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rc.Disconnect(ctx)
		})
	}
	w.prober = capability.NewProber(w.state)
	w.leases, err = lease.New(w.state, lease.Holder(), lease.Options{TTL: cfg.Lease, Logger: log.Named("lease"), Form: w.prober.Pipelines})
	if err != nil {
		w.close()
		return nil, err
	}
	w.waiter = durable.New(durable.Options{Jobs: &w.jobs, Source: durable.MongoSource{State: w.state, Leases: w.leases}, Log: log.Named("wait")})
	w.closeFns = append(w.closeFns, w.waiter.Close)
	ec := engineConfig(cfg)
	ec.Process = w.leases.Holder()
	ec.Form = w.prober.Pipelines
	ec.Durable = w.waiter.Advance
	w.engine = engine.New(w.source, w.state, w.errColl, ec, w.metrics, log.Named("engine"))
	return w, nil
}

// reachTimeout bounds how long an interactive command (status, reindex,
// retry) waits for MongoDB before saying it cannot reach it, instead of
// the driver's 30 s server selection.
var reachTimeout = 10 * time.Second

// reach checks, within reachTimeout, that the source MongoDB answers, for
// the interactive commands: FAILED "cannot reach MongoDB
// (MEILISTREAM_MONGODB_URI): <cause>", never with the URI's password; a
// refused authentication is CONFIG_INVALID naming the variable.
func (w *wiring) reach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	err := w.client.Ping(ctx, nil)
	if err == nil {
		return nil
	}
	cause := errors.New(w.scrub.Scrub(redactedErr(err)))
	if mongoerr.AuthFailed(err) {
		return errs.Wrap(errs.ConfigInvalid, "", cause, "MongoDB refused the credentials of MEILISTREAM_MONGODB_URI (or MEILISTREAM_MONGODB_URI_FILE)")
	}
	msg := withReplicaSetHint(context.WithoutCancel(ctx), fmt.Sprintf("cannot reach MongoDB (MEILISTREAM_MONGODB_URI) within %s", reachTimeout), w.cfg.MongoDBURI, reachTimeout)
	return errs.Wrap(errs.Failed, "", cause, "%s", msg)
}

// warnUnreachable logs once, at warn, when MongoDB does not answer within
// reachTimeout of the start, with what the seeds say of the URI's replica
// set name: the jobs' own retries only repeat the driver's
// "ReplicaSetNoPrimary".
func (w *wiring) warnUnreachable(ctx context.Context, log hclog.Logger) {
	if err := w.reach(ctx); err != nil && ctx.Err() == nil {
		log.Warn("MongoDB does not answer yet; the jobs keep trying", "error", errs.Format(err))
	}
}

// headroom reads the source's oplog window and every job's recorded
// position, for the headroom of /status and the metrics. An oplog the user
// may not read leaves the window unknown (WindowErr), not the reading.
func (w *wiring) headroom(ctx context.Context) (supervisor.Headroom, error) {
	states, err := jobstate.ReadState(ctx, w.state, nil)
	if err != nil {
		return supervisor.Headroom{}, err
	}
	h := supervisor.Headroom{Positions: map[string]time.Time{}}
	for _, s := range states {
		if s.Position != nil && !s.Position.WallTime.IsZero() {
			// To the second, as the oplog's cluster times are.
			h.Positions[s.Name] = s.Position.WallTime.Truncate(time.Second)
		}
	}
	win, err := stream.ReadWindow(ctx, w.client)
	if err != nil {
		h.WindowErr = errors.New(w.scrub.Scrub(err.Error()))
		return h, nil
	}
	h.Oldest, h.Newest = win.Oldest, win.Newest
	return h, nil
}

// holders reads who holds each job's lease (unexpired), for /status of
// standing-by jobs.
func (w *wiring) holders(ctx context.Context) (map[string]string, error) {
	infos, err := w.leases.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(infos))
	for _, i := range infos {
		if i.Holder != "" && !i.Expired {
			out[i.Name] = i.Holder
		}
	}
	return out, nil
}

// peers counts the live processes that run the jobs, this one included:
// the distinct processes of the live presence records (each pod keeps one
// per job it runs, holder or standby, refreshed by the server's clock).
func (w *wiring) peers(ctx context.Context) (int, error) {
	present, err := jobstate.ReadPresence(ctx, w.state, w.prober.Pipelines)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{w.leases.Holder(): true}
	for _, p := range present {
		seen[p.Process] = true
	}
	return len(seen), nil
}

// probeTimeout bounds each server's check of one probe, on its own: one
// server that does not answer must not use up another's time and have it
// reported unreachable too. Under the supervisor's bound of a probe.
var probeTimeout = 2 * time.Second

// probe checks that the servers answer, for /readyz: MongoDB always,
// Meilisearch and the replica when configured, all at once, each within
// probeTimeout. The error names only the servers that failed, in that
// order: "MongoDB unreachable: ...; replica unreachable: ...".
func (w *wiring) probe(ctx context.Context) error {
	type check struct {
		name string
		fn   func(ctx context.Context) error
	}
	checks := []check{{"MongoDB (MEILISTREAM_MONGODB_URI)", func(ctx context.Context) error { return w.client.Ping(ctx, nil) }}}
	if w.meili != nil {
		checks = append(checks, check{"Meilisearch (MEILISTREAM_MEILI_URL)", func(ctx context.Context) error {
			_, err := w.meili.Health(ctx)
			return err
		}})
	}
	if w.replica != nil {
		checks = append(checks, check{"replica (MEILISTREAM_REPLICA_URI)", func(ctx context.Context) error { return w.replica.Ping(ctx, nil) }})
	}
	problems := make([]string, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if err := c.fn(cctx); err != nil {
				problems[i] = c.name + " unreachable: " + w.scrub.Scrub(redactedErr(err))
			}
		}()
	}
	wg.Wait()
	var failed []string
	for _, p := range problems {
		if p != "" {
			failed = append(failed, p)
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// redactedErr is err's text cut to its first line; driver errors name hosts,
// never credentials.
func redactedErr(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

func (w *wiring) close() {
	for i := len(w.closeFns) - 1; i >= 0; i-- {
		w.closeFns[i]()
	}
	w.closeFns = nil
}

// engineConfig maps the configuration onto the engine's. A close must finish
// within the shutdown timeout, lease release included, so the drain gets
// most of it but not all.
func engineConfig(cfg config.Config) engine.Config {
	drain := cfg.ShutdownTimeout * 3 / 4
	if drain <= 0 {
		drain = engine.DefaultDrainTimeout
	}
	return engine.Config{
		BatchSize:        cfg.BatchSize,
		PageSize:         cfg.PageSize,
		ReindexParallel:  cfg.ReindexParallel,
		FlushInterval:    cfg.FlushInterval,
		PositionInterval: cfg.PositionInterval,
		OnHistoryLost:    cfg.OnHistoryLost,
		OnDocumentError:  cfg.OnDocumentError,
		DrainTimeout:     drain,
		// A presence record is refreshed on the lease's cadence, so a
		// pod counts as live exactly as long as it could hold a lease.
		PresenceInterval: cfg.Lease / 3,
		VerifyInterval:   cfg.VerifyInterval,
		VerifyRate:       cfg.VerifyRate,
		ReindexRate:      cfg.ReindexRate,
		// 0 turns a brake off here; the engine takes 0 as its default.
		ReindexMaxReadLatency: offIfZero(cfg.ReindexMaxReadLatency),
		ReindexMaxTasks:       offIfZero(cfg.ReindexMaxTasks),
	}
}

// offIfZero is a brake's bound for the engine: a variable's 0 (never
// brake) is negative there, where 0 is the default.
func offIfZero[T int | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// sinkFactory builds each job's destination: the Meilisearch sink for a
// search job, the replica sink for a mirror job.
func (w *wiring) sinkFactory(log hclog.Logger) supervisor.SinkFactory {
	return func(job *transform.Job, guard sink.Guard) (sink.Sink, error) {
		jl := log.Named(job.Name)
		switch job.Kind {
		case jobdef.Mirror:
			var rdb *mongo.Database
			if w.replica != nil {
				rdb = w.replica.Database(w.cfg.ReplicaDatabase)
			}
			return replicate.ForJob(rdb, w.source, &job.Job, guard, jl, w.metrics.Job(job.Name, job.Kind.String()))
		default:
			if w.meili == nil {
				return nil, &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Msg: "a search job needs MEILISTREAM_MEILI_URL", Setting: "MEILISTREAM_MEILI_URL"}
			}
			return meili.NewSink(w.meili, &job.Job, guard, jl), nil
		}
	}
}

// transformOptions maps the configuration onto transform loading, the
// per-job environment overrides (MEILISTREAM_JOB_<NAME>_<OPTION>) and
// MEILISTREAM_INDEX_PREFIX included: transform applies them to every job as
// it loads (and on every hot reload), before its one-job-per-destination
// check, and declares the jobs named by environment alone.
func transformOptions(cfg config.Config, log hclog.Logger) transform.Options {
	return transform.Options{
		Pool:        cfg.TransformPool,
		Timeout:     cfg.TransformTimeout,
		MemoryLimit: transformMemory(cfg.TransformMemory),
		Logger:      log.Named("transform"),
		Database:    cfg.MongoDBDatabase,
		Defaults: transform.JobDefaults{
			OnDocumentError: cfg.OnDocumentError,
			OnHistoryLost:   cfg.OnHistoryLost,
			BatchSize:       cfg.BatchSize,
			FlushInterval:   cfg.FlushInterval,
			Mode:            cfg.Mode,
		},
		Overrides:   cfg.Jobs,
		IndexPrefix: cfg.IndexPrefix,
		// What the sidecar writes, no transform may read (leases,
		// positions, failed documents).
		Private: map[string]string{
			cfg.StateCollection:             "meilistream's state collection (MEILISTREAM_STATE_COLLECTION)",
			cfg.StateCollection + "_errors": "meilistream's errors collection (MEILISTREAM_STATE_COLLECTION with _errors)",
		},
	}
}

// transformMemory is MEILISTREAM_TRANSFORM_MEMORY (MiB, 0: none) as
// transform.Options.MemoryLimit takes it (bytes, less than 0: none).
func transformMemory(mib int) int64 {
	if mib == 0 {
		return -1
	}
	return int64(mib) << 20
}

// loadJobs loads the transforms folder with the environment's per-job
// options (see transformOptions). The Set is nil only when the folder
// cannot be read; problems of single files come back joined in err with the
// Set (see supervisor.JobDefs). An unreadable folder is fine when the
// environment declares jobs (MEILISTREAM_JOB_<NAME>_<OPTION>): those run
// alone.
func loadJobs(cfg config.Config, log hclog.Logger) (*transform.Set, error) {
	return loadJobsWith(cfg, log, transformOptions(cfg, log))
}

// loadJobs is loadJobs for the commands that run transforms against the
// servers: monstache-style scripts read the source MongoDB through the
// engine (their findId, findOne, find and pipe), counted in the metrics.
func (w *wiring) loadJobs(log hclog.Logger) (*transform.Set, error) {
	opts := transformOptions(w.cfg, log)
	opts.Reader = w.engine.Reader()
	opts.OnRead = func(r transform.ReadStat) {
		w.metrics.Job(r.Job, "").SourceRead(r.Func, r.Took, r.Err != nil)
	}
	return loadJobsWith(w.cfg, log, opts)
}

func loadJobsWith(cfg config.Config, log hclog.Logger, opts transform.Options) (*transform.Set, error) {
	set, err := transform.Load(cfg.Transforms, opts)
	if set == nil && len(cfg.Jobs) > 0 {
		log.Warn("transforms folder unreadable; running the jobs declared by environment", "error", err)
		return transform.LoadFiles(nil, opts)
	}
	if set == nil {
		// transform knows folders, not variables: name the setting here,
		// around the cause alone (err is already CONFIG_INVALID).
		cause := err
		if u := errors.Unwrap(err); u != nil {
			cause = u
		}
		return nil, errs.Wrap(errs.ConfigInvalid, "", cause, "MEILISTREAM_TRANSFORMS: want a readable folder of *.js transform files (default %s)", config.DefaultTransforms)
	}
	return set, err
}

// runningHint adds to a RUNNING error what to do. reindex, retry, pause,
// resume and verify --repair catch it and ask the holder through the
// state collection; what reaches a user names those commands, never a
// way that stops the application (in the sidecar model some pod always
// holds the lease).
func runningHint(name string, err error) error {
	if !errors.Is(err, errs.ErrRunning) {
		return err
	}
	return errs.New(errs.Running, name, "another meilistream holds job %s's lease (%s); ask it instead: "+
		"`meilistream reindex %s`, `meilistream pause %s`, `meilistream retry %s` and `meilistream verify %s --repair` "+
		"send their request to the holder through the state collection",
		name, err.Error(), name, name, name, name)
}

// leaseForEngine is a held lease as the engine takes it.
type leaseForEngine = engine.Lease

// underLease runs fn holding the job's lease (taken at once: RUNNING when
// another process holds it), renewed meanwhile; fn's context is cancelled
// with LEASE_LOST if it is lost. The lease is released afterwards.
func (w *wiring) underLease(ctx context.Context, name string, fn func(ctx context.Context, l leaseForEngine) error) error {
	l, err := w.leases.Acquire(ctx, name)
	if err != nil {
		return runningHint(name, err)
	}
	kctx, stop := l.Keep(ctx)
	err = fn(kctx, l)
	stop()
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := l.Release(rctx); rerr != nil && err == nil {
		err = errs.Wrap(errs.Failed, name, rerr, "release lease")
	}
	return err
}
