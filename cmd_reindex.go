package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// defaultReindexTimeout bounds how long `meilistream reindex --wait`
// waits for a running holder's reindex to finish.
const defaultReindexTimeout = 24 * time.Hour

// reindexAccept is how long `meilistream reindex` waits for a running
// holder to take its request (it flushes first).
var reindexAccept = 2 * time.Minute

// reindexFlags are the flags of "meilistream reindex".
type reindexFlags struct {
	inplace, swap, wait bool
	timeout             time.Duration
}

func (f *reindexFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.inplace, "inplace", false, "reindex in place this once, whatever the job says")
	fs.BoolVar(&f.swap, "swap", false, "reindex into a fresh index swapped in this once, whatever the job says")
	fs.BoolVar(&f.wait, "wait", false, "wait until a running sidecar's reindex is recorded")
	fs.DurationVar(&f.timeout, "timeout", defaultReindexTimeout, "how long --wait waits, a Go `DURATION`")
}

// check says what is wrong with the flags, if anything.
func (f reindexFlags) check() error {
	switch {
	case f.inplace && f.swap:
		return errors.New("--inplace and --swap exclude each other")
	case f.timeout <= 0:
		return fmt.Errorf("--timeout wants a positive Go duration, e.g. 2h, got %s", f.timeout)
	}
	return nil
}

// mode is the reindex mode the flags choose; "" as the job says.
func (f reindexFlags) mode() string {
	switch {
	case f.inplace:
		return "inplace"
	case f.swap:
		return "swap"
	}
	return ""
}

// runReindex is the body of "meilistream reindex NAME": with no process
// holding the job's lease it takes it, rebuilds the destination from the
// collection (continuing a checkpointed reindex of the same transform),
// records the new position, releases the lease and prints one line:
// indexed, skipped, removed, duration. When a sidecar holds it, it asks
// that sidecar (a request in the state collection, as retry does), which
// starts the reindex interleaved with its stream; it prints that it
// started and, with --wait, waits until it is recorded. A paused job is
// not reindexed: resume it first.
func runReindex(ctx context.Context, inv *invocation, f reindexFlags) int {
	if err := f.check(); err != nil {
		return usageError(inv.Stderr, "reindex", "%v", err)
	}
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
	if m := f.mode(); m != "" && job.Kind == jobdef.Mirror && m != "inplace" {
		return usageError(inv.Stderr, "reindex", "job %s is a mirror job, which always rebuilds its replica collection in place: --swap does not apply", job.Name)
	}
	if err := w.reach(ctx); err != nil {
		return fail(inv.Stderr, err)
	}
	if p, err := w.engine.Paused(ctx, job.Name); err != nil {
		return fail(inv.Stderr, err)
	} else if p != nil {
		return fail(inv.Stderr, errs.New(errs.Failed, job.Name, "the job is paused (since %s): run `meilistream resume %s` first, then reindex it",
			p.PausedAt.UTC().Format(time.RFC3339), job.Name))
	}
	var out string
	err = w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		run := job
		if m := f.mode(); m != "" && m != run.Reindex {
			c := *job // the sink and the engine read the mode from the job
			c.Reindex = m
			run = &c
		}
		dst, err := w.sinkFactory(inv.Log)(run, sink.NewGuard(l.Held))
		if err != nil {
			return err
		}
		var sum engine.Summary
		if run != job {
			sum, err = w.engine.ReindexAsked(ctx, run, job, dst, l, nil)
		} else {
			sum, err = w.engine.Reindex(ctx, run, dst, l, nil)
		}
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
	if errors.Is(err, errs.ErrRunning) {
		out, err = w.reindexByHolder(ctx, inv, job, f)
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(inv.Stderr, "meilistream: reindex of %s interrupted; running it again continues from its last checkpoint\n", name)
		}
		return fail(inv.Stderr, err)
	}
	fmt.Fprint(inv.Stdout, out)
	return exitOK
}

// reindexByHolder asks the process holding job's lease to reindex and,
// with --wait, waits until the reindex is recorded (the position's
// reindexedAt after the time the holder took the request).
func (w *wiring) reindexByHolder(ctx context.Context, inv *invocation, job *transform.Job, f reindexFlags) (string, error) {
	r, err := w.askHolder(ctx, inv, job, jobstate.ReindexKind, f.mode(), reindexAccept)
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("reindex of %s: holder %s: %s\n", job.Name, r.Holder, r.Note)
	if !f.wait {
		return line + fmt.Sprintf("it goes on in the sidecar; `meilistream status` shows its progress (or run reindex with --wait)\n"), nil
	}
	fmt.Fprint(inv.Stdout, line)
	deadline := time.Now().Add(f.timeout)
	t := time.NewTicker(retryPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", errs.New(errs.Failed, job.Name, "interrupted while waiting for the reindex; it goes on in the sidecar: see `meilistream status`")
		case <-t.C:
		}
		pos, err := w.engine.Position(ctx, job.Name)
		if err == nil && pos != nil && pos.ReindexedAt.After(r.Started) {
			at := pos.ReindexedAt.UTC().Format(time.RFC3339)
			if pos.Epoch != r.Epoch {
				// The holder that took the request lost the job, and the
				// one after it went on with the reindex.
				return fmt.Sprintf("reindexed %s: recorded at %s by the job's next holder (lease epoch %d); %s, which took the request, lost the job meanwhile\n", job.Name, at, pos.Epoch, r.Holder), nil
			}
			return fmt.Sprintf("reindexed %s: recorded by %s at %s\n", job.Name, r.Holder, at), nil
		}
		if time.Now().After(deadline) {
			return "", errs.New(errs.Failed, job.Name, "the reindex did not finish within %s (--timeout); it goes on in the sidecar: see `meilistream status`", f.timeout)
		}
	}
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
