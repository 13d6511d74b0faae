package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// `meilistream pause`, `resume` and `reindex` while another process holds
// the job's lease leave a request in the state collection, as `retry`
// does (jobstate, "retry requests"); the follow loop takes them at a
// batch boundary, between two batches of change events.
//
// A pause is recorded in the state collection (jobstate.RecordPause,
// fenced by the lease) before the job stops reading, so every later
// holder starts paused: it survives restarts and takeovers until resumed.
// Paused, the job keeps its lease, flushes what it had read and closes its
// change stream; its recorded position stays where the last durable batch
// put it, and ages (meilistream_position_age_seconds): a resume reopens
// the stream there, which the oplog must still hold. Nothing is sent
// while paused: reindex chunks and retried pages wait for the stream's
// marks, and the stream is not read. The claimants of a shared reindex,
// the holder's and the standbys', read the same pause record before each
// claim and claim nothing while it is there (a claim in flight finishes),
// so no result waits in the chunks collection for a resume.
//
// A reindex asked of the holder ends the follow cleanly (flushed and
// recorded) and starts it again with a reindex interleaved, as one the
// job starts itself: the request is answered once that is decided, and
// `reindex --wait` then waits for the position's reindexedAt to pass the
// time the holder took the request.

// DefaultPauseWarnEvery is Config.PauseWarnEvery's default.
const DefaultPauseWarnEvery = time.Hour

// errReindexAsked ends a follow so that run starts the next one with a
// reindex.
var errReindexAsked = errors.New("reindex asked by meilistream reindex")

// ModeAsked is what Run returns when the job's holder was asked to
// reindex in another mode than the job's (`meilistream reindex --inplace`
// of a swap job): the destination's sink stages as its job says, so the
// caller builds the job again with Reindex set to Mode, and its sink, and
// runs it with RunReindexing. Not a failure.
type ModeAsked struct {
	Job  string
	Mode string // "inplace" or "swap"
}

func (m *ModeAsked) Error() string {
	return fmt.Sprintf("job %s: reindex %s asked by meilistream reindex", m.Job, m.Mode)
}

// request acts on a request taken from the state collection: a retry
// (retrylive.go), a repair (verify's), a pause, a resume or a reindex. errReindexAsked says
// the follow must end for a reindex (the request is finished once it
// did, cleanly).
func (f *follower) request(ctx context.Context, r *retryRequest) error {
	switch r.Kind() {
	case "":
		if f.paused {
			r.Finish("", f.pausedErr("retry the recorded documents"))
			return nil
		}
		return f.startRetry(r)
	case jobstate.RepairKind:
		// verify --repair: its ids, written again as a retry's records.
		if f.paused {
			r.Finish("", f.pausedErr("repair the documents verify found differing"))
			return nil
		}
		return f.startRetry(r)
	case jobstate.PauseKind:
		if f.byHand {
			r.Finish("", errs.New(errs.Failed, f.jc.job.Name, "the job's holder is a `meilistream reindex %s` run by hand, which stops once it is done: pause the job after it", f.jc.job.Name))
			return nil
		}
		return f.pauseAsked(ctx, r)
	case jobstate.ResumeKind:
		return f.resumeAsked(ctx, r)
	case jobstate.ReindexKind:
		if f.byHand && f.snap != nil {
			r.Finish(fmt.Sprintf("a `meilistream reindex %s` run by hand is reindexing the job, %d documents done: it goes on", f.jc.job.Name, f.snap.Count()), nil)
			return nil
		}
		return f.reindexAsked(r)
	}
	r.Finish("", errs.New(errs.Failed, f.jc.job.Name, "a request of kind %q, which this release does not know: run the command with the release the sidecars run", r.Kind()))
	return nil
}

func (f *follower) pausedErr(what string) error {
	return errs.New(errs.Failed, f.jc.job.Name, "the job is paused: cannot %s; run `meilistream resume %s` first", what, f.jc.job.Name)
}

// pauseAsked records the pause, stops reading, and finishes r once
// everything read before is durable (a control flight: the pipe keeps
// order).
func (f *follower) pauseAsked(ctx context.Context, r *retryRequest) error {
	if f.paused {
		r.Finish(fmt.Sprintf("already paused since %s", f.pausedAt.UTC().Format(time.RFC3339)), nil)
		return nil
	}
	if err := f.e.store.RecordPause(ctx, f.jc.job.Name, f.l, f.e.cfg.Process); err != nil {
		r.Finish("", err)
		return leaseOr(ctx, f.l, err)
	}
	if err := f.enterPause(time.Now()); err != nil {
		return err
	}
	f.log.Info("paused, asked by meilistream pause: sending nothing until `meilistream resume " + f.jc.job.Name + "`")
	log := f.log
	return f.p.Submit(&pipe.Flight{Durable: func(context.Context, *pipe.Flight) error {
		f.recMu.Lock()
		wall := f.lastWall
		f.recMu.Unlock()
		note := "paused: what was in flight is durable"
		if !wall.IsZero() {
			note += fmt.Sprintf("; the recorded position (%s) stays until resume", wall.UTC().Format(time.RFC3339))
		}
		log.Debug("pause: in-flight batches durable")
		r.Finish(note, nil)
		return nil
	}})
}

