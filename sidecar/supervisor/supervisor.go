package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/status"
)

// Job states shown in /status. The engine refines "running" into
// "reindexing" or "following" through the job's stats.
const (
	StateStarting   = status.Starting   // loaded, asking for its lease or preparing its destination
	StateQueued     = status.Queued     // holds the lease, waits for a start slot (Config.MaxStarts)
	StateStandby    = status.Standby    // waiting for the lease another process holds
	StateRunning    = "running"         // holds the lease, the engine runs
	StateRestarting = status.Restarting // the last run failed; waiting for the next try
	StateFailed     = status.Failed     // cannot run until its configuration is fixed, or failed for good (ErrFatal)
	StateStopping   = status.Stopping   // flushing, recording and releasing
	StateStopped    = status.Stopped    // done (shutdown or removed)
	StateStalled    = status.Stalled    // gave its lease back after no progress; not taking it again for a while
)

// Default restart backoff of a failing job (1 s doubling to 1 min).
const (
	DefaultRestartMin = time.Second
	DefaultRestartMax = time.Minute
)

// DefaultMaxStarts is how many jobs of a process may be in their start
// at once (Config.MaxStarts).
const DefaultMaxStarts = 8

// DefaultStallAfter is how far behind the change stream a following job
// may fall before /readyz reports it stalled.
const DefaultStallAfter = 5 * time.Minute

// JobDef is one job as the supervisor sees it: a name, a hash that changes
// whenever the job's definition (transform file, options) changes, the
// definition itself for the driver, and Err when it could not be loaded.
type JobDef struct {
	Name string
	Kind string // "search" or "mirror", for /status and metrics
	Hash string
	// Err is set when the job's definition is unusable (CONFIG_INVALID,
	// TRANSFORM_FAILED at load): the job shows as failed and does not run
	// until a new definition replaces it; other jobs are not affected.
	Err error
	// Spec is what the driver needs to run the job (*transform.Job).
	Spec any
	// LoadErr is set when the job's file changed and failed to load while
	// the previous version (Spec, Hash) keeps running: the job is not
	// restarted; the error shows in /status as transform_error and is
	// logged once, until a later load succeeds or fails differently.
	LoadErr error
}

// HeldLease is what the supervisor needs of a job lease it holds.
type HeldLease interface {
	// Keep renews the lease in the background until stop is called or it is
	// lost; the returned context is cancelled with cause LEASE_LOST on loss.
	Keep(ctx context.Context) (context.Context, func())
	// Release gives the lease up (deletes only our own document).
	Release(ctx context.Context) error
	// Epoch is the lease's takeover count when we got it.
	Epoch() int64
}

// JobDriver is what the supervisor needs to run jobs: wait for a job's lease
// and run the job while holding it. The production driver wraps lease.Manager
// and the Engine; tests use fakes.
type JobDriver interface {
	// Standby blocks until the job's lease is ours, waiting, with backoff,
	// while another process holds it, or while this process must leave the
	// job to another (an error wrapping engine.ErrTransformOlder: a live
	// pod runs the newer transform): it calls held with why (the RUNNING
	// error naming the holder, or that one) each time it waits. It returns
	// any other failure to ask (MongoDB unreachable, credentials refused),
	// for the supervisor to show and retry, and ctx's error when cancelled.
	Standby(ctx context.Context, def JobDef, w Standing) (HeldLease, error)
	// Run runs the job under h until ctx is cancelled (it then flushes and
	// records before returning) or it fails. ctx is cancelled with cause
	// LEASE_LOST when the lease is lost; Run then returns an error with code
	// LEASE_LOST. An error marked with MarkFatal (errors.Is ErrFatal) ends
	// the job for good: it is not restarted and the supervisor reports it
	// on Fatal. stats is the job's, kept across runs.
	Run(ctx context.Context, def JobDef, h HeldLease, stats *SupervisedJob) error
}

// Standing is what a JobDriver's Standby tells the supervisor, and asks
// of it, while it waits for a job's lease.
type Standing interface {
	// Held is called each time it waits: why is the RUNNING error naming
	// the holder, or an error wrapping engine.ErrTransformOlder.
	Held(why error)
	// HoldOff is how long to wait before the next attempt to take the
	// lease: 0 normally; more while this process holds its fair share of
	// the jobs (a pod under its share should take a free lease first), or
	// right after it gave this job back.
	HoldOff() time.Duration
	// Stats are the job's figures in this process (a standby counts the
	// chunks of the job's shared reindex it does).
	Stats() *status.JobStats
}

