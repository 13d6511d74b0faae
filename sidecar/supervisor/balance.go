package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A deployment's pods share its jobs: each holds at most its fair share,
// ceil(jobs / live pods), so the work (and a job's failover) is spread
// rather than all on the pod that started first. Two rules keep it so,
// both local to this process and about fairness only (the lease alone
// decides who writes):
//
//   - A pod at or above its share holds off taking a free lease (HoldOff,
//     one lease period): a pod under its share, polling at its usual pace
//     (at most a third of a lease period), takes it first. Nobody under
//     its share wanting it, the holding-off pod takes it after the wait, so
//     no job stays without a holder for more than one extra period.
//   - A pod above its share for two balance rounds in a row gives the
//     excess back, gracefully: the job flushes, records its position and
//     releases its lease at a batch boundary (the engine's ordinary close),
//     then holds off like the above. A job that is reindexing is never
//     given back for balance (its swap or sweep is not cut short); the pods
//     count must stay the same for two rounds first (hysteresis), so a pod
//     starting or dying moves jobs once, not back and forth.
//
// A holder that makes no progress on a job while its source or destination
// keeps failing (StallTimeout) gives that job back too, once, and holds
// off, so a pod whose path to Meilisearch is broken leaves the job to a
// healthy one; when every pod fails the same way the job keeps being
// tried, each pod in turn.

// errHandOver and errStalled are the causes of a run cancelled to give the
// job to another pod.
var (
	errHandOver = errors.New("given back to balance the jobs across pods")
	errStalled  = errors.New("given back after no progress")
)

// Defaults of balance and stall hand-over.
const (
	DefaultBalanceInterval = 10 * time.Second
	DefaultHoldOff         = 30 * time.Second
	DefaultStallTimeout    = 2 * time.Minute
)

// balanceRounds is how many rounds in a row a pod must be above its share
// before it gives jobs back.
const balanceRounds = 2

// FairShare is the most jobs one of pods live processes should hold:
// ceil(jobs / pods), and every job when pods is unknown (0).
func FairShare(jobs, pods int) int {
	if pods <= 0 {
		return jobs
	}
	return (jobs + pods - 1) / pods
}

// balancer is the supervisor's view of the other pods.
type balancer struct {
	pods   int // live processes, this one included; 0: not known
	above  int // rounds in a row above the share
	prev   int // pods in the previous round
	shares int // the share as of the last round
}

// holdOff is how long job j's standby waits before its next attempt to
// take a free lease: until the end of a hand-over's pause, or one HoldOff
// while this process holds its fair share already; 0 otherwise.
func (s *Supervisor) holdOff(j *supervised) time.Duration {
	if d := j.stats.pausedFor(); d > 0 {
		return d
	}
	s.mu.Lock()
	pods := s.bal.pods
	s.mu.Unlock()
	if pods <= 1 {
		return 0
	}
	jobs, held := s.counts()
	if held >= FairShare(jobs, pods) {
		return s.cfg.HoldOff
	}
	return 0
}

// counts is how many jobs can run here (a loaded definition) and how many
// of them this process holds.
func (s *Supervisor) counts() (jobs, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.def.Err != nil {
			continue
		}
		jobs++
		if j.stats.Snapshot().Held {
			held++
		}
	}
	return jobs, held
}

// watchBalance runs the balance and stall rounds every BalanceInterval.
func (s *Supervisor) watchBalance() {
	t := time.NewTicker(s.cfg.BalanceInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.stallRound(time.Now())
		if s.cfg.Peers != nil {
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.BalanceInterval)
			pods, err := s.cfg.Peers(ctx)
			cancel()
			if err == nil {
				s.balanceRound(pods)
			}
		}
	}
}

// balanceRound notes that pods processes are live and gives back the jobs
// this one holds above its share once that has lasted balanceRounds
// rounds with the same count of pods.
func (s *Supervisor) balanceRound(pods int) {
	jobs, held := s.counts()
	share := FairShare(jobs, pods)
	s.mu.Lock()
	b := &s.bal
	if pods != b.prev {
		b.above = 0
	}
	b.prev, b.pods, b.shares = pods, pods, share
	if held > share {
		b.above++
	} else {
		b.above = 0
	}
	give := 0
	if b.above >= balanceRounds {
		give, b.above = held-share, 0
	}
	var cands []*supervised
	if give > 0 {
		for _, j := range s.jobs {
			sn := j.stats.Snapshot()
			if sn.Held && sn.State == StateRunning && j.stats.Stats.Snapshot().Phase == status.PhaseFollowing {
				cands = append(cands, j)
			}
		}
	}
	s.mu.Unlock()
	// The jobs taken last go first: the older holdings stay where they are.
	sort.Slice(cands, func(a, b int) bool { return cands[a].stats.heldSince().After(cands[b].stats.heldSince()) })
	for _, j := range cands[:min(give, len(cands))] {
		s.log.Info("giving the job back so the pods share the jobs", "job", j.def.Name,
			"pods", pods, "jobs", jobs, "held", held, "fair_share", share)
		j.stats.handOver(s.pause(1), errHandOver)
	}
}

