package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// runReindex is the body of "meilistream reindex NAME": it takes the job's
// lease (exit 3, RUNNING, when another process holds it), rebuilds the
// destination from the collection (continuing a checkpointed reindex of the
// same transform), records the new position, releases the lease and prints
// one line: indexed, skipped, removed, duration.
func runReindex(ctx context.Context, inv *invocation) int {
	name := inv.Args[0]
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()
	job, err := w.oneJob(inv, name)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	if err := w.reach(ctx); err != nil {
		return fail(inv.Stderr, err)
	}
	var out string
	err = w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		dst, err := w.sinkFactory(inv.Log)(job, sink.NewGuard(l.Held))
		if err != nil {
			return err
		}
		sum, err := w.engine.Reindex(ctx, job, dst, l, nil)
		if err != nil {
			return err
		}
		resumed := ""
		if sum.Resumed {
			resumed = fmt.Sprintf(" (resumed after %d documents)", sum.Previous)
		}
		out = fmt.Sprintf("reindexed %s: indexed %d, skipped %d, removed %d, errors %d, in %s%s\n",
			job.Name, sum.Indexed, sum.Skipped, sum.Removed, sum.Errors, sum.Duration.Round(time.Millisecond), resumed)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(inv.Stderr, "meilistream: reindex of %s interrupted; running it again continues from its last checkpoint\n", name)
		}
		return fail(inv.Stderr, err)
	}
	fmt.Fprint(inv.Stdout, out)
	return exitOK
}

// oneJob loads the job called name, with the environment's options, or says
// why it cannot (its file's problem, or that there is no such job).
func (w *wiring) oneJob(inv *invocation, name string) (*transform.Job, error) {
	set, loadErr := w.loadJobs(inv.Log)
	if set == nil {
		return nil, loadErr
	}
	for _, j := range set.Jobs() {
		if j.Name == name {
			if err := jobProblem(inv.Config, j); err != nil {
				return nil, err
			}
			return j, nil
		}
	}
	for _, e := range flattenErrs(loadErr) {
		if c, ok := e.(*errs.Error); ok && c.Job == name {
			return nil, e
		}
	}
	return nil, errs.New(errs.ConfigInvalid, name, "no job %q: no %s.js in %s and no MEILISTREAM_JOB_* variables for it",
		name, name, inv.Config.Transforms)
}

func flattenErrs(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErrs(e)...)
		}
		return out
	}
	return []error{err}
}