// PresenceKeeper is implemented by a JobDriver that records, for each job
// this process runs (holder or standby), that it does and with which
// transform (engine.KeepPresence): the rollout rule tells pods that
// disagree on a transform from a revert by those records. The supervisor
// keeps one per job while the job may run here, and closes it when the job
// stops, or fails until its definition changes.
type PresenceKeeper interface {
	// KeepPresence starts keeping def's record; nil when the driver keeps
	// none for it.
	KeepPresence(def JobDef) Presence
}

// Presence is one job's presence record, kept by a PresenceKeeper.
type Presence interface {
	// Waiting says why the job stands by for a process with a newer
	// transform ("" when it does not).
	Waiting(reason string)
	// Close deletes the record. Idempotent.
	Close()
}

// Metrics receives what the supervisor reports of each job (the Prometheus
// collectors of sidecar/httpapi in production). The methods must be cheap
// and safe for concurrent use.
type Metrics interface {
	// ObserveJob: the job is configured, of kind ("search", "mirror", ""
	// when its file did not load): its series exist from now on.
	ObserveJob(job, kind string)
	// ObserveState: the job's state is now state (a status.Job State).
	// Metrics that read the jobs' status at each scrape (Source) may
	// ignore it.
	ObserveState(job, state string)
	// ObserveLease: whether this process holds the job's lease, and the
	// lease's epoch (the last one held once it is released).
	ObserveLease(job string, held bool, epoch int64)
	// ObserveRestart: the job restarts after a failure.
	ObserveRestart(job string)
	// ObserveTransformError: the job's changed transform file failed to
	// load while its previous version runs (failed), or loads again.
	ObserveTransformError(job string, failed bool)
	// ObserveError: a job-level error of code.
	ObserveError(job, code string)
	// ObserveStall: the job made no progress for StallTimeout while
	// failing, and this process gave its lease back.
	ObserveStall(job string)
	// Forget: the job is gone (its file was removed); its series go.
	Forget(job string)
}

// noMetrics reports nothing.
type noMetrics struct{}

func (noMetrics) ObserveJob(string, string)          {}
func (noMetrics) ObserveState(string, string)        {}
func (noMetrics) ObserveLease(string, bool, int64)   {}
func (noMetrics) ObserveRestart(string)              {}
func (noMetrics) ObserveTransformError(string, bool) {}
func (noMetrics) ObserveError(string, string)        {}
func (noMetrics) ObserveStall(string)                {}
func (noMetrics) Forget(string)                      {}

// Config configures a Supervisor.
type Config struct {
	Driver JobDriver
	Logger hclog.Logger
	// RestartMin and RestartMax bound the restart backoff of a failing job
	// (defaults DefaultRestartMin, DefaultRestartMax).
	RestartMin, RestartMax time.Duration
	// ReleaseTimeout bounds releasing a lease after a job stopped
	// (default 5s).
	ReleaseTimeout time.Duration
	// Metrics, when set, receives job states, restarts and lease state.
	Metrics Metrics
	// Holder is this process's lease holder identity, shown in /status for
	// the jobs it runs.
	Holder string
	// Probe, when set, is part of Ready: it checks that the servers the
	// jobs need are reachable (a few seconds at most, bounded by ctx).
	Probe func(ctx context.Context) error
	// ProbeTTL is how long a Probe result is reused (default 2s; see
	// Ready and ReadyNow).
	ProbeTTL time.Duration
	// StallAfter makes Ready fail when a following job's durable position
	// is more than this far behind the change stream (default 5m).
	StallAfter time.Duration
	// LostPause is how long a job that lost its lease waits before it
	// stands by again (jittered by up to a fifth; 0: not at all). A holder
	// that lost its lease was most likely the stalled one; giving the
	// other pods a head start (one lease period is right) lets a healthy
	// standby take over instead of the same pod winning the lease back at
	// once.
	LostPause time.Duration
	// Holders, when set, returns who holds each job's lease (job name ->
	// holder), read every HoldersInterval (default 2s) while a job stands
	// by, so /status can name the pod a standby waits for without I/O.
	Holders         func(ctx context.Context) (map[string]string, error)
	HoldersInterval time.Duration
	// Peers, when set, counts the live processes (this one included) that
	// run the jobs, read every BalanceInterval (default 10s): this process
	// then holds at most its fair share (FairShare, see balance.go).
	Peers           func(ctx context.Context) (int, error)
	BalanceInterval time.Duration
	// HoldOff is how long a standby at or above its share, or a job just
	// given back, waits before taking a free lease (default 30s: a lease
	// period).
	HoldOff time.Duration
	// StallTimeout is how long a held job may make no progress while its
	// source or destination keeps failing before this process gives its
	// lease to another pod (0: never).
	StallTimeout time.Duration
	// Headroom, when set, reads the oplog's window and every job's
	// recorded position, every HeadroomInterval (default
	// DefaultHeadroomInterval): /status and the metrics then show each
	// job's position age and headroom, and a job whose headroom falls
	// under a quarter of the window is logged at warn.
	Headroom         func(ctx context.Context) (Headroom, error)
	HeadroomInterval time.Duration
	// MaxStarts is how many jobs may be in their start at once (default
	// DefaultMaxStarts): from taking the lease to reading its change
	// stream or being paused, which is when a job prepares its
	// destination (index settings), reads its state and opens its stream
	// (a reindex at start goes on past it: status.JobStats.Started).
	// Hundreds of jobs starting together would wait on MongoDB's
	// connection pool and Meilisearch's task queue all at once; the others
	// hold their leases meanwhile, shown "queued". A job whose destination
	// fails to prepare gives its slot up while it retries with backoff.
	MaxStarts int
}

