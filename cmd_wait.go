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

// waitArgs are the arguments of "meilistream wait".
type waitArgs struct {
	job     string
	after   bson.Timestamp
	timeout time.Duration
}

// parseWaitArgs reads NAME --after S.I [--timeout D], the flags before or
// after the name.
func parseWaitArgs(args []string) (waitArgs, error) {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	after := fs.String("after", "", "")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "")
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return waitArgs{}, err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	a := waitArgs{timeout: *timeout}
	switch len(names) {
	case 0:
		return a, errors.New("want a job name")
	case 1:
		a.job = names[0]
	default:
		return a, fmt.Errorf("want one job name, got %d: wait for each job in its own command", len(names))
	}
	if *after == "" {
		return a, errors.New("want --after CLUSTER_TIME: " + durable.Accepted)
	}
	ts, err := durable.Parse(*after)
	if err != nil {
		return a, fmt.Errorf("--after: %w", err)
	}
	a.after = ts
	if a.timeout <= 0 {
		return a, fmt.Errorf("--timeout wants a positive Go duration, e.g. 10s, got %s", a.timeout)
	}
	return a, nil
}

// runWait is the body of "meilistream wait NAME --after S.I": it waits
// until every change of the job at or before that cluster time is durable
// in the destination, as GET /wait does on a standby (the holder's durable
// time recorded in MongoDB, made prompt by a wait document), and prints the
// job's durable time. Exit 0 searchable, 1 timed out, 2 usage, 3 could not
// finish (no process holds the job, MongoDB unreachable).
func runWait(ctx context.Context, inv *invocation) int {
	a, err := parseWaitArgs(inv.Args)
	if err != nil {
		return usageError(inv.Stderr, "wait", "%v", err)
	}
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
