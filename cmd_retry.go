package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"go.mongodb.org/mongo-driver/v2/bson"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// defaultRetryWait is how long "meilistream retry" waits for the job's
// holder to answer unless --wait says otherwise.
const defaultRetryWait = 5 * time.Minute

// retryClaimWait bounds how long a request may wait for a holder to take
// it: a holder that follows looks every second, so a request still
// untaken after this is not going to be (the holder is a `meilistream
// reindex`, an older release, or stuck starting).
var retryClaimWait = 30 * time.Second

// retryPoll is how often "meilistream retry" reads its request back.
var retryPoll = 250 * time.Millisecond

// retryFlags are the flags of "meilistream retry".
type retryFlags struct {
	wait time.Duration
}

func (f *retryFlags) define(fs *flag.FlagSet) {
	f.wait = defaultRetryWait
	fs.Func("wait", fmt.Sprintf("how long to wait for the sidecar's answer, a Go `DURATION` (default %s);\na request no sidecar takes within %s is withdrawn", defaultRetryWait, retryClaimWait), func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("wants a positive Go duration, e.g. 10m")
		}
		f.wait = d
		return nil
	})
}

// runRetry is the body of "meilistream retry NAME": the documents recorded
// in the errors collection run through the job's transform again; those
// that now succeed are written and their records cleared. When no process
// holds the job's lease, it does that itself, under the lease. When one
// does (a sidecar runs the job), it asks it to (a request in the state
// collection), waits up to --wait for the answer and prints it the same
// way: the holder retries inside the running job, in order with its change
// stream, so a retried document never lands over a newer version. Exits 1
// when some still fail.
func runRetry(ctx context.Context, inv *invocation, f retryFlags) int {
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()
	job, err := w.oneJob(inv, inv.Args[0])
	if err != nil {
		return fail(inv.Stderr, err)
	}
	if err := w.reach(ctx); err != nil {
		return fail(inv.Stderr, err)
	}
	var sum engine.RetrySummary
	err = w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		dst, err := w.sinkFactory(inv.Log)(job, sink.NewGuard(l.Held))
		if err != nil {
			return err
		}
		sum, err = w.engine.Retry(ctx, job, dst, l)
		return err
	})
	if errors.Is(err, errs.ErrRunning) {
		sum, err = w.retryByHolder(ctx, inv, job, f.wait)
	}
	if err != nil {
		return fail(inv.Stderr, err)
	}
	fmt.Fprintf(inv.Stdout, "retried %s: %d recorded, %d written and cleared, %d gone from the collection, %d failing again, in %s\n",
		job.Name, sum.Retried, sum.Written, sum.Gone, sum.Failed, sum.Duration.Round(time.Millisecond))
	if sum.Failed > 0 {
		return fail(inv.Stderr, errs.New(errs.Failed, job.Name, "%d documents still fail; \"meilistream errors %s\" lists them with their errors", sum.Failed, job.Name))
	}
	return exitOK
}

// retryByHolder asks the process holding job's lease to retry (a request
// in the state collection) and waits up to wait for its answer.
func (w *wiring) retryByHolder(ctx context.Context, inv *invocation, job *transform.Job, wait time.Duration) (engine.RetrySummary, error) {
	r, err := w.askHolder(ctx, inv, job, "", "", wait)
	if err != nil {
		return engine.RetrySummary{}, err
	}
	return engine.RetrySummary{Retried: r.Retried, Written: r.Written, Gone: r.Gone, Failed: r.Failed, Duration: r.Duration}, nil
}

// askHolder asks the process holding job's lease to do kind (a retry
// when "", jobstate.PauseKind...; mode for a reindex) with a request in
// the state collection, and waits up to wait for its answer: the request
// done, or an error saying why not. A request no holder takes within
// retryClaimWait is withdrawn; one taken and not answered in time is left
// to finish (the holder goes on with it).
//
// A repair (jobstate.RepairKind, verify --repair) names the ids the holder
// writes again.
func (w *wiring) askHolder(ctx context.Context, inv *invocation, job *transform.Job, kind, mode string, wait time.Duration, ids ...bson.RawValue) (*jobstate.RetryRequest, error) {
	what, after := "retry", "see `meilistream errors "+job.Name+"` later"
	if kind != "" {
		what, after = kind, "see `meilistream status` later"
	}
	var id string
	var err error
	switch kind {
	case "":
		id, err = jobstate.RequestRetry(ctx, w.state, job.Name, w.leases.Holder(), wait+time.Minute, w.prober.Pipelines)
	case jobstate.RepairKind:
		id, err = jobstate.RequestRepair(ctx, w.state, job.Name, w.leases.Holder(), wait+time.Minute, ids, w.prober.Pipelines)
	default:
		id, err = jobstate.RequestOf(ctx, w.state, job.Name, w.leases.Holder(), wait+time.Minute, kind, mode, w.prober.Pipelines)
	}
	if err != nil {
		return nil, err
	}
	if kind == "" {
		inv.Log.Info("another process holds the job's lease: asked it to retry the recorded documents", "job", job.Name, "wait", wait.String())
	} else {
		inv.Log.Info("another process holds the job's lease: asked it to "+kind+" the job", "job", job.Name, "wait", wait.String())
	}
	// Whatever happens to this process, an untaken request goes with it.
	withdraw := func() bool {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		ok, _ := jobstate.WithdrawRequest(dctx, w.state, job.Name, id)
		return ok
	}
	start := time.Now()
	claimBy := start.Add(min(wait, retryClaimWait))
	deadline := start.Add(wait)
	t := time.NewTicker(retryPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if withdraw() {
				return nil, errs.New(errs.Failed, job.Name, "interrupted before the job's holder took the %s request (withdrawn)", what)
			}
			return nil, errs.New(errs.Failed, job.Name, "interrupted while the job's holder does the %s; it goes on: %s", what, after)
		case <-t.C:
		}
		r, err := jobstate.ReadRequest(ctx, w.state, job.Name, id)
		if err != nil {
			continue // read again at the next tick, until the deadline
		}
		now := time.Now()
		switch {
		case r == nil:
			return nil, errs.New(errs.Failed, job.Name, "the %s request was deleted before the job's holder answered it", what)
		case r.State == jobstate.RequestDone:
			w.dropRequest(ctx, job.Name, id)
			return r, nil
		case r.State == jobstate.RequestFailed:
			w.dropRequest(ctx, job.Name, id)
			code := errs.Code(r.Code)
			if code == "" {
				code = errs.Failed
			}
			return nil, errs.New(code, job.Name, "the job's holder %s did not finish the %s: %s", r.Holder, what, r.Error)
		case r.State == jobstate.RequestPending && now.After(claimBy) && withdraw():
			return nil, errs.New(errs.Failed, job.Name, "another process holds job %s's lease but took no %s request within %s (withdrawn): it may still be starting (try again once `meilistream status` shows the job held), "+
				"be a `meilistream reindex` run by hand (try again once it ends), or run an earlier meilistream release, which takes no requests (roll the sidecars out to this one, then try again)", job.Name, what, min(wait, retryClaimWait))
		case now.After(deadline):
			return nil, errs.New(errs.Failed, job.Name, "the job's holder %s did not answer the %s within %s (--wait); it goes on: %s", r.Holder, what, wait, after)
		}
	}
}

// dropRequest deletes an answered request (a holder deletes it later if
// this fails: it expires).
func (w *wiring) dropRequest(ctx context.Context, job, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = jobstate.DeleteRequest(dctx, w.state, job, id)
}