// Supervisor runs every job in its own goroutine: standby (waiting for the
// lease), run, back to standby when the lease is lost; other failures restart
// the job with exponential backoff and jitter; a job that cannot load fails
// alone; a job whose run fails for good (ErrFatal) stays failed and is
// reported on Fatal. Apply starts, restarts and stops jobs as definitions change; Close
// stops them all (each flushes, records and releases its lease).
type Supervisor struct {
	cfg Config
	log hclog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	jobs     map[string]*supervised
	closed   bool
	holders  map[string]string // from cfg.Holders
	headroom headroomState     // from cfg.Headroom
	wg       sync.WaitGroup

	probes probeCache // cfg.Probe's latest result, for Ready and ReadyNow
	bal    balancer   // the other pods, guarded by mu

	fatal chan error // the first job error marked fatal; see Fatal

	starts chan struct{} // one token per job in its start, cfg.MaxStarts at most
}

// ErrFatal marks a run's error after which the job must not run again in
// this process, because the user asked to be told rather than have it
// repaired (HISTORY_LOST with onHistoryLost: fail): the supervisor shows the
// job failed, does not restart it, and reports the error on Fatal. Test it
// with errors.Is; MarkFatal sets it.
var ErrFatal = errors.New("job failed for good")

// MarkFatal returns err marked with ErrFatal; its text, code (errs.CodeOf)
// and chain are err's. nil stays nil.
func MarkFatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err: err}
}

type fatalError struct{ err error }

func (e *fatalError) Error() string        { return e.err.Error() }
func (e *fatalError) Unwrap() error        { return e.err }
func (e *fatalError) Is(target error) bool { return target == ErrFatal }

// supervised is one running job goroutine.
type supervised struct {
	def    JobDef
	cancel context.CancelCauseFunc
	done   chan struct{}
	stats  *SupervisedJob
}

// SupervisedJob is the supervisor's view of one job, read by /status; the
// engine reports its own figures in Stats.
type SupervisedJob struct {
	Name  string
	Kind  string
	Stats *status.JobStats // the engine's, kept across runs
	m     Metrics          // never nil: noMetrics when the supervisor has none

	mu          sync.Mutex
	state       string
	since       time.Time
	restarts    int
	nextRestart time.Time
	lastErr     error
	lastErrAt   time.Time
	epoch       int64
	held        bool
	attempts    int // failed attempts to prepare the destination, this run
	loadErr     error
	loadErrAt   time.Time
	// waiting is why a standby job waits for a process with a newer
	// transform rather than for the lease ("" otherwise); waitLogged the
	// last reason logged, so a wait is logged once, not at every poll.
	waiting    string
	waitLogged string
	// Hand-over: runCancel ends the run under the lease (set while it
	// runs); pauseUntil holds off the next take after a hand-over; heldAt
	// is when the lease was taken. The stall watch: the last progress seen
	// (lastProgress at progressAt, the engine's retries then) and how many
	// stall hand-overs in a row.
	runCancel    context.CancelCauseFunc
	pauseUntil   time.Time
	heldAt       time.Time
	lastProgress progress
	progressAt   time.Time
	retriesAt    int64
	stalls       int
	// slot is the start slot of the current run (nil before the first):
	// a failure to prepare the destination frees it.
	slot *startSlot
}

// SupervisedSnapshot is a copy of a SupervisedJob at one instant.
type SupervisedSnapshot struct {
	Name        string
	State       string
	Since       time.Time
	Restarts    int
	NextRestart time.Time // zero unless State is restarting
	LastError   string
	LastErrorAt time.Time
	Code        string // code of LastError (errs.CodeOf)
	Held        bool   // this process holds the job's lease
	Epoch       int64  // lease epoch while held
	Attempts    int    // failed attempts to prepare the destination, this run
	// Waiting is why a standby job waits for a process with a newer
	// transform ("" when it waits for the lease, or is not standing by).
	Waiting string
	// TransformError is the job's file's failure to load while the
	// previous version runs ("" when the file in effect is the latest).
	TransformError     string
	TransformErrorCode string
	TransformErrorAt   time.Time
}

