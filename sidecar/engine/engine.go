package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// Defaults of Config fields left zero. A job's options (batchSize,
// flushInterval, onHistoryLost, onDocumentError) default to the transform
// package's, which its option table documents.
const (
	DefaultBatchSize        = jobdef.DefaultBatchSize
	DefaultFlushInterval    = jobdef.DefaultFlushInterval
	DefaultOnHistoryLost    = jobdef.DefaultOnHistoryLost
	DefaultOnDocumentError  = jobdef.DefaultOnDocumentError
	DefaultPageSize         = 2000
	DefaultReindexParallel  = 4
	DefaultPositionInterval = 60 * time.Second
	DefaultMaxInFlight      = 4
	DefaultDrainTimeout     = 15 * time.Second
	DefaultRetryBase        = 200 * time.Millisecond
	DefaultRetryCap         = 30 * time.Second
	DefaultProgressInterval = 5 * time.Second
	DefaultPresenceInterval = 10 * time.Second
	DefaultVerifyInterval   = 24 * time.Hour
	DefaultVerifyRate       = 500
)

// ErrInvalidated is the cause (wrapped in a FAILED *errs.Error) of Run's
// return when the collection was dropped, renamed or its database dropped:
// the position is cleared, so the next run reindexes what the collection
// then holds.
var ErrInvalidated = errors.New("change stream invalidated: collection dropped or renamed")

