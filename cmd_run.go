package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meilisearch/meilisearch-go"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/replicate"
	"github.com/meilistream/meilistream/sidecar"
	"github.com/meilistream/meilistream/transform"
)

// runRun is the body of "meilistream run": every job of the transforms
// folder under the supervisor, the HTTP endpoints, hot reload of the
// folder, and a clean shutdown on SIGINT/SIGTERM (ctx cancelled): every job
// flushes, records its position and releases its lease, within
// MEILISTREAM_SHUTDOWN_TIMEOUT, and the process exits 0.
func runRun(ctx context.Context, inv *invocation) int {
	cfg, log := inv.Config, inv.Log
	log.Info("starting", "transforms", cfg.Transforms, "database", cfg.MongoDBDatabase, "holder", lease.Holder())

	set, loadErr := loadJobs(cfg, log)
	if set == nil {
		return fail(inv.Stderr, loadErr)
	}

	w, err := connect(ctx, cfg, log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()

	sup := sidecar.NewSupervisor(sidecar.SupervisorConfig{
		Driver:  &sidecar.EngineDriver{Leases: w.leases, Engine: w.engine, Sinks: w.sinkFactory(log)},
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
	})

	srv, err := sidecar.StartHTTP(sidecar.HTTPOptions{
		Addr:      cfg.HTTPAddr,
		ReadyFile: cfg.ReadyFile,
		Status:    sup,
		Gatherer:  w.registry,
		Config:    &cfg,
		Version:   buildVersion(),
		Log:       log.Named("http"),
	})
	if err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.ConfigInvalid, "", err, "MEILISTREAM_HTTP_ADDR"))
	}
	defer srv.Close()
	log.Info("serving", "addr", srv.Addr())

	env := newJobEnv(cfg, log)
	applyDefs := func(set *transform.Set, err error) {
		defs, other := sidecar.JobDefs(env.jobs(set.Jobs()), err)
		for _, e := range other {
			log.Error("transform problem", "error", e)
		}
		sup.Apply(defs)
	}
	applyDefs(set, loadErr)
	watcher := transform.NewWatcher(set, 0, func(next *transform.Set, err error) {
		log.Info("transforms folder changed, applying it")
		applyDefs(next, err)
	})
	watcher.Start(ctx)

	<-ctx.Done()
	log.Info("shutting down: flushing, recording positions, releasing leases", "timeout", cfg.ShutdownTimeout)
	watcher.Close()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := sup.Close(sctx); err != nil {
		log.Error("shutdown timed out: some jobs did not finish flushing", "timeout", cfg.ShutdownTimeout)
		return exitFailed
	}
	log.Info("shutdown complete")
	return exitOK
}

// wiring is what the server-facing commands share: clients, the lease
// manager, the engine, metrics.
type wiring struct {
	cfg      sidecar.Config
	client   *mongo.Client
	source   *mongo.Database
	state    *mongo.Collection
	errColl  *mongo.Collection
	meili    meilisearch.ServiceManager // nil without MEILISTREAM_MEILI_URL
	replica  *mongo.Client              // nil without MEILISTREAM_REPLICA_URI
	leases   *lease.Manager
	engine   *sidecar.Engine
	metrics  *sidecar.Metrics
	registry *prometheus.Registry
	closeFns []func()
}

// connect builds the clients (the driver connects lazily: a server down at
// start makes the jobs retry, it does not stop the process) and the engine.
func connect(ctx context.Context, cfg sidecar.Config, log hclog.Logger) (*wiring, error) {
	w := &wiring{cfg: cfg, registry: sidecar.NewRegistry(buildVersion())}
	w.metrics = sidecar.NewMetrics(w.registry)
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.MongoDBURI).SetAppName("meilistream"))
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
		// order; the client's own retries would only hide failures.
		w.meili = meilisearch.New(cfg.MeiliURL, meilisearch.WithAPIKey(cfg.MeiliAPIKey), meilisearch.DisableRetries())
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
	w.leases, err = lease.New(w.state, lease.Holder(), lease.Options{TTL: cfg.Lease, Logger: log.Named("lease")})
	if err != nil {
		w.close()
		return nil, err
	}
	w.engine = sidecar.NewEngine(w.source, w.state, w.errColl, engineConfig(cfg), w.metrics, log.Named("engine"))
	return w, nil
}

