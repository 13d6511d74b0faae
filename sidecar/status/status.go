package status

import (
	"context"
	"encoding/json"
	"time"
)

// Source is what the HTTP server asks about the jobs. The supervisor
// implements it.
type Source interface {
	// Status returns every job's status, sorted by name. It is called on
	// every GET /status and must answer from memory, without I/O.
	Status() []Job
	// Ready returns nil when the sidecar can do its work: MongoDB (and,
	// when a job needs them, Meilisearch and the replica) reachable, no job
	// failed, no change stream stalled. Otherwise an error saying what is
	// wrong (never a secret), shown in the 503 answer of /readyz. ctx bounds
	// any check it makes (a few seconds).
	Ready(ctx context.Context) error
}

// QuickReadier is optionally implemented by a Source whose Ready does
// I/O (the supervisor probes MongoDB and Meilisearch). GET /status uses
// ReadyNow, so it answers at once even while a server is down and a probe
// would take seconds; GET /readyz still calls Ready.
type QuickReadier interface {
	// ReadyNow is Ready from memory: the latest probe's result, however
	// old, refreshed in the background when stale. It waits (bounded by
	// ctx) only when no probe has finished yet.
	ReadyNow(ctx context.Context) error
}

// OplogWindower is optionally implemented by a Source that reads the
// source's oplog window: GET /status and /metrics show it.
type OplogWindower interface {
	// OplogWindow returns the newest minus the oldest entry of the
	// source's oplog in seconds, from memory; false while unknown (not
	// read yet, or the user may not read local.oplog.rs).
	OplogWindow() (seconds float64, ok bool)
}

// The states of a job, Job.State.
const (
	Starting   = "starting"
	Standby    = "standby"
	Reindexing = "reindexing"
	Following  = "following"
	Restarting = "restarting"
	Failed     = "failed"
	Stopping   = "stopping"
	Stopped    = "stopped"
	Stalled    = "stalled"
	// Unavailable: the job holds its lease but cannot prepare its
	// destination (the server does not answer, refuses): retried with
	// backoff, the reason in LastError and Attempts.
	Unavailable = "unavailable"
	// Paused: the job holds its lease and its position and sends nothing
	// until `meilistream resume` (the pause is recorded in MongoDB).
	Paused = "paused"
	// Queued: the job holds its lease (renewed as usual) and waits for
	// the jobs of this process that are starting to follow, since at most
	// a few start at once (supervisor.Config.MaxStarts).
	Queued = "queued"
)

// States lists every Job.State, in the order a job meets them.
var States = []string{Starting, Queued, Unavailable, Standby, Reindexing, Following, Paused, Stalled, Restarting, Failed, Stopping, Stopped}

