package status

import (
	"sync"
	"time"

	"github.com/meilistream/meilistream/internal/clip"
	"github.com/meilistream/meilistream/internal/errs"
)

// Phase is what a job's engine is doing.
type Phase string

// The phases a JobStats reports. The supervisor adds its own (standby,
// failed) around them.
const (
	PhaseIdle       Phase = ""
	PhaseReindexing Phase = "reindexing"
	PhaseFollowing  Phase = "following"
	// PhasePaused: `meilistream pause` stopped the job at a batch
	// boundary; it holds its lease and its recorded position.
	PhasePaused Phase = "paused"
)

// JobStats is one job's live figures, written by the engine and read by the
// supervisor for /status and the log. All methods are safe for concurrent
// use; a nil *JobStats ignores writes, so the engine never checks.
type JobStats struct {
	mu sync.Mutex
	s  JobSnapshot
	// Wall times of the first change of each batch not yet durable, in
	// order, and of the batch still being gathered: the lag is the age of
	// the oldest, so it grows while a destination is down. streaming says
	// the engine follows the job's stream (LagReset since the last
	// PhaseIdle): only then is the lag known.
	inflight  []time.Time
	pending   time.Time
	streaming bool
	// unread is the lag of what the source holds and the stream has not
	// read (or not made durable), in seconds, as the engine last measured
	// it against the source's cluster time (LagUnread).
	unread float64
	// started is closed when the phase next becomes following or paused
	// (Started); nil until asked for.
	started chan struct{}
	// startedRun: MarkStarted since the phase was last idle.
	startedRun bool
}

// VerifyProgress is a job's background verify: the pass under way
// (Running, since StartedAt, Checked documents so far) and the last
// complete one (LastDoneAt, what it found).
type VerifyProgress struct {
	Running    bool      `json:"running"`
	StartedAt  time.Time `json:"startedAt"`
	Checked    int64     `json:"checked"`
	LastDoneAt time.Time `json:"lastDoneAt"`
	Missing    int64     `json:"missing"`
	Stale      int64     `json:"stale"`
	Extra      int64     `json:"extra"`
	Repaired   int64     `json:"repaired"`
}

// JobSnapshot is a copy of a JobStats at one instant.
type JobSnapshot struct {
	Phase Phase `json:"phase"`
	// Mode is how the job learns of changes: "stream" or "scan" (the one
	// a job of mode auto picked); "" before the job first ran here.
	Mode string `json:"mode,omitempty"`
	// Scan is a scan-mode job's cursor, lag and counts; nil in stream
	// mode.
	Scan *ScanState `json:"scan,omitempty"`
	// Reindex progress; meaningful while Phase is reindexing, kept after.
	Reindex ReindexProgress `json:"reindex"`
	// LastPosition is the cluster wall time of the last recorded position
	// (zero before the first).
	LastPosition time.Time `json:"lastPosition"`
	// RecordedAt is when (process clock) that position was recorded.
	RecordedAt time.Time `json:"recordedAt"`
	// LagSeconds is the job's lag (status.Job.LagSeconds): the age of the
	// oldest change the stream delivered that is not yet durable, or, when
	// larger, how far what is durable is behind the source's newest
	// change (LagUnread); 0 when all is durable. Snapshot computes it from what LagPending, LagFlushed and
	// LagDurable noted; a value written here is not kept. LagKnown says
	// the engine follows the stream (LagReset was called since the last
	// PhaseIdle); LagSeconds is 0 when it does not.
	LagSeconds float64 `json:"lagSeconds"`
	LagKnown   bool    `json:"lagKnown"`
	Indexed    int64   `json:"indexed"`   // documents upserted (durable)
	Deleted    int64   `json:"deleted"`   // deletes sent (durable)
	Skipped    int64   `json:"skipped"`   // documents the transform kept out
	Errors     int64   `json:"errors"`    // per-document errors recorded
	Changes    int64   `json:"changes"`   // change events read
	Batches    int64   `json:"batches"`   // batches made durable
	FanOuts    int64   `json:"fanOuts"`   // fan-outs of related changes started
	Resent     int64   `json:"resent"`    // documents sent again for a related change
	Retries    int64   `json:"retries"`   // sends or waits retried
	Reindexes  int64   `json:"reindexes"` // reindexes completed
	Chunks     int64   `json:"chunks"`    // chunks of shared reindexes done here (holder or standby)
	// ChunksRedone are chunks of the job's shared reindexes whose result
	// the holder could not use and transformed itself.
	ChunksRedone int64 `json:"chunksRedone"`

	// SkippedUnchanged are updates not sent: they could not change the
	// destination's document (skipUnchanged).
	SkippedUnchanged int64 `json:"skippedUnchanged"`
	// Queue is what the job has enqueued at its destination and not yet
	// seen processed (Meilisearch's tasks); nil for a sink that does not
	// say.
	Queue *Queue `json:"queue,omitempty"`

	// Verify is the background verify's progress and last complete pass
	// (a job with verify: true).
	Verify VerifyProgress `json:"verify"`

	// LastError is the text of the last error (errs.Error's, without code
	// and job), LastErrorCode its code (errs.CodeOf).
	LastError     string    `json:"lastError,omitempty"`
	LastErrorCode string    `json:"lastErrorCode,omitempty"`
	LastErrAt     time.Time `json:"lastErrorAt,omitempty"`

	// Stall is set while the engine's watchdog finds the job's pending
	// work not moving for longer than its bound (status.Stall); nil
	// otherwise.
	Stall *Stall `json:"stall,omitempty"`
}