// holders reads who holds each job's lease (unexpired), for /status of
// standing-by jobs.
func (w *wiring) holders(ctx context.Context) (map[string]string, error) {
	infos, err := lease.List(ctx, w.state)
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

// probe checks that the servers answer, for /readyz: MongoDB always,
// Meilisearch and the replica when configured.
func (w *wiring) probe(ctx context.Context) error {
	var problems []string
	if err := w.client.Ping(ctx, nil); err != nil {
		problems = append(problems, "mongodb unreachable: "+redactedErr(err))
	}
	if w.meili != nil {
		if _, err := w.meili.Health(ctx); err != nil {
			problems = append(problems, "meilisearch unreachable: "+redactedErr(err))
		}
	}
	if w.replica != nil {
		if err := w.replica.Ping(ctx, nil); err != nil {
			problems = append(problems, "replica unreachable: "+redactedErr(err))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
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
func engineConfig(cfg sidecar.Config) sidecar.EngineConfig {
	drain := cfg.ShutdownTimeout * 3 / 4
	if drain <= 0 {
		drain = sidecar.DefaultDrainTimeout
	}
	return sidecar.EngineConfig{
		BatchSize:        cfg.BatchSize,
		PageSize:         cfg.PageSize,
		FlushInterval:    cfg.FlushInterval,
		PositionInterval: cfg.PositionInterval,
		OnHistoryLost:    cfg.OnHistoryLost,
		OnDocumentError:  cfg.OnDocumentError,
		StateCollection:  cfg.StateCollection,
		DrainTimeout:     drain,
	}
}

// sinkFactory builds each job's destination: the Meilisearch sink for a
// search job, the replica sink for a mirror job.
func (w *wiring) sinkFactory(log hclog.Logger) sidecar.SinkFactory {
	return func(job *transform.Job) (sidecar.Sink, error) {
		jl := log.Named(job.Name)
		switch job.Kind {
		case transform.Mirror:
			var rdb *mongo.Database
			if w.replica != nil {
				rdb = w.replica.Database(w.cfg.ReplicaDatabase)
			}
			return replicate.ForJob(rdb, w.source, job, jl, w.metrics)
		default:
			if w.meili == nil {
				return nil, errs.New(errs.ConfigInvalid, job.Name, "a search job needs MEILISTREAM_MEILI_URL")
			}
			return sidecar.NewMeiliSink(w.meili, job, jl), nil
		}
	}
}

// transformOptions maps the configuration onto transform loading.
func transformOptions(cfg sidecar.Config, log hclog.Logger) transform.Options {
	return transform.Options{
		Pool:     cfg.TransformPool,
		Timeout:  cfg.TransformTimeout,
		Logger:   log.Named("transform"),
		Database: cfg.MongoDBDatabase,
		Defaults: transform.JobDefaults{
			OnDocumentError: cfg.OnDocumentError,
			OnHistoryLost:   cfg.OnHistoryLost,
			BatchSize:       cfg.BatchSize,
			FlushInterval:   cfg.FlushInterval,
		},
	}
}

// loadJobs loads the transforms folder. The Set is nil only when the
// folder cannot be read; problems of single files come back joined in err
// with the Set (see sidecar.JobDefs). An unreadable folder is fine when the
// environment declares jobs (MEILISTREAM_JOB_<NAME>_<OPTION>): those run
// alone.
func loadJobs(cfg sidecar.Config, log hclog.Logger) (*transform.Set, error) {
	set, err := transform.Load(cfg.Transforms, transformOptions(cfg, log))
	if set == nil && len(cfg.Jobs) > 0 {
		log.Warn("transforms folder unreadable; running the jobs declared by environment", "error", err)
		return &transform.Set{}, nil
	}
	return set, err
}

// jobEnv adjusts loaded jobs to the environment: it applies
// MEILISTREAM_JOB_<NAME>_<OPTION> (names matched case-insensitively, '-' as
// '_'), puts MEILISTREAM_INDEX_PREFIX before every search job's index uid,
// and adds the jobs declared by environment alone (identity transform). A
// job's Hash covers what it changed, so changing it reindexes, as a
// transform edit does.
type jobEnv struct {
	cfg sidecar.Config
	log hclog.Logger

	mu sync.Mutex
	// applied remembers the loaded jobs already adjusted: a reload keeps
	// unchanged jobs' pointers, and those must not be written again while
	// they run.
	applied map[*transform.Job]bool
	only    map[string]*transform.Job // jobs by environment alone, built once
}

func newJobEnv(cfg sidecar.Config, log hclog.Logger) *jobEnv {
	return &jobEnv{cfg: cfg, log: log, applied: map[*transform.Job]bool{}, only: map[string]*transform.Job{}}
}

func envKey(name string) string { return strings.ToLower(strings.ReplaceAll(name, "-", "_")) }

// jobs returns the loaded jobs adjusted, plus the jobs declared by
// environment alone.
func (e *jobEnv) jobs(loaded []*transform.Job) []*transform.Job {
	if len(e.cfg.Jobs) == 0 && e.cfg.IndexPrefix == "" {
		return loaded
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	var all []*transform.Job
	for _, j := range loaded {
		o := e.cfg.Jobs[envKey(j.Name)]
		seen[envKey(j.Name)] = true
		if !e.applied[j] {
			e.applied[j] = true
			if err := applyJobEnv(j, o, e.cfg.IndexPrefix); err != nil {
				e.log.Error("per-job environment option", "job", j.Name, "error", err)
			}
		}
		all = append(all, j)
	}
	names := make([]string, 0, len(e.cfg.Jobs))
	for name := range e.cfg.Jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if seen[name] {
			continue
		}
		j, ok := e.only[name]
		if !ok {
			j = &transform.Job{Name: name}
			if err := applyJobEnv(j, e.cfg.Jobs[name], e.cfg.IndexPrefix); err != nil {
				e.log.Error("job declared by environment", "job", name, "error", err)
				j = nil
			}
			e.only[name] = j
		}
		if j != nil {
			all = append(all, j)
		}
	}
	return all
}

// applyJobEnv sets a job's options from its environment overrides (o, may
// be nil), fills the defaults of a job without a file, and prefixes a search
// job's index uid. The hash changes with both: either can point the job at
// another index, which must then be rebuilt.
func applyJobEnv(j *transform.Job, o map[string]string, prefix string) error {
	var problems []string
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := o[k]
		switch k {
		case "collection":
			j.Collection = v
		case "index":
			j.Index = v
		case "primary_key":
			j.PrimaryKey = v
		case "mirror":
			j.Mirror, j.Kind, j.Index, j.Reindex = v, transform.Mirror, "", "inplace"
		case "sweep":
			b, err := strconv.ParseBool(v)
			if err != nil {
				problems = append(problems, "sweep: want true or false")
			}
			j.Sweep = b
		case "reindex":
			if v != "swap" && v != "inplace" {
				problems = append(problems, "reindex: want swap or inplace")
			}
			j.Reindex = v
		case "on_history_lost":
			if v != "reindex" && v != "fail" {
				problems = append(problems, "on_history_lost: want reindex or fail")
			}
			j.OnHistoryLost = v
		case "on_document_error":
			if v != "skip" && v != "fail" {
				problems = append(problems, "on_document_error: want skip or fail")
			}
			j.OnDocumentError = v
		case "batch_size":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				problems = append(problems, "batch_size: want a positive integer")
			}
			j.BatchSize = n
		case "flush_interval":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				problems = append(problems, "flush_interval: want a positive Go duration like 1s")
			}
			j.FlushInterval = d
		case "transform_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				problems = append(problems, "transform_timeout: want a positive Go duration like 1s")
			}
			j.Timeout = d
		}
	}
	if j.Collection == "" {
		j.Collection = j.Name
	}
	if j.Kind == transform.Search {
		if j.Index == "" {
			j.Index = j.Name
		}
		if j.PrimaryKey == "" {
			j.PrimaryKey = transform.DefaultPrimaryKey
		}
		if j.Reindex == "" {
			j.Reindex = "swap"
		}
		if j.File == "" && !j.Sweep {
			j.Sweep = true
		}
	}
	if j.Kind == transform.Search && prefix != "" {
		j.Index = prefix + j.Index
	}
	if len(keys) > 0 || j.File == "" || prefix != "" {
		sum := sha256.New()
		sum.Write([]byte(j.Hash))
		for _, k := range keys {
			fmt.Fprintf(sum, "\x00%s=%s", k, o[k])
		}
		if j.Kind == transform.Search && prefix != "" {
			fmt.Fprintf(sum, "\x00index_prefix=%s", prefix)
		}
		j.Hash = hex.EncodeToString(sum.Sum(nil))
	}
	if len(problems) > 0 {
		return errs.New(errs.ConfigInvalid, j.Name, "MEILISTREAM_JOB_%s_*: %s", strings.ToUpper(j.Name), strings.Join(problems, "; "))
	}
	return nil
}

// leaseForEngine is a held lease as the engine takes it.
type leaseForEngine = sidecar.EngineLease

// underLease runs fn holding the job's lease (taken at once: RUNNING when
// another process holds it), renewed meanwhile; fn's context is cancelled
// with LEASE_LOST if it is lost. The lease is released afterwards.
func (w *wiring) underLease(ctx context.Context, name string, fn func(ctx context.Context, l leaseForEngine) error) error {
	l, err := w.leases.Acquire(ctx, name)
	if err != nil {
		return err
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
