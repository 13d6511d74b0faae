package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/meilistream/meilistream/sidecar/status"
)

var (
	_ status.Source        = (*Supervisor)(nil)
	_ status.OplogWindower = (*Supervisor)(nil)
)

// Status returns every job's status for /status, sorted by name, from
// memory: the supervisor's state (standby, restarting, failed...) refined by
// the engine's phase (reindexing, following) while the job runs.
func (s *Supervisor) Status() []status.Job {
	s.mu.Lock()
	jobs := make([]*SupervisedJob, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j.stats)
	}
	s.mu.Unlock()
	out := make([]status.Job, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, s.jobStatus(j))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func (s *Supervisor) jobStatus(j *SupervisedJob) status.Job {
	sn := j.Snapshot()
	es := j.Stats.Snapshot()
	st := status.Job{
		Name:     sn.Name,
		Kind:     j.Kind,
		State:    sn.State,
		Epoch:    sn.Epoch,
		Restarts: sn.Restarts,
		Attempts: sn.Attempts,
		Waiting:  sn.Waiting,
		Counters: status.Counters{Indexed: es.Indexed, Deleted: es.Deleted, Skipped: es.Skipped, Errors: es.Errors, Changes: es.Changes, FanOuts: es.FanOuts, Resent: es.Resent,
			SkippedUnchanged: es.SkippedUnchanged, Chunks: es.Chunks, ChunksRedone: es.ChunksRedone},
	}
	switch {
	case sn.Held:
		st.Holder = s.cfg.Holder
	case sn.State == StateStandby:
		st.Holder = s.holderOf(sn.Name)
	}
	if sn.State == StateRunning {
		switch es.Phase {
		case status.PhaseReindexing:
			st.State = status.Reindexing
		case status.PhaseFollowing:
			st.State = status.Following
		case status.PhasePaused:
			st.State = status.Paused
		default:
			st.State = StateStarting
			if sn.Attempts > 0 {
				// Holding the lease, and its destination keeps
				// failing to prepare: say so, not "starting".
				st.State = status.Unavailable
			}
		}
	}
	// The lag while the engine follows the stream: when following, and
	// while reindexing if the engine follows the stream meanwhile; paused,
	// it grows with what the stream has not read.
	if (st.State == status.Following || st.State == status.Reindexing || st.State == status.Paused) && es.LagKnown {
		lag := es.LagSeconds
		st.LagSeconds = &lag
	}
	if st.State == status.Following || st.State == status.Reindexing {
		st.Queue = es.Queue
	}
	st.Mode = es.Mode
	if holdingState(st.State) {
		st.Scan = es.Scan
	}
	if st.State == status.Reindexing {
		st.Reindex = reindexStatus(es.Reindex)
	}
	if v := es.Verify; (st.State == status.Following || st.State == status.Reindexing) && (v.Running || !v.LastDoneAt.IsZero()) {
		st.Verify = verifyStatus(v)
	}
	// A job whose pending work stopped moving (the engine's watchdog)
	// says so instead of following or reindexing, with what is pending.
	if es.Stall != nil && (st.State == status.Following || st.State == status.Reindexing) {
		st.State = status.Stalled
		st.Stall = es.Stall
	}
	if !es.LastPosition.IsZero() {
		t := es.LastPosition
		st.PositionTime = &t
	}
	if age, room, ok := s.headroomOf(sn.Name); ok {
		st.PositionAgeSeconds, st.HeadroomSeconds = &age, &room
	}
	if sn.TransformError != "" {
		st.TransformError = &status.ErrorInfo{Code: sn.TransformErrorCode, Message: sn.TransformError, At: sn.TransformErrorAt}
	}
	if !sn.NextRestart.IsZero() {
		t := sn.NextRestart
		st.NextRestart = &t
	}
	// The later of the supervisor's and the engine's last errors.
	switch {
	case sn.LastError != "" && (es.LastError == "" || !es.LastErrAt.After(sn.LastErrorAt)):
		st.LastError = &status.ErrorInfo{Code: sn.Code, Message: sn.LastError, At: sn.LastErrorAt}
	case es.LastError != "":
		st.LastError = &status.ErrorInfo{Code: es.LastErrorCode, Message: es.LastError, At: es.LastErrAt}
	}
	return st
}

// verifyStatus is a background verify as /status shows it.
func verifyStatus(v status.VerifyProgress) *status.Verify {
	out := &status.Verify{Running: v.Running, Checked: v.Checked}
	if v.Running {
		t := v.StartedAt
		out.StartedAt = &t
	}
	if !v.LastDoneAt.IsZero() {
		out.Last = &status.VerifyPass{DoneAt: v.LastDoneAt, Missing: v.Missing, Stale: v.Stale, Extra: v.Extra, Repaired: v.Repaired}
	}
	return out
}