// New returns a supervisor with no jobs; call Apply to start some.
func New(cfg Config) *Supervisor {
	if cfg.RestartMin <= 0 {
		cfg.RestartMin = DefaultRestartMin
	}
	if cfg.RestartMax <= 0 {
		cfg.RestartMax = DefaultRestartMax
	}
	if cfg.RestartMax < cfg.RestartMin {
		cfg.RestartMax = cfg.RestartMin
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = DefaultStallAfter
	}
	if cfg.HoldersInterval <= 0 {
		cfg.HoldersInterval = 2 * time.Second
	}
	if cfg.HeadroomInterval <= 0 {
		cfg.HeadroomInterval = DefaultHeadroomInterval
	}
	if cfg.ProbeTTL <= 0 {
		cfg.ProbeTTL = DefaultProbeTTL
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.BalanceInterval <= 0 {
		cfg.BalanceInterval = DefaultBalanceInterval
	}
	if cfg.HoldOff <= 0 {
		cfg.HoldOff = DefaultHoldOff
	}
	if cfg.MaxStarts <= 0 {
		cfg.MaxStarts = DefaultMaxStarts
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Supervisor{
		cfg:    cfg,
		log:    cfg.Logger,
		ctx:    ctx,
		cancel: cancel,
		jobs:   map[string]*supervised{},
		fatal:  make(chan error, 1),
		starts: make(chan struct{}, cfg.MaxStarts),
	}
	if cfg.Holders != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchHolders()
		}()
	}
	if cfg.Headroom != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchHeadroom()
		}()
	}
	if cfg.Peers != nil || cfg.StallTimeout > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchBalance()
		}()
	}
	return s
}

// watchHolders refreshes who holds the leases of standing-by jobs.
func (s *Supervisor) watchHolders() {
	t := time.NewTicker(s.cfg.HoldersInterval)
	defer t.Stop()
	for {
		standby := false
		for _, j := range s.Jobs() {
			standby = standby || j.State == StateStandby
		}
		if standby {
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HoldersInterval)
			h, err := s.cfg.Holders(ctx)
			cancel()
			if err == nil {
				s.mu.Lock()
				s.holders = h
				s.mu.Unlock()
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holderOf is the last known holder of a job's lease (standby jobs).
func (s *Supervisor) holderOf(job string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[job]
}

// Fatal delivers the error of the first job that failed for good (its run
// returned an error marked with MarkFatal), once; later ones are only
// logged. The job then shows as failed (/status, /readyz, metrics) and is
// not restarted; the other jobs go on. The supervisor does not stop by
// itself: the caller decides, and "meilistream run" shuts down as on
// SIGTERM (Close) and exits 1.
func (s *Supervisor) Fatal() <-chan error { return s.fatal }

// errStopped is the cancellation cause of a job stopped by Apply or Close.
var errStopped = errors.New("job stopped")

// Apply makes the running jobs match defs: jobs not running yet start, jobs
// whose Hash changed restart (stop, flush, release, start again), jobs no
// longer listed stop. It returns once stopped jobs have stopped.
func (s *Supervisor) Apply(defs []JobDef) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	want := map[string]JobDef{}
	for _, d := range defs {
		want[d.Name] = d
	}
	var stopping []*supervised
	for name, j := range s.jobs {
		d, ok := want[name]
		if ok && d.Hash == j.def.Hash && errText(d.Err) == errText(j.def.Err) {
			continue
		}
		if ok {
			s.log.Info("job definition changed, restarting it", "job", name)
		} else {
			s.log.Info("job removed, stopping it", "job", name)
		}
		j.cancel(errStopped)
		stopping = append(stopping, j)
		delete(s.jobs, name)
	}
	s.mu.Unlock()
	for _, j := range stopping {
		<-j.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, d := range defs {
		if _, ok := s.jobs[d.Name]; ok {
			continue
		}
		s.startLocked(d, s.statsFor(d, stopping))
	}
	for _, j := range stopping {
		if _, ok := want[j.def.Name]; !ok {
			j.stats.m.Forget(j.def.Name)
		}
	}
	for _, d := range defs {
		if j, ok := s.jobs[d.Name]; ok && j.stats.setTransformErr(d.LoadErr) && d.LoadErr != nil {
			s.log.Error("transform file failed to load; the previous version keeps running",
				"job", d.Name, "error", d.LoadErr)
		}
	}
}

// statsFor keeps a restarted job's stats (restarts, engine counters).
func (s *Supervisor) statsFor(d JobDef, old []*supervised) *SupervisedJob {
	for _, j := range old {
		if j.def.Name == d.Name && j.def.Kind == d.Kind {
			return j.stats
		}
	}
	return &SupervisedJob{Name: d.Name, Kind: d.Kind, Stats: status.NewJobStats(), m: s.cfg.Metrics}
}

func (s *Supervisor) startLocked(d JobDef, st *SupervisedJob) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	j := &supervised{def: d, cancel: cancel, done: make(chan struct{}), stats: st}
	st.m.ObserveJob(d.Name, d.Kind)
	st.setState(StateStarting)
	s.jobs[d.Name] = j
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(j.done)
		s.loop(ctx, j)
	}()
}

// Jobs returns a snapshot of every job, sorted by name.
func (s *Supervisor) Jobs() []SupervisedSnapshot {
	s.mu.Lock()
	out := make([]SupervisedSnapshot, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, j.stats.Snapshot())
	}
	s.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Close stops every job and waits for them: each one's engine flushes and
// records, then its lease is released. It gives up waiting when ctx ends and
// returns ctx's error then. Idempotent.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel(errStopped)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return s.unfinished(ctx.Err())
	}
}

