package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongoerr"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// runStatus is the body of "meilistream status": one line per job, from
// what MongoDB holds (the state collection), not from a running sidecar:
// who holds its lease and until when, the lease epoch, the time of the
// recorded position and the job's lag, an unfinished reindex, and the
// documents in the errors collection; a paused job is marked so. Jobs of
// the transforms folder that have no state yet are listed too.
//
// The lag is the one of /status and the metrics (the age of the oldest
// change not yet durable), as far as MongoDB can tell: the age of the
// first change of the job's collection after its recorded position (a
// holder records its position once a batch is durable), 0s when there is
// none. It is not the age of the position itself: a caught-up job on a
// quiet collection records it only every MEILISTREAM_POSITION_INTERVAL.
func runStatus(ctx context.Context, inv *invocation) int {
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

	leases, err := w.leases.List(ctx)
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
		job   *transform.Job // from the transform, when it loads
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
	set, loadErr := loadJobs(inv.Config, inv.Log)
	if set != nil {
		for _, j := range set.Jobs() {
			get(j.Name).known = true
			get(j.Name).job = j
		}
	}
	// A file that does not load is still the job's: a running sidecar
	// keeps its previous version, so it is not "(no transform)".
	broken := map[string]bool{}
	for _, e := range joinedErrs(loadErr) {
		if n := errs.JobOf(e); n != "" {
			broken[n] = true
			get(n).known = true
		}
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)

	var notes []string
	// The headroom: how long each position can still be resumed from,
	// the position minus the oplog's oldest entry.
	window, winErr := stream.ReadWindow(ctx, w.client)
	if winErr != nil {
		notes = append(notes, "headroom unknown: "+w.scrub.Scrub(winErr.Error()))
	} else {
		notes = append(notes, "oplog window: "+window.Newest.Sub(window.Oldest).Truncate(time.Second).String()+" (headroom: how long a job can stay stopped before it cannot resume)")
	}
	var table []statusRow
	for _, n := range names {
		r := rows[n]
		row := statusRow{Job: n, State: "free"}
		held := false
		if l := r.lease; l != nil {
			row.Epoch = fmt.Sprint(l.Epoch)
			if l.Holder != "" && !l.Expired {
				held = true
				row.State, row.Holder, row.Expires = "held", l.Holder, statusTime(l.ExpiresAt)
			}
		}
		row.Errors = "0"
		if s := r.state; s != nil {
			if p := s.Position; p != nil && isScan(p.Token) {
				row.Position, row.Lag = scanPositionText(p.Token, now)
			} else if p := s.Position; p != nil {
				row.Position = statusTime(p.WallTime)
				if winErr == nil {
					row.Headroom = headroomText(p.WallTime.Truncate(time.Second).Sub(window.Oldest))
				}
				job := r.job
				if job == nil {
					// No file declares the job: the source its position was
					// recorded for, the main database when none was.
					coll := p.Collection
					if coll == "" {
						coll = n
					}
					job = &transform.Job{Job: jobdef.Job{Name: n, Database: p.Database, Collection: coll}}
				}
				since, err := firstChangeAfter(ctx, w.source, job, inv.Config.StateCollection, p.Token)
				switch {
				case err != nil:
					row.Lag = "?"
					notes = append(notes, fmt.Sprintf("%s: lag unknown: %s", n, err))
				case since.IsZero():
					row.Lag = "0s"
				default:
					row.Lag = lagText(now.Sub(since))
				}
				if !held {
					notes = append(notes, fmt.Sprintf("%s: no holder: its lag is as of now, and grows with every change until a pod takes the job", n))
				}
			}
			if c := s.Reindex; c != nil {
				row.Reindex = fmt.Sprint(c.Count)
				notes = append(notes, fmt.Sprintf("%s: an unfinished reindex, checkpoint at %d documents: the job's next holder continues it", n, c.Count))
				if c.Throttled != "" {
					row.Reindex += ",throttled"
					notes = append(notes, fmt.Sprintf("%s: reindex throttled (as of its checkpoint at %s): %s", n, statusTime(c.UpdatedAt), c.Throttled))
				}
			}
			row.Errors = fmt.Sprint(s.Errors)
		}
		if p, err := jobstate.ReadPause(ctx, w.state, n); err != nil {
			notes = append(notes, fmt.Sprintf("%s: paused or not unknown: %s", n, err))
		} else if p != nil {
			row.State = "paused"
			notes = append(notes, fmt.Sprintf("%s: paused since %s by %s: sends nothing, its position ages; `meilistream resume %s` resumes it", n, statusTime(p.PausedAt), p.PausedBy, n))
		}
		switch {
		case broken[n]:
			row.State = "load-error"
			notes = append(notes, fmt.Sprintf("%s: its transform file does not load (\"meilistream check\" says why); a running sidecar keeps the version it loaded last", n))
		case !r.known:
			row.State = "no-transform"
			notes = append(notes, fmt.Sprintf("%s: no transform file or variable declares this job: its state is left from an earlier one", n))
		}
		table = append(table, row)
	}
	if err := writeStatusTable(inv.Stdout, table); err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.Failed, "", err, "write status"))
	}
	// Pods that leave a job to a pod with a newer transform (a rollout
	// in progress): standing by, and why.
	present, err := jobstate.ReadPresence(ctx, w.state, w.prober.Pipelines)
	if err != nil {
		notes = append(notes, fmt.Sprintf("standbys unknown: %s", err))
	}
	for _, p := range present {
		if p.Waiting != "" {
			notes = append(notes, fmt.Sprintf("%s: %s stands by: %s", p.Job, p.Process, p.Waiting))
		}
	}
	for _, note := range notes {
		fmt.Fprintln(inv.Stdout, note)
	}
	return exitOK
}