// Job is one job in GET /status (a JSON array under "jobs"). Field
// names are snake_case and stable: operators script against them.
type Job struct {
	// Name is the job's name (its transform file's name).
	Name string `json:"name"`
	// Kind is "search" (into Meilisearch) or "mirror" (into the replica).
	Kind string `json:"kind"`
	// State is one of: "starting" (asking for its lease, or preparing its
	// destination), "queued" (holding its lease, waiting for other jobs of
	// this process to finish starting), "unavailable" (holding the lease, its destination
	// cannot be prepared: see LastError and Attempts, retried with
	// backoff),
	// "standby" (another process holds the lease, or, see Waiting, this
	// one leaves the job to a process with a newer transform),
	// "reindexing",
	// "following", "restarting" (waiting after a failure, see
	// NextRestart), "stalled" (reindexing or following, but its pending
	// work has not moved for longer than its watchdog's bound: see Stall;
	// or this process gave the lease back after no progress while its
	// servers kept failing, and holds off taking it again: see
	// LastError), "failed" (cannot run until fixed), "stopping",
	// "stopped".
	State string `json:"state"`
	// Waiting says why a standby job waits for another process rather
	// than for the lease: its transform is the one the recorded transform
	// replaced, and a live process runs the recorded one (a rollout in
	// progress). It is no error: the job takes over by itself once its
	// file updates or no live process runs the newer transform.
	Waiting string `json:"waiting,omitempty"`
	// Holder is the lease holder ("host:pid:random"): this process when
	// reindexing or following, another one on standby; empty if unknown.
	Holder string `json:"holder,omitempty"`
	// Epoch is the lease's epoch (incremented at every takeover).
	Epoch int64 `json:"epoch,omitempty"`
	// Mode is how the job learns of changes in this process, "stream" or
	// "scan" (the pick of a job of mode auto); empty before it ran here.
	Mode string `json:"mode,omitempty"`
	// Scan is a scan-mode job's scan while this process holds it: its
	// recorded cursor, the scan's lag (now less the cursor's key, for a
	// date key), the documents it cannot read (ScanState).
	Scan *ScanState `json:"scan,omitempty"`
	// LagSeconds is the job's lag, one definition everywhere (this field,
	// meilistream_follow_lag_seconds, the log): the age of the oldest
	// change its stream delivered that is not yet durable in the
	// destination (its cluster wall time against this process's clock),
	// or, when larger, how far what is durable is behind the source's
	// newest cluster time (changes not read yet); 0 when everything is
	// durable. null when the job does not
	// follow its stream in this process (standby, starting, failed...).
	LagSeconds *float64 `json:"lag_seconds"`
	// PositionTime is the cluster time of the last recorded position.
	PositionTime *time.Time `json:"position_time,omitempty"`
	// PositionAgeSeconds is how old the job's recorded position is in
	// cluster time (the oplog's newest entry minus the position), and
	// HeadroomSeconds how long it can still resume from it (the oplog's
	// window minus that age: the position minus the oldest entry; under
	// 0 the position fell out of the oplog, HISTORY_LOST). Whoever holds
	// the job; absent while the window or the position is unknown.
	PositionAgeSeconds *float64 `json:"position_age_seconds,omitempty"`
	HeadroomSeconds    *float64 `json:"headroom_seconds,omitempty"`
	// Stall says what is pending and since when, while State is
	// "stalled" (nil otherwise).
	Stall *Stall `json:"stall,omitempty"`
	// Reindex is the progress of a running reindex (nil otherwise).
	Reindex *Reindex `json:"reindex,omitempty"`
	// Verify is the background verify of a job with verify: true, while
	// this process holds it: the pass under way and the last complete
	// one (nil otherwise).
	Verify *Verify `json:"verify,omitempty"`
	// Counters are totals since this process started.
	Counters Counters `json:"counters"`
	// Queue is what the job has enqueued in Meilisearch (its index and a
	// reindex's staged index) and not yet seen processed, while it runs;
	// the sink keeps it under a bound. Absent for a mirror job.
	Queue *Queue `json:"queue,omitempty"`
	// LastError is the job's last error, if any (kept after recovery).
	LastError *ErrorInfo `json:"last_error,omitempty"`
	// Restarts counts restarts after failures since this process started.
	Restarts int `json:"restarts"`
	// NextRestart is when a "restarting" job tries again.
	NextRestart *time.Time `json:"next_restart,omitempty"`
	// Attempts counts the failed attempts to prepare the destination of a
	// "starting" job that holds its lease (the engine retries with backoff;
	// LastError is the latest failure). 0 otherwise.
	Attempts int `json:"attempts,omitempty"`
	// TransformError is set while the job's transform file, changed,
	// fails to load: the previous version keeps running (State is its
	// state) until the file is fixed.
	TransformError *ErrorInfo `json:"transform_error,omitempty"`
}

