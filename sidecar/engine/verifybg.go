package engine

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A job with verify: true has its holder verify its destination in the
// background while it follows, every VerifyInterval (counted from the
// start of the last complete pass), reading at most VerifyRate documents
// a second: the same check as `meilistream verify` (verify.go), its
// re-checks waiting for this holder's own durable position. The pass under
// way is checkpointed in the state collection (jobstate, "background
// verify") every verifyCheckpointEvery, fenced by the lease, so a restart
// or a standby taking over resumes it; the last complete pass is what the
// metrics show (Observer.ObserveVerify) and /status with it. With
// verifyRepair: true what differs is repaired through a repair request to
// this same holder, which takes it as it takes those of `verify --repair`
// (retrylive.go), in order with its stream.

// verifyCheckpointEvery is how often a background pass records how far it
// got.
var verifyCheckpointEvery = 30 * time.Second

// verifyRetryAfter is how long a background pass that did not finish
// waits before it tries again.
var verifyRetryAfter = time.Minute

// verifyRepairWait bounds the wait for one repair request's answer.
const verifyRepairWait = 10 * time.Minute

// startVerify runs the job's background verify until ctx ends; stop waits
// for it (a pass cut short leaves its checkpoint).
func (f *follower) startVerify(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.verifyLoop(ctx)
	}()
	return func() { cancel(); <-done }
}

func (f *follower) verifyLoop(ctx context.Context) {
	e, job, log := f.e, f.jc.job, f.log.Named("verify")
	observed := false
	for ctx.Err() == nil {
		st, err := e.store.ReadVerify(ctx, job.Name)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("reading the background verify's checkpoint failed; trying again later", "error", err)
			}
			_ = sleep(ctx, verifyRetryAfter)
			continue
		}
		if st.Last != nil && !observed {
			observed = true
			f.observeVerify(st.Last)
		}
		resume := st.Pass
		if resume != nil && resume.Hash != job.Hash {
			resume = nil // of another transform: start over
		}
		if resume == nil && st.Last != nil {
			if err := sleep(ctx, time.Until(st.Last.StartedAt.Add(f.jc.VerifyInterval))); err != nil {
				return
			}
		}
		if f.stats.Snapshot().Phase == status.PhaseReindexing {
			// The destination is being rebuilt: verify it once it is.
			_ = sleep(ctx, time.Second)
			continue
		}
		pass, err := f.verifyPass(ctx, resume, log)
		if err != nil {
			if ctx.Err() != nil || errs.CodeOf(err) == errs.LeaseLost {
				return
			}
			log.Warn("background verify did not finish; trying again later", "error", err, "retry_in", verifyRetryAfter.String())
			f.stats.Update(func(s *status.JobSnapshot) { s.Verify.Running = false })
			_ = sleep(ctx, verifyRetryAfter)
			continue
		}
		observed = true
		f.observeVerify(pass)
		log.Info("background verify done", "checked", pass.Counts.Checked, "missing", pass.Counts.Missing, "stale", pass.Counts.Stale,
			"extra", pass.Counts.Extra, "repaired", pass.Counts.Repaired, "errors", pass.Counts.Errors, "skipped_changing", pass.Counts.SkippedChanging)
	}
}

// verifyPass runs one pass (resuming resume when set) and records it as
// the last complete one.
func (f *follower) verifyPass(ctx context.Context, resume *jobstate.VerifyPass, log hclog.Logger) (*jobstate.VerifyPass, error) {
	e, job := f.e, f.jc.job
	started := time.Now()
	if resume != nil && !resume.StartedAt.IsZero() {
		started = resume.StartedAt
		log.Info("resuming the background verify", "phase", resume.Phase, "checked", resume.Counts.Checked)
	} else {
		log.Info("background verify starting", "rate", f.jc.VerifyRate)
	}
	f.stats.Update(func(s *status.JobSnapshot) {
		s.Verify.Running, s.Verify.StartedAt, s.Verify.Checked = true, started, 0
	})
	opts := VerifyOptions{
		Rate: float64(f.jc.VerifyRate), Followed: true, Log: f.log.Named("verify"),
		Resume: resume, CheckpointEvery: verifyCheckpointEvery,
		Checkpoint: func(ctx context.Context, p *jobstate.VerifyPass) error {
			p.StartedAt = started
			return e.store.CheckpointVerify(ctx, job.Name, f.l, p)
		},
		Progress: func(checked int64) {
			f.stats.Update(func(s *status.JobSnapshot) { s.Verify.Checked = checked })
		},
	}
	if job.VerifyRepair {
		opts.Repair = func(ctx context.Context, ids []bson.RawValue) (int64, error) {
			return e.repairByRequest(ctx, job.Name, ids)
		}
	}
	rep, err := e.Verify(ctx, job, f.p.Live(), opts)
	if err != nil {
		return nil, err
	}
	pass := &jobstate.VerifyPass{StartedAt: started, DoneAt: time.Now(), Hash: job.Hash, Counts: rep.Counts()}
	if err := e.store.FinishVerify(ctx, job.Name, f.l, pass); err != nil {
		return nil, err
	}
	return pass, nil
}

// observeVerify shows a complete pass in the metrics and the status.
func (f *follower) observeVerify(p *jobstate.VerifyPass) {
	f.e.obs.ObserveVerify(f.jc.job.Name, p.Counts.Missing, p.Counts.Stale, p.Counts.Extra, p.DoneAt)
	f.stats.Update(func(s *status.JobSnapshot) {
		s.Verify.Running = false
		s.Verify.LastDoneAt = p.DoneAt
		s.Verify.Missing, s.Verify.Stale, s.Verify.Extra = p.Counts.Missing, p.Counts.Stale, p.Counts.Extra
		s.Verify.Repaired = p.Counts.Repaired
	})
}

// repairByRequest asks this process, the job's holder, to write ids again
// through a repair request (its request loop takes it, in order with the
// stream), and waits for the answer: how many it made durable.
func (e *Engine) repairByRequest(ctx context.Context, job string, ids []bson.RawValue) (int64, error) {
	state := e.source.Collection(e.stateName)
	id, err := jobstate.RequestRepair(ctx, state, job, e.cfg.Process, verifyRepairWait+time.Minute, ids, e.cfg.Form)
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = jobstate.DeleteRequest(dctx, state, job, id)
	}()
	deadline := time.Now().Add(verifyRepairWait)
	for {
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return 0, err
		}
		r, err := jobstate.ReadRequest(ctx, state, job, id)
		switch {
		case err != nil:
		case r == nil:
			return 0, errs.New(errs.Failed, job, "the background verify's repair request was deleted before it was answered")
		case r.State == jobstate.RequestDone:
			return r.Written + r.Gone, nil
		case r.State == jobstate.RequestFailed:
			return r.Written + r.Gone, errs.New(errs.Failed, job, "the repair of %d documents did not finish: %s", len(ids), r.Error)
		}
		if time.Now().After(deadline) {
			return 0, errs.New(errs.Failed, job, "the repair of %d documents was not answered within %s", len(ids), verifyRepairWait)
		}
	}
}
