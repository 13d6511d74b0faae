package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// Exit codes of verify (README.md, "Operations"): exitOK no drift (or all
// of it repaired), exitFailed drift found and not repaired, exitUsage bad
// usage or configuration, exitUnfinished the verify did not finish.
const exitUnfinished = 3

// defaultVerifyShow is how many ids of each kind verify prints unless
// --show says otherwise.
const defaultVerifyShow = 20

// verifyRepairWait bounds how long verify --repair waits for the holder to
// answer one repair request.
var verifyRepairWait = 10 * time.Minute

// verifyFlags are the flags of "meilistream verify".
type verifyFlags struct {
	repair bool
	json   bool
	rate   float64
	show   int
}

func (f *verifyFlags) define(fs *flag.FlagSet) {
	f.show = defaultVerifyShow
	fs.BoolVar(&f.repair, "repair", false, `write the differing documents again and delete the extra
ones: through the job's holder when a sidecar runs it (in
order with its change stream), else under the job's lease`)
	fs.BoolVar(&f.json, "json", false, `one JSON object: {"job", "checked", "missing", "stale",
"extra", "repaired", "skippedChanging", "errors",
"durationMs", "samples": {"missing", "stale", "extra"}}`)
	fs.Func("rate", "read at most `N` documents per second (default: no bound)", func(v string) error {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 {
			return fmt.Errorf("wants documents per second, above 0 (0: no bound)")
		}
		f.rate = r
		return nil
	})
	fs.Func("show", fmt.Sprintf("print up to `N` ids of each kind (default %d)", defaultVerifyShow), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("wants a number of ids of each kind, 0 or more")
		}
		f.show = n
		return nil
	})
}

// runVerify is the body of "meilistream verify NAME": it compares the
// job's destination with what its transform makes of the collection and
// prints what differs; with --repair, it writes the differing documents
// again (through the job's holder when one runs, ordered with its stream;
// else under the job's lease).
func runVerify(ctx context.Context, inv *invocation, a verifyFlags) int {
	name := inv.Args[0]
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return verifyFail(inv.Stderr, "", err)
	}
	defer w.close()
	job, err := w.oneJob(inv, name)
	if err != nil {
		return verifyFail(inv.Stderr, name, err)
	}
	if err := w.reach(ctx); err != nil {
		return verifyFail(inv.Stderr, job.Name, err)
	}
	// verify only reads, and holds no lease: a repair builds its own
	// sink under the lease it takes.
	dst, err := w.sinkFactory(inv.Log)(job, sink.Unguarded)
	if err != nil {
		return verifyFail(inv.Stderr, job.Name, err)
	}
	followed, err := w.followed(ctx, job.Name)
	if err != nil {
		return verifyFail(inv.Stderr, job.Name, err)
	}
	opts := engine.VerifyOptions{Rate: a.rate, Show: a.show, Followed: followed, Log: inv.Log.Named(job.Name)}
	if a.repair {
		opts.Repair = func(ctx context.Context, ids []bson.RawValue) (int64, error) {
			return w.repair(ctx, inv, job, ids)
		}
	}
	rep, err := w.engine.Verify(ctx, job, dst, opts)
	if err != nil {
		return verifyFail(inv.Stderr, job.Name, err)
	}
	if a.json {
		printVerifyJSON(inv.Stdout, job.Name, rep)
	} else {
		printVerify(inv.Stdout, job.Name, rep, a.repair)
	}
	if rep.Drift() > rep.Repaired {
		return exitFailed
	}
	return exitOK
}

// verifyFail prints why verify did not finish: exit 2 for usage or
// configuration, else 3 (never a partial result).
func verifyFail(stderr io.Writer, job string, err error) int {
	if errs.CodeOf(err) == errs.ConfigInvalid {
		return fail(stderr, err)
	}
	what := "verify did not finish"
	if job != "" {
		what = "verify of " + job + " did not finish"
	}
	fmt.Fprintf(stderr, "meilistream: %s, no result: %s\n", what, errs.Format(err))
	return exitUnfinished
}

// followed says whether a process holds the job's lease now (its holder
// follows the job).
func (w *wiring) followed(ctx context.Context, name string) (bool, error) {
	infos, err := w.leases.List(ctx)
	if err != nil {
		return false, err
	}
	for _, i := range infos {
		if i.Name == name && i.Holder != "" && !i.Expired {
			return true, nil
		}
	}
	return false, nil
}