// ReindexProgress is the state of a running (or the last) reindex. Rate
// and ETA are 0 until measured (the first progress tick): /status shows
// them as null then. A reindex that read nothing in a tick has Rate 0 and
// shows null too: no rate is known from nothing.
type ReindexProgress struct {
	Done      int64         `json:"done"`      // documents read so far (including a resumed checkpoint's)
	Estimated int64         `json:"estimated"` // estimatedDocumentCount at start
	Rate      float64       `json:"rate"`      // documents per second in this run; 0: not known
	ETA       time.Duration `json:"eta"`       // remaining at Rate; 0: not known (or nothing remains, see Done)
	Started   time.Time     `json:"started"`
	Resumed   bool          `json:"resumed"` // continued from a checkpoint
	// Throttled is what slows the chunks down now; nil when nothing does.
	Throttled *Throttled `json:"throttled,omitempty"`
}

// NewJobStats returns empty stats.
func NewJobStats() *JobStats { return &JobStats{} }

// Snapshot returns a copy of the current figures.
func (j *JobStats) Snapshot() JobSnapshot {
	if j == nil {
		return JobSnapshot{}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.s
	if s.Scan != nil {
		sc := *s.Scan
		if !sc.CursorTime.IsZero() {
			sc.LagSeconds = max(time.Since(sc.CursorTime).Seconds(), 0)
		}
		s.Scan = &sc
	}
	// A reindex follows the stream too: the lag is the live index's.
	s.LagSeconds, s.LagKnown = 0, j.streaming && s.Phase != PhaseIdle
	if s.LagKnown {
		oldest := j.pending
		if len(j.inflight) > 0 && (oldest.IsZero() || j.inflight[0].Before(oldest)) {
			oldest = j.inflight[0]
		}
		if !oldest.IsZero() {
			s.LagSeconds = max(time.Since(oldest).Seconds(), 0)
		}
		s.LagSeconds = max(s.LagSeconds, j.unread)
	}
	return s
}

// LagReset forgets outstanding changes: the engine (re)opens the job's
// stream, and from now on the lag is known.
func (j *JobStats) LagReset() {
	j.Update(func(*JobSnapshot) {
		j.inflight, j.pending, j.streaming, j.unread = j.inflight[:0], time.Time{}, true, 0
	})
}

// LagUnread notes how far, in seconds of the source's cluster time, what
// is durable is behind the newest change the source holds: the changes
// the stream has not read yet count in the lag too.
func (j *JobStats) LagUnread(seconds float64) {
	j.Update(func(*JobSnapshot) { j.unread = max(seconds, 0) })
}

// LagPending notes the first change of the batch being gathered.
func (j *JobStats) LagPending(wall time.Time) {
	j.Update(func(*JobSnapshot) {
		if j.pending.IsZero() {
			j.pending = wall
		}
	})
}

// LagFlushed moves the gathered batch to the in-flight ones.
func (j *JobStats) LagFlushed() {
	j.Update(func(*JobSnapshot) {
		if !j.pending.IsZero() {
			j.inflight = append(j.inflight, j.pending)
			j.pending = time.Time{}
		}
	})
}

// LagDurable drops the oldest in-flight batch.
func (j *JobStats) LagDurable() {
	j.Update(func(*JobSnapshot) {
		if len(j.inflight) > 0 {
			j.inflight = j.inflight[1:]
		}
	})
}

// Update changes the figures with fn, under the lock.
func (j *JobStats) Update(fn func(s *JobSnapshot)) {
	if j == nil {
		return
	}
	j.mu.Lock()
	fn(&j.s)
	j.mu.Unlock()
}

// SetPhase sets what the engine is doing. PhaseIdle (the run ended)
// makes the lag unknown until the next LagReset.
func (j *JobStats) SetPhase(p Phase) {
	j.Update(func(s *JobSnapshot) {
		s.Phase = p
		if p == PhaseIdle {
			j.streaming = false
			j.startedRun = false // a new run, whose start is ahead
		}
		if startedPhase(p) && j.started != nil {
			close(j.started)
			j.started = nil
		}
	})
}

// Started returns a channel closed once the engine follows the job's
// source (MarkStarted, or the phase following) or holds it paused: its
// start (preparing the destination, reading its state, opening the
// stream) is over. A reindex at start goes on past it: a process holding
// more large collections than start slots reindexes them all at once
// rather than keeping some queued for hours, their leases held. The
// channel is closed already when the start is over now; a nil *JobStats
// never closes it.
func (j *JobStats) Started() <-chan struct{} {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if startedPhase(j.s.Phase) || j.startedRun {
		c := make(chan struct{})
		close(c)
		return c
	}
	if j.started == nil {
		j.started = make(chan struct{})
	}
	return j.started
}

// MarkStarted says the engine read the job's stream: its start is over
// (Started), though a reindex may go on.
func (j *JobStats) MarkStarted() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.startedRun {
		return
	}
	j.startedRun = true
	if j.started != nil {
		close(j.started)
		j.started = nil
	}
}