// statusRow is one job's line of `meilistream status`, each cell one word
// (a column splits on blanks as it lines up on screen); "" prints as "-".
type statusRow struct {
	Job, State, Holder, Epoch, Expires, Position, Lag, Headroom, Reindex, Errors string
}

// statusHeader names statusRow's cells, in order.
const statusHeader = "JOB\tSTATE\tHOLDER\tEPOCH\tEXPIRES\tPOSITION\tLAG\tHEADROOM\tREINDEX\tERRORS"

// writeStatusTable prints the rows under statusHeader in aligned columns.
func writeStatusTable(w io.Writer, rows []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, statusHeader)
	for _, r := range rows {
		cells := []string{r.Job, r.State, r.Holder, r.Epoch, r.Expires, r.Position, r.Lag, r.Headroom, r.Reindex, r.Errors}
		for i, c := range cells {
			if c = strings.Join(strings.Fields(c), "_"); c == "" {
				c = "-"
			}
			cells[i] = c
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// statusTime is how status shows a point in time: server time in UTC, to
// the second, RFC 3339, in the table and in the notes alike; spans (lag,
// headroom, the oplog window) are Go durations to the second.
func statusTime(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// headroomText renders a headroom to the second; "lost" once the
// position is older than the oplog's oldest entry.
func headroomText(d time.Duration) string {
	if d < 0 {
		return "lost"
	}
	return d.Truncate(time.Second).String()
}

// lagText renders a lag that is not zero: to the millisecond under a
// second (never "0s", which says caught up), to the second above.
func lagText(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return "1ms"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// lagProbeTimeout bounds reading one job's stream for its lag.
const lagProbeTimeout = 5 * time.Second

// firstChangeAfter returns the wall time of the first change of the job's
// collection after token (its recorded position), zero when there is none
// yet: the oldest change the job has not recorded as durable. It reads the
// change stream as the job does (its database's, filtered as the job's,
// resumed after the token), skips the job's reindex watermarks, and stops
// at the first change or an empty batch.
func firstChangeAfter(ctx context.Context, sourceDB *mongo.Database, job *transform.Job, state string, token bson.Raw) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, lagProbeTimeout)
	defer cancel()
	// Lean: without the documents, an event over 16 MB after the
	// position reads like any other, whatever the server's version.
	cs, err := stream.Open(ctx, sourceDB, &job.Job, state, token, stream.Lean())
	if err != nil {
		return time.Time{}, streamProblem(err)
	}
	defer cs.Close(context.Background())
	for {
		if !cs.TryNext(ctx) {
			if err := cs.Err(); err != nil {
				return time.Time{}, streamProblem(err)
			}
			return time.Time{}, nil
		}
		db, _ := cs.Current.Lookup("ns", "db").StringValueOK()
		if coll, _ := cs.Current.Lookup("ns", "coll").StringValueOK(); coll != state || db != "" && db != sourceDB.Name() {
			break
		}
	}
	if w, err := cs.Current.LookupErr("wallTime"); err == nil {
		if dt, ok := w.DateTimeOK(); ok {
			return time.UnixMilli(dt), nil
		}
	}
	if ct, err := cs.Current.LookupErr("clusterTime"); err == nil {
		if t, _, ok := ct.TimestampOK(); ok {
			return time.Unix(int64(t), 0), nil
		}
	}
	return time.Time{}, errors.New("the change after the position has no time")
}

// streamProblem says why the stream after a position cannot be read, in
// a few words for the status table's notes.
func streamProblem(err error) error {
	if mongoerr.HistoryLost(err) {
		return errors.New("the position is older than the server's change history (the job reindexes, or fails with ON_HISTORY_LOST=fail)")
	}
	return errors.New(redactedErr(err))
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

// joinedErrs lists the errors an errors.Join holds (err itself when it
// joins nothing, none for nil).
func joinedErrs(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, joinedErrs(e)...)
		}
		return out
	}
	return []error{err}
}

func isScan(tok bson.Raw) bool { _, _, ok := engine.ScanPosition(tok); return ok }

// scanPositionText is a scan-mode job's position for the table: its
// cursor, and the scan's lag (now less the cursor's key, for a date key;
// "-" for a number). A scan has no oplog, so no headroom.
func scanPositionText(tok bson.Raw, now time.Time) (pos, lag string) {
	cursor, at, _ := engine.ScanPosition(tok)
	if cursor == "" {
		cursor = "none-yet"
	}
	lag = "-"
	if !at.IsZero() {
		lag = lagText(now.Sub(at))
	}
	return "scan:" + cursor, lag // one word, as every cell
}