// pause is the hold-off after the n-th hand-over in a row: HoldOff doubled
// n-1 times up to RestartMax (but never under HoldOff), with up to a fifth
// of jitter, so pods that all fail the same way take turns.
func (s *Supervisor) pause(n int) time.Duration {
	d := RestartDelay(s.cfg.HoldOff, max(s.cfg.HoldOff, s.cfg.RestartMax), n, rand.Float64())
	return max(d, time.Millisecond)
}

// stallRound gives back a held job that has made no progress for
// StallTimeout while its source or destination kept failing.
func (s *Supervisor) stallRound(now time.Time) {
	if s.cfg.StallTimeout <= 0 {
		return
	}
	s.mu.Lock()
	jobs := make([]*supervised, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()
	for _, j := range jobs {
		if why, stalled := j.stats.stalledFor(now, s.cfg.StallTimeout); stalled {
			n := j.stats.noteStall()
			d := s.pause(n)
			err := errs.New(errs.Failed, j.def.Name, "no progress for %s while %s: giving the lease to another pod, not taking it again for %s",
				s.cfg.StallTimeout, why, d.Round(time.Second))
			s.log.Warn("job stalled; handing it over", "job", j.def.Name, "error", err, "stalls", n)
			j.stats.m.ObserveStall(j.def.Name)
			j.stats.fail(err)
			j.stats.handOver(d, errStalled)
		}
	}
}

// progress is what a held job has done so far: when it changes, the job
// made progress.
type progress struct {
	batches, indexed, deleted, skipped, errors, reindexDone int64
	recorded                                                time.Time
	phase                                                   status.Phase
}

func progressOf(s status.JobSnapshot) progress {
	return progress{s.Batches, s.Indexed, s.Deleted, s.Skipped, s.Errors, s.Reindex.Done, s.RecordedAt, s.Phase}
}

// stalledFor reports whether the job, held, has made no progress for
// timeout (as of now) while failing: attempts to prepare its destination
// failing, or errors and retries since its last progress. why says what
// failed. A quiet job with nothing to do is not stalled: it fails nothing.
func (j *SupervisedJob) stalledFor(now time.Time, timeout time.Duration) (why string, stalled bool) {
	es := j.Stats.Snapshot()
	p := progressOf(es)
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.held || j.runCancel == nil {
		j.progressAt, j.retriesAt = time.Time{}, 0
		return "", false
	}
	if j.progressAt.IsZero() || p != j.lastProgress {
		j.lastProgress, j.progressAt, j.retriesAt = p, now, es.Retries
		j.stalls = 0
		return "", false
	}
	if now.Sub(j.progressAt) < timeout {
		return "", false
	}
	switch {
	case j.attempts > 0:
		why = fmt.Sprintf("preparing its destination failed %d times (last: %s)", j.attempts, firstLine(errText(j.lastErr)))
	case es.Retries > j.retriesAt || es.LastErrAt.After(j.progressAt):
		why = "its sends or reads kept being retried"
		if es.LastError != "" {
			why += " (last: " + firstLine(es.LastError) + ")"
		}
	case j.lastErrAt.After(j.progressAt):
		why = "it kept failing (last: " + firstLine(errText(j.lastErr)) + ")"
	default:
		return "", false
	}
	return why, true
}

// noteStall counts a stall hand-over in a row, for the next pause.
func (j *SupervisedJob) noteStall() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stalls++
	j.progressAt = time.Time{}
	return j.stalls
}

// handOver cancels the job's run with cause (the run flushes, records and
// releases as at any stop) and pauses its next attempt to take the lease
// for d.
func (j *SupervisedJob) handOver(d time.Duration, cause error) {
	j.mu.Lock()
	cancel := j.runCancel
	j.pauseUntil = time.Now().Add(d)
	j.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// pausedFor is what remains of the pause after a hand-over.
func (j *SupervisedJob) pausedFor() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return time.Until(j.pauseUntil)
}

// heldSince is when this process took the job's lease last.
func (j *SupervisedJob) heldSince() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.heldAt
}
