package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// runRetry is the body of "meilistream retry NAME": under the job's lease
// (exit 3, RUNNING, when a sidecar holds it: stop it, or let it run and use
// this when it is stopped), runs the documents recorded in the errors
// collection through the current transform again, writes those that now
// succeed and clears their records. Exits 1 when some still fail.
func runRetry(ctx context.Context, inv *invocation) int {
	if len(inv.Args) != 1 {
		return usageError(inv.Stderr, "retry", "want one job name, got %d arguments", len(inv.Args))
	}
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
	var failed int64
	err = w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		sink, err := w.sinkFactory(inv.Log)(job)
		if err != nil {
			return err
		}
		sum, err := w.engine.Retry(ctx, job, sink, l)
		if err != nil {
			return err
		}
		failed = sum.Failed
		fmt.Fprintf(inv.Stdout, "retried %s: %d recorded, %d written and cleared, %d gone from the collection, %d failing again, in %s\n",
			job.Name, sum.Retried, sum.Written, sum.Gone, sum.Failed, sum.Duration.Round(time.Millisecond))
		return nil
	})
	if err != nil {
		return fail(inv.Stderr, err)
	}
	if failed > 0 {
		return fail(inv.Stderr, errs.New(errs.Failed, job.Name, "%d documents still fail; see the errors collection %s_errors", failed, inv.Config.StateCollection))
	}
	return exitOK
}
