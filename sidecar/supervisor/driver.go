package supervisor

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongoerr"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// SinkFactory builds the destination of one job: the Meilisearch sink for a
// search job, the replica sink for a mirror job. The main package provides
// it, because sidecar must not import replicate. An error with code
// CONFIG_INVALID (say, a mirror job with no replica configured) fails the
// job until its definition changes; other errors restart it with backoff.
// guard is the held lease's own-clock check, which the sink makes right
// before each request to its destination.
type SinkFactory func(job *transform.Job, guard sink.Guard) (sink.Sink, error)

// EngineDriver is the production JobDriver: standby polls lease.Manager's
// Acquire while another process holds the lease, a run is Engine.Run into
// the job's sink.
type EngineDriver struct {
	Leases *lease.Manager
	Engine *engine.Engine
	Sinks  SinkFactory
}

var _ JobDriver = (*EngineDriver)(nil)

// Standby waits until the job's lease is ours. Only a lease held by another
// process, or a live process running a newer transform than this one's
// (engine.Older, asked before each attempt so that waiting for it neither
// takes nor bumps the lease), is waited for here (polling from 500ms up to
// a third of the lease period, jittered, so a freed lease is noticed within
// one renewal period); any other failure to ask (MongoDB unreachable,
// credentials refused) is returned, so the supervisor shows it in /status
// (last_error, restarting) instead of a "standby" that claims another pod
// works. A refused authentication is CONFIG_INVALID naming
// MEILISTREAM_MONGODB_URI.
func (d *EngineDriver) Standby(ctx context.Context, def JobDef, w Standing) (HeldLease, error) {
	name := def.Name
	job, _ := def.Spec.(*transform.Job)
	capd := d.Leases.TTL() / 3
	base := min(lease.DefaultWaitBase, capd)
	wait := base
	// One attempt may take a renewal period (a third of the lease, 1s to
	// 10s), not the driver's 30 s server selection: an unreachable server
	// shows in /status that soon.
	each := min(max(capd, time.Second), 10*time.Second)
	if job != nil {
		// Meanwhile it does chunks of the job's shared reindex, if the
		// holder runs one with this transform.
		hctx, hstop := context.WithCancel(ctx)
		helped := make(chan struct{})
		go func() {
			defer close(helped)
			d.Engine.HelpReindex(hctx, job, w.Stats())
		}()
		defer func() { hstop(); <-helped }()
	}
	for {
		if off := w.HoldOff(); off > 0 {
			// This process holds its share already, or just gave the
			// job back: let another pod take a free lease first.
			t := time.NewTimer(off)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, context.Cause(ctx)
			case <-t.C:
			}
		}
		actx, cancel := context.WithTimeout(ctx, each)
		var l *lease.Lease
		err := d.older(actx, job)
		if err == nil {
			l, err = d.Leases.Acquire(actx, name)
		}
		cancel()
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errs.CodeOf(err) != errs.Running && !errors.Is(err, engine.ErrTransformOlder) {
			return nil, MongoAccessError(name, err)
		}
		w.Held(err)
		p := time.Duration(float64(wait) * (0.75 + 0.5*rand.Float64()))
		p = max(min(p, capd), time.Millisecond)
		t := time.NewTimer(p)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
		wait = min(2*wait, capd)
	}
}

// older is engine.Older for job, but only its ErrTransformOlder: another
// failure to read the state is left to the attempt to take the lease (and
// the run applies the rule again under it).
func (d *EngineDriver) older(ctx context.Context, job *transform.Job) error {
	if job == nil {
		return nil
	}
	if err := d.Engine.Older(ctx, job); errors.Is(err, engine.ErrTransformOlder) {
		return err
	}
	return nil
}

// KeepPresence keeps this process's presence record of the job
// (engine.KeepPresence); nil for a job without a loaded transform.
func (d *EngineDriver) KeepPresence(def JobDef) Presence {
	job, ok := def.Spec.(*transform.Job)
	if !ok || job == nil || def.Err != nil {
		return nil
	}
	return d.Engine.KeepPresence(job)
}

var _ PresenceKeeper = (*EngineDriver)(nil)

// MongoAccessError classifies a failure to reach the source MongoDB: an
// authentication failure (code 18 AuthenticationFailed, which the driver
// reports from the connection handshake) is CONFIG_INVALID naming
// MEILISTREAM_MONGODB_URI, since waiting alone will not fix it; anything
// else is returned as is (FAILED: retried). The driver's errors name hosts,
// never the password.
func MongoAccessError(job string, err error) error {
	if err == nil || !mongoerr.AuthFailed(err) {
		return err
	}
	return errs.Wrap(errs.ConfigInvalid, job, err,
		"MongoDB refused the credentials of MEILISTREAM_MONGODB_URI (or MEILISTREAM_MONGODB_URI_FILE): fix them and restart meilistream (retried every minute meanwhile)")
}

// Run builds the job's sink and runs the engine under the held lease.
// Failures to prepare the destination, which the engine retries itself,
// show in /status as the job's last_error and attempts.
func (d *EngineDriver) Run(ctx context.Context, def JobDef, h HeldLease, st *SupervisedJob) error {
	job, ok := def.Spec.(*transform.Job)
	if !ok || job == nil {
		return errs.New(errs.ConfigInvalid, def.Name, "no loaded transform for the job")
	}
	el, ok := h.(engine.Lease)
	if !ok {
		return errs.New(errs.Failed, def.Name, "lease of type %T cannot fence the engine's writes", h)
	}
	guard := sink.NewGuard(el.Held)
	dst, err := d.Sinks(job, guard)
	if err != nil {
		return errs.WithJob(job.Name, err)
	}
	err = d.Engine.Run(ctx, job, dst, el, st.Stats, st.prepared)
	// `meilistream reindex --inplace` (or --swap) asked the holder for
	// another mode than the job's: its sink stages as its job says, so
	// the job and its sink are built again with that mode, under the
	// same lease, until the process runs the job again.
	original := job
	for m := (*engine.ModeAsked)(nil); errors.As(err, &m); {
		c := *original
		c.Reindex = m.Mode
		job = &c
		if dst, err = d.Sinks(job, guard); err != nil {
			return errs.WithJob(job.Name, err)
		}
		err = d.Engine.RunReindexing(ctx, job, dst, el, st.Stats, original, st.prepared)
	}
	return historyLostForGood(job.Name, d.Engine.OnHistoryLost(job), err)
}

// historyLostForGood marks the engine's HISTORY_LOST as fatal when the job's
// onHistoryLost is "fail" (the user chose to be told, and a restart would
// only meet the same lost history), adding what to do. The engine's other
// HISTORY_LOST, an oplog window shorter than a reindex (onHistoryLost:
// reindex), stays an ordinary failure, restarted with backoff: the next
// reindex may fit.
func historyLostForGood(job, onHistoryLost string, err error) error {
	if onHistoryLost != "fail" || errs.CodeOf(err) != errs.HistoryLost {
		return err
	}
	return MarkFatal(advise(errs.WithJob(job, err),
		"to repair it, run `meilistream reindex %s` (from any pod, or a laptop with the same variables: it takes the free lease, or asks the sidecar holding it), "+
			"or set onHistoryLost: \"reindex\" (the transform file, MEILISTREAM_JOB_<NAME>_ON_HISTORY_LOST or MEILISTREAM_ON_HISTORY_LOST=reindex) so the job reindexes by itself", job))
}