// Verify is a job's background verify in /status.
type Verify struct {
	// Running says a pass is under way: since StartedAt, Checked
	// documents of the collection compared so far.
	Running   bool       `json:"running"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	Checked   int64      `json:"checked"`
	// Last is the last complete pass, nil before the first.
	Last *VerifyPass `json:"last,omitempty"`
}

// VerifyPass is what a complete background verify pass found.
type VerifyPass struct {
	DoneAt   time.Time `json:"done_at"`
	Missing  int64     `json:"missing"`
	Stale    int64     `json:"stale"`
	Extra    int64     `json:"extra"`
	Repaired int64     `json:"repaired"`
}

// Reindex is a running reindex's progress. Rate and ETASeconds are null
// until known (the first progress measure a few seconds in): a 0 there
// would read as "stalled" or "done".
type Reindex struct {
	Done          int64    `json:"done"`           // documents read so far (a resumed checkpoint's included)
	TotalEstimate int64    `json:"total_estimate"` // the collection's estimated count at the start
	Rate          *float64 `json:"rate"`           // documents per second in this run; null until measured
	ETASeconds    *float64 `json:"eta_seconds"`    // remaining at Rate; null until known
	Resumed       bool     `json:"resumed"`        // continued from a checkpoint
	// Throttled is what slows the chunks down now; absent when nothing
	// does (the reindex reads as fast as the servers answer).
	Throttled *Throttled `json:"throttled,omitempty"`
}

// Throttled says why a reindex's chunks are slowed down: Reason is
// "rate" (MEILISTREAM_REINDEX_RATE or the job's reindexRate),
// "mongodb_latency" or "meilisearch_backlog" (the brake), Message says it
// for a person ("mongodb latency 850ms > 500ms", "meilisearch backlog 9
// tasks > 6", "easing off after ..." while a braked rate climbs back),
// Rate is the documents per second the chunks go at, Since when Reason
// began.
type Throttled struct {
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Rate    float64   `json:"rate"`
	Since   time.Time `json:"since"`
}

// Counters are a job's document totals since this process started.
type Counters struct {
	Indexed int64 `json:"indexed"` // upserted (durable)
	Deleted int64 `json:"deleted"` // deleted (durable)
	Skipped int64 `json:"skipped"` // kept out by the transform
	Errors  int64 `json:"errors"`  // per-document errors recorded
	Changes int64 `json:"changes"` // change events read from the stream (durable or not yet)
	// Related changes: fan-outs started (one per batch of related
	// changes and dependency field) and the dependents they sent again
	// (durable).
	FanOuts int64 `json:"fan_outs"`
	Resent  int64 `json:"resent"`

	// SkippedUnchanged are updates not sent because they could not
	// change the document the destination holds (skipUnchanged).
	SkippedUnchanged int64 `json:"skipped_unchanged"`

	// Chunks are the chunks of the job's shared reindexes this process
	// read, transformed and handed over (holder or standby).
	Chunks int64 `json:"chunks"`
	// ChunksRedone are the chunks of the job's shared reindexes whose
	// result this process, the holder, could not use (a related
	// collection changed in its window, a claim taken over, a write too
	// large to store) and read and transformed itself.
	ChunksRedone int64 `json:"chunks_redone"`
}

// Queue is what a job has enqueued in Meilisearch and not yet seen
// processed.
type Queue struct {
	Tasks int   `json:"tasks"` // tasks enqueued or processing
	Bytes int64 `json:"bytes"` // bytes of their requests
}

// Stall is a stalled job's pending work: what it is (changes waiting
// for a flush, batches in the destination's hands, fan-outs, marks not
// yet read back), since when none of it moved, and the bound it passed.
type Stall struct {
	Pending      string    `json:"pending"`
	Since        time.Time `json:"since"`
	BoundSeconds float64   `json:"bound_seconds"`
}

// ErrorInfo is an error as /status shows it.
type ErrorInfo struct {
	Code    string    `json:"code"`    // an errs code: FAILED, LEASE_LOST, ...
	Message string    `json:"message"` // never a secret
	At      time.Time `json:"at"`
}

// Report is the whole GET /status answer.
type Report struct {
	Version string    `json:"version"`
	Time    time.Time `json:"time"`
	Ready   bool      `json:"ready"`
	// Process is this process's identity among the pods running the
	// jobs ("host:pid:random", as a lease names its holder).
	Process string `json:"process,omitempty"`
	// OplogWindowSeconds is the source's oplog window (newest minus
	// oldest entry), null while unknown.
	OplogWindowSeconds *float64 `json:"oplog_window_seconds"`
	Jobs               []Job    `json:"jobs"`
	// Config is the configuration in effect, its JSON with secrets masked
	// (the configuration's own MarshalJSON masks them).
	Config json.Marshaler `json:"config,omitempty"`
}