// enterPause flushes what was read, closes the stream and shows the job
// paused since at.
func (f *follower) enterPause(at time.Time) error {
	if err := f.flush(); err != nil {
		return err
	}
	if f.scan == nil {
		// A scan's feed stays open, held back by the loop taking nothing
		// from it: closing it could lose what it handed over last (a
		// chain's mark among it), which a stream reopened after its last
		// token reads again but a scan does not.
		f.reader.Close()
	}
	f.paused, f.pausedAt, f.pauseWarned = true, at, time.Now()
	f.pausedNow.Store(true)
	// The stream no longer reads requests' arrivals: the taker asks every
	// RetryPoll from now on (a resume is taken as promptly as before).
	f.kickRetries()
	f.stats.SetPhase(status.PhasePaused)
	return nil
}

// resumeAsked clears the pause and reopens the stream after the last
// change read.
func (f *follower) resumeAsked(ctx context.Context, r *retryRequest) error {
	if err := f.e.store.ClearPause(ctx, f.jc.job.Name, f.l); err != nil {
		r.Finish("", err)
		return leaseOr(ctx, f.l, err)
	}
	if !f.paused {
		r.Finish("not paused: nothing to resume", nil)
		return nil
	}
	f.paused = false
	f.pausedNow.Store(false)
	f.dog.resumed()
	if f.scan == nil {
		if err := f.open(ctx); err != nil {
			r.Finish("", err)
			return err
		}
	}
	if f.snap != nil {
		f.stats.SetPhase(status.PhaseReindexing)
	} else {
		f.stats.SetPhase(status.PhaseFollowing)
	}
	d := time.Since(f.pausedAt).Round(time.Second)
	f.log.Info("resumed, asked by meilistream resume", "paused_for", d.String())
	r.Finish(fmt.Sprintf("resumed after %s paused: following from the recorded position", d), nil)
	return nil
}

// reindexAsked answers a reindex request: at once when a reindex already
// runs, refused while paused or for another mode than the job's;
// otherwise errReindexAsked (the loop ends the follow, then finishes r).
func (f *follower) reindexAsked(r *retryRequest) error {
	if f.paused {
		r.Finish("", f.pausedErr("reindex"))
		return nil
	}
	if m := r.Mode(); m == "swap" && f.jc.job.Kind == jobdef.Mirror {
		r.Finish("", errs.New(errs.Failed, f.jc.job.Name, "job %s is a mirror job, which always rebuilds its replica collection in place: --swap does not apply", f.jc.job.Name))
		return nil
	}
	if f.snap != nil {
		r.Finish(fmt.Sprintf("a reindex (%s) was already running, %d documents done: it goes on in its mode", reindexMode(f.jc.job), f.snap.Count()), nil)
		return nil
	}
	want := r.Mode()
	if want == "" {
		// As the job says: the job as defined, when this run is a copy
		// in the mode an earlier request asked.
		want = f.ownMode
	}
	if want != "" && want != reindexMode(f.jc.job) {
		f.modeAsked = want
	}
	return errReindexAsked
}

// reindexMode is how job reindexes: "inplace" or "swap".
func reindexMode(job *transform.Job) string {
	if job.Reindex == "inplace" || job.Kind == jobdef.Mirror {
		return "inplace"
	}
	return "swap"
}

// pausedTick warns, every Config.PauseWarnEvery, that the job is still
// paused.
func (f *follower) pausedTick() {
	if !f.paused || time.Since(f.pauseWarned) < f.e.cfg.PauseWarnEvery {
		return
	}
	f.pauseWarned = time.Now()
	f.recMu.Lock()
	wall := f.lastWall
	f.recMu.Unlock()
	args := []any{"paused_for", time.Since(f.pausedAt).Round(time.Second).String()}
	if !wall.IsZero() {
		args = append(args, "position_age", time.Since(wall).Round(time.Second).String())
	}
	f.log.Warn("still paused: the recorded position ages, and a resume needs the oplog to hold it; `meilistream resume "+f.jc.job.Name+"` (meilistream_position_age_seconds shows its age)", args...)
}

// SetPaused records (or, with paused false, clears) job's pause under l,
// for `meilistream pause` and `resume` run where no process holds the
// job: its next holder starts paused, or not.
func (e *Engine) SetPaused(ctx context.Context, job string, l Lease, paused bool) error {
	if paused {
		return e.store.RecordPause(ctx, job, l, e.cfg.Process)
	}
	return e.store.ClearPause(ctx, job, l)
}

// Paused returns job's recorded pause; nil when it is not paused.
func (e *Engine) Paused(ctx context.Context, job string) (*jobstate.Pause, error) {
	return e.store.ReadPause(ctx, job)
}

// Position returns job's recorded position; nil when there is none.
func (e *Engine) Position(ctx context.Context, job string) (*jobstate.Position, error) {
	return e.store.ReadPosition(ctx, job)
}

// resumed restarts the age of what is pending: the time paused is not
// time the job failed to move.
func (w *watchdog) resumed() {
	w.mu.Lock()
	w.moved = time.Now()
	w.mu.Unlock()
}