// startedPhase says whether p comes after a job's start.
func startedPhase(p Phase) bool { return p == PhaseFollowing || p == PhasePaused }

// SetError records err (when not nil) as the last error.
func (j *JobStats) SetError(err error) {
	if err == nil {
		return
	}
	j.Update(func(s *JobSnapshot) { s.NoteError(err) })
}

// MaxErrorText bounds the text of a job's last error as /status and the
// supervisor keep it: the causes are bounded where they are made (a
// transform's message, a Meilisearch answer), but a job's status lives as
// long as the process and is served on every request, so no cause may
// make it large.
const MaxErrorText = 8 << 10

// NoteError records err as the last error, its code apart (errs.CodeOf),
// its text cut to MaxErrorText bytes on a character boundary.
func (s *JobSnapshot) NoteError(err error) {
	s.LastError, s.LastErrorCode, s.LastErrAt = clip.Text(err.Error(), MaxErrorText, "…"), string(errs.CodeOf(err)), time.Now()
}

// Add adds to the document counters.
func (j *JobStats) Add(indexed, deleted, skipped, errors int64) {
	j.Update(func(s *JobSnapshot) {
		s.Indexed += indexed
		s.Deleted += deleted
		s.Skipped += skipped
		s.Errors += errors
	})
}

// ScanState is what a scan-mode job shows of its scan.
type ScanState struct {
	// Key is the field the scan reads the collection by.
	Key string `json:"key"`
	// Cursor is the recorded cursor, the (key, _id) every document before
	// which is durable in the destination, in relaxed Extended JSON; ""
	// before the first.
	Cursor string `json:"cursor"`
	// CursorTime is the cursor's key when a date (zero otherwise), and
	// LagSeconds the scan's lag: now less CursorTime (0 for a number key).
	// A quiet collection's lag grows: it is the age of the last write
	// followed, not of a write waiting.
	CursorTime time.Time `json:"cursor_time,omitempty"`
	LagSeconds float64   `json:"lag_seconds"`
	// IntervalSeconds and SweepIntervalSeconds are the job's scanInterval
	// and sweepInterval.
	IntervalSeconds      float64 `json:"interval_seconds"`
	SweepIntervalSeconds float64 `json:"sweep_interval_seconds"`
	// Passes counts the passes of the scan, Sweeps the complete sweeps of
	// the destination's ids, SweptDeletes the ids they found gone;
	// LastSweep is when the last sweep ended.
	Passes       int64     `json:"passes"`
	Sweeps       int64     `json:"sweeps"`
	SweptDeletes int64     `json:"swept_deletes"`
	LastSweep    time.Time `json:"last_sweep,omitempty"`
	// WithoutKey counts the documents without the key (or null), OtherType
	// those whose key is of another type than the scan's: the scan never
	// reads them (counted at each sweep).
	WithoutKey int64 `json:"without_key"`
	OtherType  int64 `json:"other_type"`
}

// SetCursor sets the recorded cursor.
func (s *ScanState) SetCursor(text string, at time.Time) {
	s.Cursor, s.CursorTime = text, at
}