// unfinished is Close's error when ctx ended first: it wraps cause and
// names each job that had not stopped, in what state, and what was pending:
// "people (following): 3s of changes not durable, last error
// FAILED: send batch: ...; position left at T: the next holder replays
// the changes after it".
func (s *Supervisor) unfinished(cause error) error {
	var parts []string
	for _, j := range s.Status() {
		if j.State == StateStopped {
			continue
		}
		var what []string
		if j.LagSeconds != nil && *j.LagSeconds > 0 {
			what = append(what, fmt.Sprintf("%s of changes not durable", (time.Duration(*j.LagSeconds*float64(time.Second))).Round(time.Millisecond)))
		}
		if j.Reindex != nil {
			what = append(what, fmt.Sprintf("reindex at %d of ~%d documents (resumes from its checkpoint)", j.Reindex.Done, j.Reindex.TotalEstimate))
		}
		if j.LastError != nil {
			what = append(what, "last error "+j.LastError.Code+": "+firstLine(j.LastError.Message))
		}
		if j.PositionTime != nil {
			what = append(what, "position left at "+j.PositionTime.UTC().Format(time.RFC3339)+": the next holder replays the changes after it")
		} else {
			what = append(what, "no position recorded yet")
		}
		parts = append(parts, fmt.Sprintf("%s (%s): %s", j.Name, j.State, strings.Join(what, "; ")))
	}
	if len(parts) == 0 {
		return fmt.Errorf("%w: releasing the leases did not finish", cause)
	}
	return fmt.Errorf("%w: jobs not finished: %s", cause, strings.Join(parts, " | "))
}