// repair writes ids again: through the job's holder when one runs (a
// repair request, as retry's), else under the job's lease for the time of
// the repair. It returns how many it made durable.
func (w *wiring) repair(ctx context.Context, inv *invocation, job *transform.Job, ids []bson.RawValue) (int64, error) {
	var sum struct{ written, gone int64 }
	err := w.underLease(ctx, job.Name, func(ctx context.Context, l leaseForEngine) error {
		dst, err := w.sinkFactory(inv.Log)(job, sink.NewGuard(l.Held))
		if err != nil {
			return err
		}
		s, err := w.engine.Repair(ctx, job, dst, l, ids)
		sum.written, sum.gone = s.Written, s.Gone
		return err
	})
	if errors.Is(err, errs.ErrRunning) {
		r, herr := w.askHolder(ctx, inv, job, jobstate.RepairKind, "", verifyRepairWait, ids...)
		if herr != nil {
			return 0, herr
		}
		return r.Written + r.Gone, nil
	}
	return sum.written + sum.gone, err
}

// printVerify prints the summary line, then up to --show ids of each kind.
func printVerify(out io.Writer, job string, r *engine.VerifyReport, repair bool) {
	verdict := "no drift"
	switch {
	case r.Drift() > 0 && r.Repaired >= r.Drift():
		verdict = "drift repaired"
	case r.Drift() > 0 && repair:
		verdict = "drift found, not all repaired"
	case r.Drift() > 0:
		verdict = "drift found"
	}
	fmt.Fprintf(out, "verified %s: %s: checked %d, missing %d, stale %d, extra %d, repaired %d, skipped (changing) %d, errors %d, in %s\n",
		job, verdict, r.Checked, r.Missing, r.Stale, r.Extra, r.Repaired, r.SkippedChanging, r.Errors, r.Duration.Round(time.Millisecond))
	if !r.Followed {
		fmt.Fprintf(out, "no process follows job %s: a difference may be a change it has not applied yet\n", job)
	}
	if r.Errors > 0 {
		fmt.Fprintf(out, "the transform failed on %d documents (errors, not drift): see meilistream errors %s\n", r.Errors, job)
	}
	for _, k := range []engine.DriftKind{engine.DriftMissing, engine.DriftStale, engine.DriftExtra} {
		for _, s := range r.Samples[k] {
			if s.Field != "" {
				fmt.Fprintf(out, "  %-7s %s  (field %s)\n", k, idText(s.ID), strconv.Quote(s.Field))
			} else {
				fmt.Fprintf(out, "  %-7s %s\n", k, idText(s.ID))
			}
		}
	}
}

type verifySampleJSON struct {
	ID    json.RawMessage `json:"id"`
	Field string          `json:"field,omitempty"`
}

// printVerifyJSON prints one JSON object: {"job", "checked", "missing",
// "stale", "extra", "repaired", "skippedChanging", "errors",
// "durationMs", "samples": {"missing": [...], "stale": [...], "extra":
// [...]}}; a sample is {"id"} (Extended JSON of the _id), with "field"
// for a stale one.
func printVerifyJSON(out io.Writer, job string, r *engine.VerifyReport) {
	samples := func(k engine.DriftKind) []verifySampleJSON {
		list := []verifySampleJSON{}
		for _, s := range r.Samples[k] {
			list = append(list, verifySampleJSON{ID: idJSON(s.ID), Field: s.Field})
		}
		return list
	}
	type samplesJSON struct {
		Missing []verifySampleJSON `json:"missing"`
		Stale   []verifySampleJSON `json:"stale"`
		Extra   []verifySampleJSON `json:"extra"`
	}
	b, _ := json.Marshal(struct {
		Job             string      `json:"job"`
		Checked         int64       `json:"checked"`
		Missing         int64       `json:"missing"`
		Stale           int64       `json:"stale"`
		Extra           int64       `json:"extra"`
		Repaired        int64       `json:"repaired"`
		SkippedChanging int64       `json:"skippedChanging"`
		Errors          int64       `json:"errors"`
		DurationMs      int64       `json:"durationMs"`
		Samples         samplesJSON `json:"samples"`
	}{job, r.Checked, r.Missing, r.Stale, r.Extra, r.Repaired, r.SkippedChanging, r.Errors, r.Duration.Milliseconds(),
		samplesJSON{samples(engine.DriftMissing), samples(engine.DriftStale), samples(engine.DriftExtra)}})
	fmt.Fprintf(out, "%s\n", b)
}
