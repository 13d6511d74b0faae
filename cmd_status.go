package main

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// runStatus is the body of "meilistream status": one line per job, from
// what MongoDB holds (the state collection), not from a running sidecar:
// who holds its lease and until when, the lease epoch, the time of the
// recorded position and how far that is behind the server's clock, an
// unfinished reindex, and the documents in the errors collection. Jobs of
// the transforms folder that have no state yet are listed too.
func runStatus(ctx context.Context, inv *invocation) int {
	if len(inv.Args) != 0 {
		return usageError(inv.Stderr, "status", "takes no arguments, got %q", inv.Args[0])
	}
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()
	if err := w.reach(ctx); err != nil {
		return fail(inv.Stderr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	leases, err := lease.List(ctx, w.state)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	states, err := jobstate.ReadState(ctx, w.state, w.errColl)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	now, err := serverTime(ctx, w)
	if err != nil {
		return fail(inv.Stderr, err)
	}

	type row struct {
		lease *lease.Info
		state *jobstate.JobState
		known bool
	}
	rows := map[string]*row{}
	get := func(name string) *row {
		if rows[name] == nil {
			rows[name] = &row{}
		}
		return rows[name]
	}
	for i := range leases {
		get(leases[i].Name).lease = &leases[i]
	}
	for i := range states {
		get(states[i].Name).state = &states[i]
	}
	if set, _ := loadJobs(inv.Config, inv.Log); set != nil {
		for _, j := range set.Jobs() {
			get(j.Name).known = true
		}
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)

	tw := tabwriter.NewWriter(inv.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tHOLDER\tEPOCH\tLEASE\tPOSITION\tLAG\tREINDEX\tERRORS")
	for _, n := range names {
		r := rows[n]
		holder, epoch, until := "-", "-", "-"
		if l := r.lease; l != nil {
			epoch = fmt.Sprint(l.Epoch)
			switch {
			case l.Holder == "" || l.Expired:
				holder, until = "-", "free"
			default:
				holder = l.Holder
				until = "until " + l.ExpiresAt.UTC().Format(time.RFC3339)
			}
		}
		pos, lag, reindex, errCount := "none", "-", "-", "0"
		if s := r.state; s != nil {
			if p := s.Position; p != nil {
				pos = p.WallTime.UTC().Format(time.RFC3339)
				lag = max(now.Sub(p.WallTime), 0).Round(time.Second).String()
			}
			if c := s.Reindex; c != nil {
				reindex = fmt.Sprintf("checkpoint at %d documents", c.Count)
			}
			errCount = fmt.Sprint(s.Errors)
		}
		name := n
		if !r.known {
			name += " (no transform)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, holder, epoch, until, pos, lag, reindex, errCount)
	}
	if err := tw.Flush(); err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.Failed, "", err, "write status"))
	}
	return exitOK
}

// serverTime is MongoDB's clock (hello's localTime): lags are measured
// against the server that stamped the positions, not this machine.
func serverTime(ctx context.Context, w *wiring) (time.Time, error) {
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	err := w.client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	if err != nil {
		return time.Time{}, errs.Wrap(errs.Failed, "", err, "ask MongoDB for its time")
	}
	if hello.LocalTime.IsZero() {
		return time.Now(), nil
	}
	return hello.LocalTime, nil
}
