package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/durable"
)

// Exit codes of "meilistream wait" beyond exitOK and exitUsage.
const (
	exitWaitTimedOut = 1 // the timeout passed first
	exitWaitNoAnswer = 3 // could not finish: no holder, MongoDB unreachable
)

// defaultWaitTimeout is how long "meilistream wait" waits unless
// --timeout says otherwise: GET /wait's default.
const defaultWaitTimeout = 5 * time.Second

// waitFlags are the flags of "meilistream wait".
type waitFlags struct {
	after    bson.Timestamp
	afterSet bool
	timeout  time.Duration
}

func (f *waitFlags) define(fs *flag.FlagSet) {
	f.timeout = defaultWaitTimeout
	fs.Func("after", "the write's cluster time `S.I`: "+durable.Accepted, func(v string) error {
		ts, err := durable.Parse(v)
		if err != nil {
			return err
		}
		f.after, f.afterSet = ts, true
		return nil
	})
	fs.Func("timeout", fmt.Sprintf("how long to wait, a Go `DURATION` (default %s)", defaultWaitTimeout), func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("wants a positive Go duration, e.g. 10s")
		}
		f.timeout = d
		return nil
	})
}

// runWait is the body of "meilistream wait NAME --after S.I": it waits
// until every change of the job at or before that cluster time is durable
// in the destination, as GET /wait does on a standby (the holder's durable
// time recorded in MongoDB, made prompt by a wait document), and prints the
// job's durable time. Exit 0 searchable, 1 timed out, 2 usage, 3 could not
// finish (no process holds the job, MongoDB unreachable).
func runWait(ctx context.Context, inv *invocation, f *waitFlags) int {
	if !f.afterSet {
		return usageError(inv.Stderr, "wait", "want --after CLUSTER_TIME: %s", durable.Accepted)
	}
	a := struct {
		job     string
		after   bson.Timestamp
		timeout time.Duration
	}{inv.Args[0], f.after, f.timeout}
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return waitFailed(inv.Stderr, err)
	}
	defer w.close()
	if _, err := w.oneJob(inv, a.job); err != nil {
		return waitFailed(inv.Stderr, err)
	}
	if err := w.reach(ctx); err != nil {
		return waitFailed(inv.Stderr, err)
	}
	w.jobs.only = a.job
	wctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	d, err := w.waiter.Wait(wctx, a.job, a.after)
	switch {
	case err == nil:
		fmt.Fprintf(inv.Stdout, "%s: durable up to %s\n", a.job, durable.Format(d))
		return exitOK
	case errors.Is(err, durable.ErrTimeout):
		fmt.Fprintf(inv.Stderr, "meilistream wait: %s: timed out after %s; durable up to %s, not yet %s\n",
			a.job, a.timeout, durable.Format(d), durable.Format(a.after))
		return exitWaitTimedOut
	case errors.Is(err, durable.ErrNoHolder):
		fmt.Fprintf(inv.Stderr, "meilistream wait: %s: no sidecar holds the job's lease, so nothing makes its changes durable (durable up to %s); start one, or see \"meilistream status\"\n",
			a.job, durable.Format(d))
		return exitWaitNoAnswer
	case ctx.Err() != nil:
		fmt.Fprintf(inv.Stderr, "meilistream wait: %s: interrupted\n", a.job)
		return exitWaitNoAnswer
	default:
		fmt.Fprintf(inv.Stderr, "meilistream wait: %s: could not finish: %v\n", a.job, err)
		return exitWaitNoAnswer
	}
}

// waitFailed prints err and returns its exit code as "meilistream wait"
// has them: 2 for usage and configuration (an unknown job too), else 3,
// never 1, which says "timed out".
func waitFailed(stderr io.Writer, err error) int {
	if fail(stderr, err) == exitUsage {
		return exitUsage
	}
	return exitWaitNoAnswer
}