// loop is one job's life: standby, run, and per the outcome back to standby,
// restart after a backoff, wait for a new definition, or stay failed for
// good (ErrFatal, reported on Fatal).
func (s *Supervisor) loop(ctx context.Context, j *supervised) {
	st := j.stats
	log := s.log.With("job", j.def.Name)
	defer st.setState(StateStopped)
	if j.def.Err != nil {
		// A bad definition fails alone; Apply replaces it when fixed.
		log.Error("job cannot start", "error", j.def.Err)
		st.failed(j.def.Err)
		<-ctx.Done()
		return
	}
	var pres Presence
	if pk, ok := s.cfg.Driver.(PresenceKeeper); ok {
		pres = pk.KeepPresence(j.def)
	}
	leave := func() {
		if pres != nil {
			pres.Close()
		}
	}
	defer leave()
	failures := 0
	for ctx.Err() == nil {
		// "standby" only once the lease is known held by another process
		// (or the job waits for a newer pod): a job that cannot even ask
		// shows its error instead.
		if sn := st.Snapshot(); sn.Waiting == "" && sn.State != StateStalled && st.pausedFor() <= 0 {
			st.setState(StateStarting)
		}
		h, err := s.cfg.Driver.Standby(ctx, j.def, &standing{s: s, j: j, log: log, pres: pres})
		if ctx.Err() != nil {
			if h != nil {
				s.release(log, h)
			}
			return
		}
		if err != nil {
			failures++
			if errs.CodeOf(err) == errs.ConfigInvalid {
				// Refused credentials: retried at the longest backoff, the
				// error visible meanwhile (a user created late, say).
				failures = max(failures, 64)
			}
			st.fail(err)
			if !s.backoff(ctx, log, st, failures, err) {
				return
			}
			continue
		}
		started := time.Now()
		st.setHeld(true, h.Epoch())
		st.setState(StateRunning)
		if pres != nil {
			pres.Waiting("")
		}
		log.Info("lease taken, job running", "epoch", h.Epoch())
		rctx, rcancel := context.WithCancelCause(ctx)
		st.setRunCancel(rcancel)
		err = s.runHeld(rctx, j, h)
		st.setRunCancel(nil)
		given := context.Cause(rctx)
		rcancel(nil)
		if !errors.Is(err, engine.ErrTransformOlder) {
			st.waitOver()
		}
		st.setState(StateStopping)
		s.release(log, h)
		st.setHeld(false, 0)
		if ctx.Err() == nil && (errors.Is(given, errHandOver) || errors.Is(given, errStalled)) {
			// Given back (balance, or a stall): the run flushed and
			// recorded like at any stop. Hold off, so another pod takes
			// the lease first.
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, given) {
				log.Warn("job stopped with an error while being given back", "error", err)
			}
			failures = 0
			if errors.Is(given, errStalled) {
				st.setState(StateStalled)
			} else {
				st.setState(StateStandby)
			}
			continue
		}
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errStopped) {
				log.Warn("job stopped with an error", "error", err)
				st.fail(err)
			}
			return
		}
		switch code := errs.CodeOf(err); {
		case errors.Is(err, engine.ErrTransformOlder):
			// No failure: a live process runs the newer transform, and
			// took the lease meanwhile or will. Stand by for it (the
			// lease is released); Standby asks again before it takes
			// the lease, so the wait neither bumps its epoch nor counts
			// an error.
			s.standingBy(log, st, pres, err)
			failures = 0
			t := time.NewTimer(s.cfg.RestartMin)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		case errors.Is(err, ErrFatal):
			// The user asked to be told (onHistoryLost: fail): no restart
			// in a loop; the lease is released, so a standby pod takes it
			// and meets the same until an operator repairs the job.
			log.Error("job failed for good, not restarting it; meilistream shuts down", "error", err)
			st.failed(err)
			leave()
			select {
			case s.fatal <- err:
			default: // another job's is already there
			}
			<-ctx.Done()
			return
		case code == errs.LeaseLost:
			// Someone else holds it now: stand by, without counting a failure.
			log.Warn("lease lost, standing by", "error", err, "after", s.cfg.LostPause.String())
			st.fail(err)
			failures = 0
			if s.cfg.LostPause > 0 {
				st.setState(StateStandby)
				d := s.cfg.LostPause - time.Duration(float64(s.cfg.LostPause)*0.2*rand.Float64())
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			continue
		case code == errs.ConfigInvalid:
			err = restartHint(err)
			log.Error("job configuration invalid, not restarting until its definition changes or meilistream restarts", "error", err)
			st.failed(err)
			leave()
			<-ctx.Done()
			return
		}
		if err == nil {
			err = errs.New(errs.Failed, j.def.Name, "job ended without error; restarting it")
		}
		// A run that lasted longer than the backoff cap was healthy: start
		// the count again so one failure a day does not wait a minute.
		if time.Since(started) > s.cfg.RestartMax {
			failures = 0
		}
		failures++
		st.fail(err)
		if !s.backoff(ctx, log, st, failures, err) {
			return
		}
	}
}

// standingBy shows a job standing by: for the lease another process holds
// (why is RUNNING), or for a process with a newer transform (why wraps
// engine.ErrTransformOlder: not an error, nothing counted). Each is logged
// once, not at every poll.
func (s *Supervisor) standingBy(log hclog.Logger, st *SupervisedJob, pres Presence, why error) {
	reason := ""
	if errors.Is(why, engine.ErrTransformOlder) {
		reason = olderReason(why)
	}
	if pres != nil {
		pres.Waiting(reason)
	}
	if !st.standby(reason) {
		return
	}
	if reason != "" {
		log.Info("standing by for a process with a newer transform", "reason", reason)
		return
	}
	log.Info("lease held by another process; standing by", "lease", why.Error())
}

// standing is the supervisor's side of one job's Standby.
type standing struct {
	s    *Supervisor
	j    *supervised
	log  hclog.Logger
	pres Presence
}

func (w *standing) Held(why error) { w.s.standingBy(w.log, w.j.stats, w.pres, why) }

func (w *standing) Stats() *status.JobStats { return w.j.stats.Stats }

func (w *standing) HoldOff() time.Duration { return w.s.holdOff(w.j) }

// olderReason is what an error wrapping engine.ErrTransformOlder says, as
// /status shows it: the message of the engine's *errs.Error around it,
// without the sentinel's text.
func olderReason(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if ee, ok := e.(*errs.Error); ok && ee.Msg != "" {
			return ee.Msg
		}
	}
	return err.Error()
}

// settingFiles are the process-wide settings a job's CONFIG_INVALID may
// name (errs.Error.Setting) that can also be read from a file
// (<NAME>_FILE), to name both in the hint.
var settingFiles = map[string]bool{
	"MEILISTREAM_MEILI_API_KEY": true,
	"MEILISTREAM_REPLICA_URI":   true,
	"MEILISTREAM_MONGODB_URI":   true,
}