// Config tunes the engine. Zero fields take the defaults above. A job's
// own options (BatchSize,
// FlushInterval, OnHistoryLost, OnDocumentError in its transform file)
// override the matching fields here.
type Config struct {
	BatchSize int // pending changes that trigger a send (follow); writes per batch (reindex)
	PageSize  int // documents a reindex reads ahead of its checkpoint at most (parts of half of it)
	// ReindexParallel is the most chunk slots a job's reindex holds at
	// once across the pods (reindex_shared.go); 1: the holder reads
	// alone. A job's parallel overrides it.
	ReindexParallel  int
	FlushInterval    time.Duration // longest a pending change waits
	PositionInterval time.Duration // how often a quiet stream records its position
	OnHistoryLost    string        // "reindex" | "fail"
	OnDocumentError  string        // "skip" | "fail"

	MaxInFlight      int           // batches sent but not yet durable (default 4)
	ReadAhead        int           // bytes of change events read and not yet taken in (default stream.DefaultReadAhead)
	PendingBytes     int           // bytes of change events that make a batch be sent (default DefaultPendingBytes)
	DrainTimeout     time.Duration // on close, how long flushing pending changes may take (default 15s)
	RetryBase        time.Duration // first backoff of a retried send (default 200ms)
	RetryCap         time.Duration // backoff cap (default 30s)
	ProgressInterval time.Duration // reindex progress log period (default 5s)
	// Process is this process's identity among the ones running the jobs
	// (its lease holder identity): its own presence records are not
	// another process's.
	Process string
	// Form says whether the source takes update pipelines and $$NOW; the
	// job state's server-time records (presence, requests) are written
	// without them where it does not (nil: it does).
	Form capability.Form
	// PresenceInterval is how often a process refreshes its presence
	// record of each job it runs (KeepPresence); a record counts as live
	// for three of them (default 10s: a third of the default lease, the
	// lease's renewal cadence).
	PresenceInterval time.Duration
	// RetryPoll is how often a job's holder looks for `meilistream retry`
	// requests while it follows (default 1s).
	RetryPoll time.Duration
	// VerifyInterval is how often the holder of a job with verify: true
	// starts a background verify pass (default 24h), VerifyRate the
	// documents per second it reads (default 500).
	VerifyInterval time.Duration
	VerifyRate     int
	// ReindexRate bounds the documents per second a job's reindex reads
	// across all pods (a job's own ReindexRate wins); 0: no bound.
	// ReindexMaxReadLatency and ReindexMaxTasks are the bounds of the
	// throttle's brake (ThrottleConfig: 0 their defaults, negative never).
	ReindexRate           int
	ReindexMaxReadLatency time.Duration
	ReindexMaxTasks       int
	// WatchdogAnswer is the least time a job's watchdog allows the
	// destination to answer a batch (default DefaultWatchdogAnswer; see
	// watchdog.go for the bound).
	WatchdogAnswer time.Duration
	// Durable, when set, is told each time a job's holder has recorded
	// that every change up to cluster time ts is durable in the
	// destination (read your writes: the HTTP server's /wait answers from
	// it). It must not block.
	Durable func(job string, ts bson.Timestamp)
	// PauseWarnEvery is how often a paused job says in the log that it
	// is still paused and its position ages (default 1h).
	PauseWarnEvery time.Duration
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultPageSize
	}
	if c.ReindexParallel <= 0 {
		c.ReindexParallel = DefaultReindexParallel
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.PositionInterval <= 0 {
		c.PositionInterval = DefaultPositionInterval
	}
	if c.OnHistoryLost == "" {
		c.OnHistoryLost = DefaultOnHistoryLost
	}
	if c.OnDocumentError == "" {
		c.OnDocumentError = DefaultOnDocumentError
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.ReadAhead <= 0 {
		c.ReadAhead = stream.DefaultReadAhead
	}
	if c.PendingBytes <= 0 {
		c.PendingBytes = DefaultPendingBytes
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryCap <= 0 {
		c.RetryCap = DefaultRetryCap
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.PresenceInterval <= 0 {
		c.PresenceInterval = DefaultPresenceInterval
	}
	if c.RetryPoll <= 0 {
		c.RetryPoll = DefaultRetryPoll
	}
	if c.VerifyInterval <= 0 {
		c.VerifyInterval = DefaultVerifyInterval
	}
	if c.VerifyRate <= 0 {
		c.VerifyRate = DefaultVerifyRate
	}
	if c.WatchdogAnswer <= 0 {
		c.WatchdogAnswer = DefaultWatchdogAnswer
	}
	if c.PauseWarnEvery <= 0 {
		c.PauseWarnEvery = DefaultPauseWarnEvery
	}
	return c
}

// Lease is what the engine needs of a job's lease; *lease.Lease has
// it. Lost is closed once the lease is no longer held, Err then says why
// (LEASE_LOST); Confirm proves with one round trip that it is still held.
//
// Held says, with no round trip, whether the lease may still be acted on
// by this process's own clock (nil) or not (LEASE_LOST, and the lease is
// then lost): it guards every request to the destination, which the epoch
// cannot fence (the sinks' sink.Guard).
type Lease interface {
	Epoch() int64
	Lost() <-chan struct{}
	Err() error
	Confirm(ctx context.Context) error
	Held() error
}

// lossContext is implemented by a Lease whose loss is also a context,
// cancelled when Lost closes (lease.Lease); fakes in tests may offer only
// Lost.
type lossContext interface {
	Context() context.Context
}

// Engine runs search and mirror jobs: reindex and follow over a Sink. One
// Engine serves every job; it holds no per-job state between calls (that
// lives in MongoDB, see sidecar/jobstate).
type Engine struct {
	source *mongo.Database
	store  *jobstate.Store
	// stateName is the state collection's: the job's stream follows its
	// watermark documents there.
	stateName string
	cfg       Config
	obs       Observer
	log       hclog.Logger
	// resolver resolves the jobs' declared lookups on the prepare stage.
	resolver *lookupResolver
	// presence keeps the process's presence records of its jobs, all from
	// one loop (presences).
	presence *presences
	// requests looks for the requests waiting for any of the process's
	// jobs in one query (requestWatch).
	requests *requestWatch
	// The jobs' gauges tick from one timer for each kind (tickGroup):
	// their lag clocks, queue depths and watchdogs.
	lagTicks, queueTicks, watchTicks tickGroup
	// wait sleeps before attempt (from 0) of a read or write tried again.
	wait func(ctx context.Context, attempt int) error

	kindMu sync.Mutex
	kind   map[string]string // job name -> metrics kind label

	// errIndex: the errors collection's index was made (or found) by a
	// job start of this process; errIndexSaid: that it could not be, for
	// want of the privilege, was logged.
	errIndex, errIndexSaid atomic.Bool

	// srcClock is the source's newest cluster time, for the jobs' lag
	// (lag.go).
	srcClock sourceClock

	// claimsDone counts the chunks of shared reindexes this process did
	// (reindex_shared.go).
	claimsDone atomic.Int64
	// chunks tells the process's idle claimants when their job has
	// chunks to claim (chunkwatch.go).
	chunks *chunkWatch

	// hubs: the one change stream per source database the jobs of this
	// engine share (stream.Hub).
	hubs *stream.Hubs

	// scanIndexSaid: the jobs whose missing scan index was warned of
	// (scan.go); modeSaid, the auto jobs whose pick was said (mode.go).
	scanIndexSaid, modeSaid sync.Map
}

// New returns an engine reading jobs' collections from source and
// keeping positions and checkpoints in state, per-document errors in
// errorsColl (normally state's name + "_errors"). obs and logger may be
// nil.
func New(source *mongo.Database, state *mongo.Collection, errorsColl *mongo.Collection, cfg Config, obs Observer, logger hclog.Logger) *Engine {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if obs == nil {
		obs = noObserver{}
	}
	cfg = cfg.withDefaults()
	wait := func(ctx context.Context, attempt int) error {
		return sleep(ctx, backoff(cfg, attempt))
	}
	store := jobstate.New(state, errorsColl, wait)
	store.SetForm(cfg.Form)
	e := &Engine{source: source, store: store, cfg: cfg, obs: obs, log: logger, wait: wait,
		resolver: &lookupResolver{Source: source, Bounds: lookupBounds, Log: logger, Wait: wait}}
	if state != nil {
		e.stateName = state.Name()
	}
	e.hubs = stream.NewHubs(e.stateName)
	e.presence = newPresences(store, cfg.Process, cfg.PresenceInterval, logger)
	e.chunks = newChunkWatch(store, chunkWatchEvery)
	e.requests = newRequestWatch(store, cfg.RetryPoll*RetryFallback, logger)
	return e
}

// Reader returns what the jobs' monstache-style transforms read the source
// MongoDB with (newReader), through the engine's client: pass it as
// transform.Options.Reader.
func (e *Engine) Reader() transform.Reader { return newReader(e.source.Client()) }

// ensureErrorIndex makes the errors collection's index at a job's start,
// by the lease's holder, once per process. The index only makes the
// reads of the records fast (a job's start, `meilistream errors`): without
// it they are still correct, so a failure is a warning, not a stop; a
// user without the privilege to create it is told once what to do.
func (e *Engine) ensureErrorIndex(ctx context.Context, log hclog.Logger) {
	if e.errIndex.Load() {
		return
	}
	err := e.store.EnsureErrorIndex(ctx)
	switch {
	case err == nil:
		e.errIndex.Store(true)
	case ctx.Err() != nil:
	case errors.Is(err, jobstate.ErrNoErrorIndex):
		if e.errIndexSaid.CompareAndSwap(false, true) {
			log.Warn("the errors collection has no index: reading its records scans it", "error", err)
		}
	default:
		log.Warn("could not create the errors collection's index; trying again at the next job start", "error", err)
	}
}

// jobConfig is the engine configuration with a job's overrides applied.
type jobConfig struct {
	Config
	job *transform.Job
	// timeouts, while the job follows, takes the documents that ran out of
	// time, to try them again (timeouts.go); nil otherwise.
	timeouts *timeouts
}

func (e *Engine) jobCfg(job *transform.Job) jobConfig {
	c := e.cfg
	if job.BatchSize > 0 {
		c.BatchSize = job.BatchSize
	}
	if job.FlushInterval > 0 {
		c.FlushInterval = job.FlushInterval
	}
	if job.OnHistoryLost != "" {
		c.OnHistoryLost = job.OnHistoryLost
	}
	if job.OnDocumentError != "" {
		c.OnDocumentError = job.OnDocumentError
	}
	if job.Parallel > 0 {
		c.ReindexParallel = job.Parallel
	}
	if job.ReindexRate > 0 {
		c.ReindexRate = job.ReindexRate
	}
	return jobConfig{Config: c, job: job}
}

// Run runs job under l until ctx ends or the job fails: it prepares the
// sink and follows the job's change stream, with a reindex interleaved when
// the job has no recorded position, when the position was recorded with
// another transform hash, when a reindex was left unfinished, or when the
// history is lost (onHistoryLost: reindex).
//
// It returns nil after a clean close (ctx cancelled for any reason but a
// lost lease: pending changes are flushed and their position recorded, within
// DrainTimeout), an error with code LEASE_LOST when the lease was lost
// (nothing recorded afterwards), HISTORY_LOST with onHistoryLost: fail, a
// FAILED error wrapping ErrInvalidated when the collection was dropped or
// renamed (position cleared), the per-document error's own code with
// onDocumentError: fail, or a *ModeAsked (no failure) when `meilistream
// reindex` asked for a reindex in another mode than the job's.
//
// prepared, when not nil, hears the outcome of each attempt to prepare
// dst (nil on success; not when ctx ended meanwhile), which the engine
// retries with backoff: the supervisor shows it in /status.
func (e *Engine) Run(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, prepared func(error)) error {
	return e.runJob(ctx, job, dst, l, stats, "", prepared)
}

// RunReindexing is Run starting with a reindex, after Run returned a
// *ModeAsked: job (and dst, built from it) reindex in the mode asked;
// original is the job as defined, whose mode a later `meilistream
// reindex` without a mode means (Run returns a *ModeAsked for it).
func (e *Engine) RunReindexing(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, original *transform.Job, prepared func(error)) error {
	return e.runJob(ctx, job, dst, l, stats, reindexMode(original), prepared)
}

func (e *Engine) runJob(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, own string, prepared func(error)) error {
	e.setKind(job.Name, job.Kind.String())
	if stats == nil {
		stats = status.NewJobStats() // the lag metric is computed from it
	}
	defer e.watchQueue(job.Name, dst, stats)()
	_, err := e.run(ctx, job, dst, l, stats, false, own, prepared)
	if m := (*ModeAsked)(nil); errors.As(err, &m) {
		stats.SetPhase(status.PhaseIdle)
		return err // not a failure: the caller runs the job again, in that mode
	}
	if err != nil {
		err = errs.WithJob(job.Name, err)
		stats.SetError(err)
	}
	stats.SetPhase(status.PhaseIdle)
	return err
}

// run is Run, and with force (`meilistream reindex NAME`) a reindex
// whatever the position says, after which it stops and reports it.
// own, when set, is the mode of the job as defined, which job (a copy in
// another mode) starts with a reindex in (RunReindexing).
func (e *Engine) run(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, force bool, own string, prepared func(error)) (*Summary, error) {
	asked := own != ""
	ctx, stop := leaseContext(ctx, l)
	defer stop()
	log := e.log.With("job", job.Name)
	if err := e.store.Stamp(ctx, job.Name, l); err != nil {
		return nil, closeOr(ctx, l, err)
	}
	e.ensureErrorIndex(ctx, log)
	if err := retryPrepare(ctx, dst, e.cfg, log, prepared); err != nil {
		return nil, closeOr(ctx, l, err)
	}
	scan, err := e.scanMode(ctx, job, stats, log)
	if err != nil {
		return nil, closeOr(ctx, l, err)
	}
	var (
		lost      bool     // the history was lost: reindex afresh from the present
		lostSince bson.Raw // the position recorded when it was
	)
	// asked: a running job's holder was asked to reindex (pause.go).
	for {
		plan, err := e.plan(ctx, job, l, force, lost, scan, log)
		if err != nil {
			return nil, closeOr(ctx, l, err)
		}
		plan.ownMode = own
		if m := askedModeLeft(job, plan, own, force); m != "" {
			// Run in the job's mode, a reindex another mode was asked
			// for would start over; the caller runs it in that mode.
			log.Info("a reindex asked by meilistream reindex was left unfinished: going on with it in the mode asked", "mode", m, "done", plan.cp.Count)
			return nil, &ModeAsked{Job: job.Name, Mode: m}
		}
		if asked && !plan.reindex {
			log.Info("reindexing, asked by meilistream reindex", "mode", reindexMode(job))
			plan.reindex = true
		}
		asked = false
		sum, err := e.follow(ctx, job, dst, l, stats, plan, log)
		if errors.Is(err, errReindexAsked) {
			asked = true
			continue
		}
		if !errors.Is(err, stream.ErrHistoryLost) {
			return sum, err
		}
		// A reindex asked for by an operator repairs a lost history
		// whatever onHistoryLost says.
		if e.jobCfg(job).OnHistoryLost == "fail" && !force {
			return nil, errs.Wrap(errs.HistoryLost, job.Name, err, "the recorded position is older than the server's change history (onHistoryLost: fail)")
		}
		var now bson.Raw
		if pos, _ := e.store.ReadPosition(ctx, job.Name); pos != nil {
			now = pos.Token
		}
		if lost && bytes.Equal(now, lostSince) {
			// Lost again before the stream recorded anything: the history
			// does not even cover the stream, and starting over would
			// loop.
			return nil, errs.Wrap(errs.HistoryLost, job.Name, err, "the change history (oplog window) is too short for the change stream of %s to keep up; enlarge the oplog", job.Collection)
		}
		log.Warn("change history lost since the recorded position: following from the present and reindexing")
		lost, lostSince = true, now
	}
}

// plan decides where a follow starts and whether a reindex runs with it.
// A checkpoint is resumed only with the position recorded beside it: the
// staged index holds every change up to that position, and the stream
// replays the rest.
func (e *Engine) plan(ctx context.Context, job *transform.Job, l Lease, force, lost, scan bool, log hclog.Logger) (followPlan, error) {
	plan := followPlan{untilReindexed: force, scan: scan}
	if lost {
		plan.reindex = true
		return plan, nil
	}
	pos, err := e.store.ReadPosition(ctx, job.Name)
	if err != nil {
		return plan, errs.Wrap(errs.Failed, job.Name, err, "read position")
	}
	cp, err := e.store.ReadCheckpoint(ctx, job.Name)
	if err != nil {
		return plan, errs.Wrap(errs.Failed, job.Name, err, "read reindex checkpoint")
	}
	if pos != nil {
		plan.tok, plan.since, plan.cp = pos.Token, pos.WallTime, cp
		if pos.Hash != job.Hash && legacyOf(job, pos.Hash) {
			// The same transform, hashed by an earlier release (the
			// file's bytes): no reason to rebuild anything.
			log.Info("the position was recorded by an earlier release with the hash of the file's bytes, which is this transform's: recording its token hash, no reindex",
				"recorded_hash", short(pos.Hash), "hash", short(job.Hash))
			if err := e.store.RecordHash(ctx, &job.Job, l); err != nil {
				return plan, err
			}
			pos.Hash = job.Hash
		}
	}
	if cp != nil && legacyOf(job, cp.Hash) {
		cp.Hash = job.Hash // rewritten with the next checkpoint
	}
	if pos != nil && isScanToken(pos.Token) != scan {
		// The position is the other mode's: a scan's cursor is no resume
		// token, and a resume token no cursor. Start afresh (a stream at
		// the present, a scan from the greatest key) with a reindex, which
		// covers what the old position did not.
		if scan {
			log.Info("the recorded position is a change stream's and the job now scans: reindexing, then scanning from the greatest " + job.Key)
		} else {
			log.Info("the recorded position is a scan's and the job now follows the change stream: reindexing, following from the present")
		}
		plan.tok, plan.cp = nil, nil
		plan.reindex = true
		return plan, nil
	}
	switch {
	case pos == nil:
		log.Info("no recorded position: reindexing")
		plan.reindex = true
	case pos.Hash != job.Hash:
		if err := olderRule(ctx, e.store, job, pos, e.cfg.Process); err != nil {
			return plan, err
		}
		if pos.PreviousHash == job.Hash {
			log.Info("transform reverted to the one recorded before, and no live process runs the newer one: reindexing",
				"recorded_hash", short(pos.Hash), "hash", short(job.Hash), "recorded_at", pos.HashSince)
		}
		if cp == nil || cp.Hash != job.Hash {
			e.logWhyReindex(job, pos, log)
		}
		plan.reindex = true
	case cp != nil:
		// The live index took changes through the transform of an
		// unfinished reindex: only a finished one makes it whole again.
		log.Info("a reindex was left unfinished: reindexing")
		plan.reindex = true
	case force:
		plan.reindex = true
	}
	return plan, nil
}

// askedModeLeft returns the mode of the unfinished reindex plan resumes
// when `meilistream reindex --inplace` or `--swap` asked for it in
// another mode than job's, as Run runs it (not a copy already in another
// mode, not `meilistream reindex` by hand, whose flags choose); "" when
// there is none. Its holder died or restarted: going on with it in the
// job's mode would start over (startReindex keeps only a checkpoint of
// the job's mode), staging an index the operator chose not to hold twice,
// or reading everything again.
func askedModeLeft(job *transform.Job, plan followPlan, own string, force bool) string {
	cp := plan.cp
	if own != "" || force || !plan.reindex || cp == nil || !cp.Asked || cp.Swapping || cp.Hash != job.Hash {
		return ""
	}
	mode := "swap"
	if cp.InPlace {
		mode = "inplace"
	}
	if mode == reindexMode(job) || mode == "swap" && job.Kind == jobdef.Mirror {
		return ""
	}
	return mode
}

// legacyOf says whether h is job's hash as an earlier release computed it
// (transform.Job.LegacyHash: the file's bytes) while job's own differs.
func legacyOf(job *transform.Job, h string) bool {
	return h != "" && job.LegacyHash != "" && job.LegacyHash != job.Hash && h == job.LegacyHash
}

// logWhyReindex says why a changed hash reindexes: a changed job
// definition (index uid, options) or a changed transform file, and that an
// index (or replica collection) the job no longer writes is left in place.
func (e *Engine) logWhyReindex(job *transform.Job, pos *jobstate.Position, log hclog.Logger) {
	changes := jobstate.DefinitionChanges(pos.Definition, &job.Job)
	if len(changes) == 0 && pos.Destination != "" && pos.Destination != jobstate.Destination(&job.Job) {
		changes = []string{fmt.Sprintf("destination %q, was %q", jobstate.Destination(&job.Job), pos.Destination)}
	}
	if len(changes) == 0 {
		log.Info("transform changed since the position was recorded: reindexing", "recorded_hash", short(pos.Hash), "hash", short(job.Hash))
		return
	}
	args := []any{"changes", strings.Join(changes, "; "), "recorded_hash", short(pos.Hash), "hash", short(job.Hash)}
	if pos.Destination != "" && pos.Destination != jobstate.Destination(&job.Job) {
		what := "index"
		if job.Kind == jobdef.Mirror {
			what = "replica collection"
		}
		log.Info(fmt.Sprintf("job definition changed (%s): reindexing into %s %s; the old %s %s is left in place for you to delete when no longer needed",
			strings.Join(changes, "; "), what, jobstate.Destination(&job.Job), what, pos.Destination), args...)
		return
	}
	log.Info(fmt.Sprintf("job definition changed (%s): reindexing", strings.Join(changes, "; ")), args...)
}

// Older applies the rollout rule (olderRule) to job as this process
// has it, without its lease: the error wrapping ErrTransformOlder
// when it must stand by for another process, nil when it may take the
// lease (a run applies the rule again under it), another error when the
// state could not be read. A standby asks before it takes the lease, so
// waiting for a newer pod neither takes nor bumps it.
func (e *Engine) Older(ctx context.Context, job *transform.Job) error {
	pos, err := e.store.ReadPosition(ctx, job.Name)
	if err != nil {
		return errs.Wrap(errs.Failed, job.Name, err, "read position")
	}
	if pos == nil || legacyOf(job, pos.Hash) {
		return nil
	}
	return olderRule(ctx, e.store, job, pos, e.cfg.Process)
}

// KeepPresence starts keeping this process's presence record of job (with
// job's hash), written at once and refreshed every PresenceInterval with
// the process's other records, until the returned Presence is closed: the
// rollout rule reads it in the other processes.
func (e *Engine) KeepPresence(job *transform.Job) *Presence {
	return e.presence.keep(job)
}

// leaseContext derives a context cancelled with the lease's LEASE_LOST
// error as its cause as soon as the lease is lost: a loss is noticed when
// the renewal says so (a process continued after a freeze may reach a
// request first: the sinks' guard, sink.Guard, stops that one).
//
// A lease that offers its loss as a context (lossContext, as lease.Lease
// does) is waited on with context.AfterFunc, which holds no goroutine
// while the lease lasts: every running job has several such contexts.
func leaseContext(ctx context.Context, l Lease) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if lc, ok := l.(lossContext); ok {
		unhook := context.AfterFunc(lc.Context(), func() { cancel(leaseErr(l)) })
		return ctx, func() { unhook(); cancel(context.Canceled) }
	}
	go func() {
		select {
		case <-l.Lost():
			cancel(leaseErr(l))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// drainContext is for flushing after ctx was cancelled (a clean close): not
// cancelled with ctx, but bounded by timeout and still by the lease.
func drainContext(ctx context.Context, l Lease, timeout time.Duration) (context.Context, func()) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	lctx, stop := leaseContext(dctx, l)
	return lctx, func() { stop(); cancel() }
}

func leaseErr(l Lease) error {
	if err := l.Err(); err != nil {
		return err
	}
	return errs.New(errs.LeaseLost, "", "lease lost")
}

// leaseOr returns the LEASE_LOST error when the lease is gone (whatever err
// says: an operation cut short by the loss), else err.
func leaseOr(ctx context.Context, l Lease, err error) error {
	select {
	case <-l.Lost():
		return leaseErr(l)
	default:
	}
	if c := context.Cause(ctx); c != nil && errors.Is(c, errs.ErrLeaseLost) {
		return c
	}
	return err
}

// closeOr is leaseOr, and nil when ctx was cancelled for another reason (a
// clean close while waiting or reindexing: nothing is recorded, the next run
// resumes).
func closeOr(ctx context.Context, l Lease, err error) error {
	err = leaseOr(ctx, l, err)
	if errors.Is(err, errs.ErrLeaseLost) {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// retryPrepare prepares dst until it succeeds or fails for good, passing
// each attempt's outcome to prepared (when not nil).
func retryPrepare(ctx context.Context, dst sink.Sink, cfg Config, log hclog.Logger, prepared func(error)) error {
	for attempt := 0; ; attempt++ {
		err := dst.Prepare(ctx)
		if prepared != nil && ctx.Err() == nil {
			prepared(err)
		}
		if err == nil {
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
		log.Warn("preparing the destination failed; retrying", "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(cfg, attempt)); err != nil {
			return err
		}
	}
}

// retryable says whether an error of a sink may be retried: one whose code
// (errs.CodeOf) is FAILED.
func retryable(err error) bool { return errs.CodeOf(err) == errs.Failed }

// backoff is exponential with full jitter in [d/2, d], capped.
func backoff(cfg Config, attempt int) time.Duration {
	d := cfg.RetryBase
	for i := 0; i < attempt && d < cfg.RetryCap; i++ {
		d *= 2
	}
	if d > cfg.RetryCap {
		d = cfg.RetryCap
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// keyOf is the identity of a source _id: equal for two _ids exactly when
// MongoDB holds them as one (numbers by value across types:
// jobdef.IDKey). Changes coalesce on it, a reindex's window drops rows
// by it, and ids read back from a destination compare by it.
func keyOf(id bson.RawValue) string { return jobdef.IDKey(id) }

// lookupBounds are what a lookup may read (a test narrows them).
var lookupBounds Bounds

// lookups resolves job's lookups for items (nil when the job declares
// none), setting the LookupErr of an item whose lookups match more than a
// document may hold.
func (e *Engine) lookups(ctx context.Context, jc jobConfig, items []Item) ([]jobdef.LookupResults, error) {
	if len(jc.job.Lookups) == 0 {
		return nil, nil
	}
	docs := make([]bson.Raw, len(items))
	for i := range items {
		docs[i] = items[i].Doc
	}
	out, failed, err := e.resolver.Resolve(ctx, jc.job, docs)
	if err != nil {
		return nil, err
	}
	for i := range items {
		items[i].LookupErr = failed[i]
	}
	return out, nil
}

// OnHistoryLost is job's onHistoryLost with the engine's default applied:
// "reindex" or "fail".
func (e *Engine) OnHistoryLost(job *transform.Job) string { return e.jobCfg(job).OnHistoryLost }
