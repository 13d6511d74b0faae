package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// defaultPauseWait is how long `meilistream pause` and `resume` wait for
// the job's holder to answer: a pause waits for the batches in flight.
const defaultPauseWait = 2 * time.Minute

// pauseFlags are the flags of "meilistream pause" and "resume".
type pauseFlags struct {
	wait time.Duration
}

func (f *pauseFlags) define(fs *flag.FlagSet) {
	fs.DurationVar(&f.wait, "wait", defaultPauseWait, "how long to wait for the sidecar's answer, a Go `DURATION`")
}

// runPause is the body of "meilistream pause NAME".
func runPause(ctx context.Context, inv *invocation, f pauseFlags) int {
	return pauseOrResume(ctx, inv, jobstate.PauseKind, f)
}

// runResume is the body of "meilistream resume NAME".
func runResume(ctx context.Context, inv *invocation, f pauseFlags) int {
	return pauseOrResume(ctx, inv, jobstate.ResumeKind, f)
}

// pauseOrResume pauses (kind PauseKind) or resumes job NAME. When a
// process holds the job's lease it asks it (a request in the state
// collection, as retry does) and prints its answer: a pause is answered
// once what the holder had in flight is durable. When none does, it takes
// the lease and records (or clears) the pause itself: the job's next
// holder starts paused, or not. The pause is recorded in MongoDB either
// way, so it outlives restarts and takeovers.
func pauseOrResume(ctx context.Context, inv *invocation, kind string, f pauseFlags) int {
	if f.wait <= 0 {
		return usageError(inv.Stderr, kind, "--wait wants a positive Go duration, e.g. 1m, got %s", f.wait)
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
	var out string
	err = w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		was, err := w.engine.Paused(ctx, job.Name)
		if err != nil {
			return err
		}
		if err := w.engine.SetPaused(ctx, job.Name, l, kind == jobstate.PauseKind); err != nil {
			return err
		}
		switch {
		case kind == jobstate.PauseKind && was != nil:
			out = fmt.Sprintf("%s is already paused (since %s); no process runs it\n", job.Name, was.PausedAt.UTC().Format(time.RFC3339))
		case kind == jobstate.PauseKind:
			out = fmt.Sprintf("paused %s: no process runs it; the one that takes it next starts paused, until `meilistream resume %s`\n", job.Name, job.Name)
		case was == nil:
			out = fmt.Sprintf("%s is not paused; no process runs it\n", job.Name)
		default:
			out = fmt.Sprintf("resumed %s: no process runs it; the one that takes it next follows from its recorded position\n", job.Name)
		}
		return nil
	})
	if errors.Is(err, errs.ErrRunning) {
		var r *jobstate.RetryRequest
		r, err = w.askHolder(ctx, inv, job, kind, "", f.wait)
		if err == nil {
			out = fmt.Sprintf("%s %s: holder %s: %s\n", pastTense(kind), job.Name, r.Holder, r.Note)
		}
	}
	if err != nil {
		return fail(inv.Stderr, err)
	}
	fmt.Fprint(inv.Stdout, out)
	return exitOK
}

func pastTense(kind string) string {
	switch kind {
	case jobstate.PauseKind:
		return "paused"
	case jobstate.ResumeKind:
		return "resumed"
	}
	return kind
}