// restartHint adds "fix X (or its _FILE) and restart meilistream" to a
// job's CONFIG_INVALID error that names a process-wide setting
// (errs.Error.Setting: a Meilisearch key refused, no replica configured):
// the settings are read once at start, so no edit of the job's transform
// fixes it.
func restartHint(err error) error {
	setting := errs.SettingOf(err)
	if setting == "" {
		return err
	}
	if settingFiles[setting] {
		return advise(err, "fix %s (or %s_FILE) and restart meilistream: it is read only at start", setting, setting)
	}
	return advise(err, "fix %s and restart meilistream: it is read only at start", setting)
}

// advised is an error followed by what to do about it; its code, job and
// chain are the error's.
type advised struct {
	err    error
	advice string
}

func advise(err error, format string, args ...any) error {
	return &advised{err: err, advice: fmt.Sprintf(format, args...)}
}

func (a *advised) Error() string { return a.err.Error() + "; " + a.advice }
func (a *advised) Unwrap() error { return a.err }

// runHeld keeps the lease and runs the job under it. A panic of the run
// (in its own goroutine) is a failure of that job, restarted like any other,
// not the end of every job of the process.
func (s *Supervisor) runHeld(ctx context.Context, j *supervised, h HeldLease) (err error) {
	kctx, stop := h.Keep(ctx)
	defer stop()
	slot, err := s.takeStart(kctx, j.stats)
	if err != nil {
		return errs.WithJob(j.def.Name, err)
	}
	defer slot.free()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("job panicked", "job", j.def.Name, "panic", r, "stack", string(debug.Stack()))
			err = errs.New(errs.Failed, j.def.Name, "panic: %v", r)
		}
	}()
	err = s.cfg.Driver.Run(kctx, j.def, h, j.stats)
	if err == nil && kctx.Err() != nil && ctx.Err() == nil {
		// The lease went away while Run was ending: report it as such.
		if c := context.Cause(kctx); c != nil && errors.Is(c, errs.ErrLeaseLost) {
			return c
		}
	}
	if err != nil && errs.CodeOf(err) != errs.LeaseLost && ctx.Err() == nil {
		if c := context.Cause(kctx); c != nil && errors.Is(c, errs.ErrLeaseLost) {
			// Run failed because its context ended on lease loss (say, a
			// cancelled write): that is a lost lease, not a failure.
			return errs.Wrap(errs.LeaseLost, j.def.Name, err, "lease lost while running")
		}
	}
	return errs.WithJob(j.def.Name, err)
}

// release gives the lease up on a context of its own: the job's is
// cancelled by then, and an unreleased lease keeps standbys waiting a whole
// lease period.
func (s *Supervisor) release(log hclog.Logger, h HeldLease) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReleaseTimeout)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		log.Warn("release lease", "error", err)
	}
}