// reindexStatus is a reindex's progress as /status shows it: the rate
// and the time left null until measured (status.ReindexProgress).
func reindexStatus(r status.ReindexProgress) *status.Reindex {
	out := &status.Reindex{Done: r.Done, TotalEstimate: r.Estimated, Resumed: r.Resumed, Throttled: r.Throttled}
	if r.Rate > 0 {
		rate := r.Rate
		out.Rate = &rate
		if r.ETA > 0 {
			eta := r.ETA.Seconds()
			out.ETASeconds = &eta
		}
	}
	return out
}

// Ready reports whether the sidecar does its work (/readyz): the servers
// answer (Probe), no job has failed or waits to restart after a failure,
// no job is stalled (its pending work not moving: the engine's
// watchdog), and no following job has fallen more than StallAfter behind.
//
// /readyz keeps probing: a probe result older than ProbeTTL is not used, a
// new probe runs (bounded by probeTimeout and ctx) and Ready waits for it,
// so the orchestrator sees a server go down within seconds. A result
// younger than ProbeTTL is shared, and concurrent calls join the probe in
// flight, so frequent checks never pile probes onto a server that is down.
// The jobs' part is always current (from memory).
func (s *Supervisor) Ready(ctx context.Context) error {
	return s.readiness(ctx, true)
}

// ReadyNow is Ready for /status (QuickReadier): the latest probe's result
// even when older than ProbeTTL, in which case a probe starts in the
// background for the next call. /status so answers at once while a server
// is down (a probe then takes seconds); it waits only before the first
// probe has finished.
func (s *Supervisor) ReadyNow(ctx context.Context) error {
	return s.readiness(ctx, false)
}

// DefaultProbeTTL is how long a probe's result is reused by Ready (and
// counted fresh by ReadyNow): Config.ProbeTTL's default.
const DefaultProbeTTL = 2 * time.Second

// probeTimeout bounds one probe; under /readyz's own 3 s so a probe's own
// error (which server does not answer) is what /readyz shows.
const probeTimeout = 2500 * time.Millisecond

// probeCache is cfg.Probe's latest result and the probe in flight.
type probeCache struct {
	mu      sync.Mutex
	err     error
	at      time.Time     // when the latest probe finished; zero: none yet
	running chan struct{} // closed when the probe in flight ends; nil: none
}

// probe returns the servers' state per Ready (wait) or ReadyNow (!wait).
func (s *Supervisor) probe(ctx context.Context, wait bool) error {
	c := &s.probes
	c.mu.Lock()
	have := !c.at.IsZero()
	if have && time.Since(c.at) < s.cfg.ProbeTTL {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if c.running == nil {
		done := make(chan struct{})
		c.running = done
		go func() {
			pctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
			err := s.cfg.Probe(pctx)
			cancel()
			c.mu.Lock()
			c.err, c.at, c.running = err, time.Now(), nil
			c.mu.Unlock()
			close(done)
		}()
	}
	done, last := c.running, c.err
	c.mu.Unlock()
	if have && !wait {
		return last
	}
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("servers not checked in time: %w", ctx.Err())
	}
}

func (s *Supervisor) readiness(ctx context.Context, wait bool) error {
	var problems []string
	if s.cfg.Probe != nil {
		if err := s.probe(ctx, wait); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, j := range s.Status() {
		switch {
		case j.State == StateFailed || j.State == StateRestarting || j.State == status.Unavailable:
			// "job people failed: CONFIG_INVALID: <message>", the code and
			// the job once each.
			msg := "job " + j.Name + " " + j.State
			if j.LastError != nil {
				msg += ": " + j.LastError.Code + ": " + firstLine(j.LastError.Message)
			}
			problems = append(problems, msg)
		case j.State == StateStalled && j.Stall != nil:
			// Running, its pending work not moving (the engine's watchdog).
			problems = append(problems, fmt.Sprintf("job %s stalled: its pending work has not moved for %s (bound %s): %s", j.Name,
				time.Since(j.Stall.Since).Round(time.Second), (time.Duration(j.Stall.BoundSeconds*float64(time.Second))).Round(time.Second), j.Stall.Pending))
		case j.State == StateStalled:
			msg := "job " + j.Name + " stalled"
			if j.LastError != nil {
				msg += ": " + firstLine(j.LastError.Message)
			}
			problems = append(problems, msg)
		case j.LagSeconds != nil && *j.LagSeconds > s.cfg.StallAfter.Seconds():
			problems = append(problems, fmt.Sprintf("job %s stalled: %s behind the change stream", j.Name,
				(time.Duration(*j.LagSeconds)*time.Second).String()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// holdingState says whether a job in state runs in this process.
func holdingState(state string) bool {
	switch state {
	case status.Following, status.Reindexing, status.Paused, status.Unavailable:
		return true
	}
	return false
}