// backoff waits before the failures-th restart; false when ctx ended.
func (s *Supervisor) backoff(ctx context.Context, log hclog.Logger, st *SupervisedJob, failures int, err error) bool {
	d := RestartDelay(s.cfg.RestartMin, s.cfg.RestartMax, failures, rand.Float64())
	next := time.Now().Add(d)
	st.restarting(next)
	in := d.Round(time.Millisecond).String()
	switch {
	case errors.Is(err, engine.ErrInvalidated):
		// A drop or rename of the source is a normal path (the job
		// reindexes what the collection then holds), not an error to page
		// anyone about.
		log.Warn("source collection dropped or renamed: restarting the job, which reindexes what the collection now holds", "error", err, "in", in)
	case failures == 1 && transient(err):
		// One timed-out or dropped exchange with a server is the weather
		// of a busy cluster, not a failure to page anyone about: the next
		// attempt usually passes. The second in a row is an error.
		log.Warn("job could not reach a server, trying again", "error", err, "in", in)
	default:
		log.Error("job failed, restarting", "error", err, "restarts", failures, "in", in)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// transient reports an error that a network timeout or a dropped
// connection caused, as the drivers wrap them (a net.Error, or a
// deadline that ran out).
func transient(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// RestartDelay is the wait before the n-th consecutive restart (n >= 1):
// min doubled n-1 times, capped at max, with up to 20% jitter taken off
// (r in [0,1)) so that pods restarting together spread out.
func RestartDelay(min, max time.Duration, n int, r float64) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d - time.Duration(float64(d)*0.2*r)
}

// errText is err as a person reads it, code included, to tell whether an
// error changed.
func errText(err error) string { return errs.Format(err) }

// setState sets the job's state; true when it changed.
func (j *SupervisedJob) setState(state string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.setStateLocked(state)
}

// failed records err and the "failed" state in one locked step, so /status
// never shows the error with the state before it (a bad definition seen as
// "starting" with CONFIG_INVALID).
func (j *SupervisedJob) failed(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLocked(err)
	j.setStateLocked(StateFailed)
}

// setStateLocked is setState with j.mu held.
func (j *SupervisedJob) setStateLocked(state string) bool {
	changed := j.state != state
	if changed {
		j.state = state
		j.since = time.Now()
		// "running" is refined into reindexing or following by the
		// engine's phase: metrics that show it read the status at each
		// scrape (httpapi.Metrics.SetStatus).
		if state != StateRunning {
			j.m.ObserveState(j.Name, state)
		}
	}
	if state != StateRestarting {
		j.nextRestart = time.Time{}
	}
	if state != StateRunning {
		j.attempts = 0
	}
	if state != StateStandby {
		j.waiting = ""
	}
	return changed
}

// waitOver notes that the job ran: a later wait for a newer transform is
// logged again, even for the same reason.
func (j *SupervisedJob) waitOver() {
	j.mu.Lock()
	j.waitLogged = ""
	j.mu.Unlock()
}

// standby sets the "standby" state, waiting for the reason given ("" for
// the lease); true when it should be logged: a new state, or a new reason
// to wait for a newer transform.
func (j *SupervisedJob) standby(reason string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	changed := j.setStateLocked(StateStandby)
	j.waiting = reason
	if reason == "" {
		return changed
	}
	logIt := reason != j.waitLogged
	j.waitLogged = reason
	return logIt
}

// setTransformErr records that the job's file failed to load (err) or
// loaded (nil) while this version runs; true when that changed, counted in
// meilistream_transform_reload_errors_total.
func (j *SupervisedJob) setTransformErr(err error) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if errText(err) == errText(j.loadErr) {
		return false
	}
	j.loadErr = err
	if err != nil {
		j.loadErrAt = time.Now()
	}
	j.m.ObserveTransformError(j.Name, err != nil)
	return true
}

// prepared records the outcome of one attempt to prepare the job's
// destination (the engine retries it): a failure is the job's last error
// and counts an attempt, shown in /status while the job is "starting"; a
// success ends the count.
func (j *SupervisedJob) prepared(err error) {
	if err != nil {
		j.mu.Lock()
		slot := j.slot
		j.mu.Unlock()
		slot.free()
	}
	if err == nil {
		j.mu.Lock()
		j.attempts = 0
		j.mu.Unlock()
		return
	}
	j.fail(err)
	j.mu.Lock()
	j.attempts++
	j.mu.Unlock()
}

func (j *SupervisedJob) setHeld(held bool, epoch int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if held {
		j.held, j.epoch, j.heldAt = true, epoch, time.Now()
	} else {
		j.held = false // the epoch stays: the last one held
	}
	j.m.ObserveLease(j.Name, held, j.epoch)
}

// setRunCancel sets (or, nil, clears) what ends the run under the lease.
func (j *SupervisedJob) setRunCancel(c context.CancelCauseFunc) {
	j.mu.Lock()
	j.runCancel = c
	j.mu.Unlock()
}

// fail records a job-level error (a run that ended, a lost lease, a bad
// definition) and counts it in meilistream_errors_total by code.
func (j *SupervisedJob) fail(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.failLocked(err)
}

// failLocked is fail with j.mu held.
func (j *SupervisedJob) failLocked(err error) {
	j.lastErr, j.lastErrAt = err, time.Now()
	j.m.ObserveError(j.Name, string(errs.CodeOf(err)))
}

func (j *SupervisedJob) restarting(next time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.restarts++
	j.m.ObserveRestart(j.Name)
	if j.state != StateRestarting {
		j.state, j.since = StateRestarting, time.Now()
		j.m.ObserveState(j.Name, StateRestarting)
	}
	j.nextRestart = next
}

// Snapshot copies the job's state.
func (j *SupervisedJob) Snapshot() SupervisedSnapshot {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := SupervisedSnapshot{
		Name:        j.Name,
		State:       j.state,
		Since:       j.since,
		Restarts:    j.restarts,
		NextRestart: j.nextRestart,
		LastErrorAt: j.lastErrAt,
		Held:        j.held,
		Epoch:       j.epoch,
		Attempts:    j.attempts,
		Waiting:     j.waiting,
	}
	if j.loadErr != nil {
		s.TransformError, s.TransformErrorAt = j.loadErr.Error(), j.loadErrAt
		s.TransformErrorCode = string(errs.CodeOf(j.loadErr))
	}
	if j.lastErr != nil {
		s.LastError = j.lastErr.Error()
		s.Code = string(errs.CodeOf(j.lastErr))
	}
	return s
}
