package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// DefaultPendingBytes bounds the change events gathered into one batch
// (besides batchSize): a batch of large documents is sent before it holds
// more than this.
const DefaultPendingBytes = 16 << 20

// lagInterval is how often the follow lag gauge is updated while following.
var lagInterval = time.Second

// chunkPositionInterval is the least time between two positions recorded
// at a reindex's marks: each record is a write, and the history (oplog) the
// stream must keep up with holds those too.
const chunkPositionInterval = time.Second

// followPlan is what one follow starts from.
type followPlan struct {
	tok   bson.Raw  // resume after it; empty: at the present
	since time.Time // wall time of tok, for the log
	// reindex runs a reindex interleaved with the stream, resuming cp
	// when it is of the same transform (and its staged index is there).
	reindex bool
	cp      *jobstate.Checkpoint
	// untilReindexed stops cleanly once the reindex is recorded
	// (`meilistream reindex NAME`).
	untilReindexed bool
	// ownMode is the reindex mode of the job as defined when the job run
	// is a copy in another mode (Engine.RunReindexing); empty otherwise.
	ownMode string
	// scan: the job runs in scan mode (scan.go), from the cursors of
	// tok (none: from the greatest key when it reindexes, from the least
	// otherwise).
	scan bool
}

// follow applies the job's change stream until ctx ends (nil, after a
// flush), the lease is lost, the history is lost (stream.ErrHistoryLost), the
// collection is invalidated, or a non-retryable error; with plan.reindex it
// runs a reindex interleaved with it, and reports it.
func (e *Engine) follow(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, plan followPlan, log hclog.Logger) (*Summary, error) {
	jc := e.jobCfg(job)
	jc.timeouts = newTimeouts(job.CallTimeout(), log)
	main := e.source.Name()
	f := &follower{e: e, jc: jc, l: l, stats: stats, log: log, tok: plan.tok, deps: resolvedDeps(&job.Job, main), lastRecorded: plan.tok, lastWall: plan.since, ownMode: plan.ownMode, byHand: plan.untilReindexed}
	f.ownNS = jobdef.Namespace(cmp.Or(job.Database, main), job.Collection)
	f.stateNS = jobdef.Namespace(main, e.stateName)
	f.relatedColls = map[string]bool{}
	for _, d := range f.deps {
		f.relatedColls[d.Namespace()] = true
	}
	f.reset()
	stats.LagReset()
	if plan.scan {
		f.scan = e.newScanner(jc, dst, stats, plan.tok, log)
		if err := f.scan.start(ctx, plan.reindex); err != nil {
			return nil, closeOr(ctx, l, err)
		}
	}
	if err := f.open(ctx); err != nil {
		return nil, closeOr(ctx, l, err)
	}
	if len(f.lastRecorded) == 0 {
		// Where the stream (or the scan's cursors) starts, on a first
		// run: what a reindex committed while a related change's
		// fan-out is outstanding records, so that the change, read
		// after this token, is read again after a restart. Left empty,
		// that commit had no position to record and failed the job.
		f.lastRecorded = f.tok
	}
	defer func() { f.reader.Close() }() // the one open last: a resume or an error reopens it

	var snap *Reindex
	if plan.reindex {
		var err error
		o := reindexOptions{
			Store: e.store, Lease: l, Dest: dst, Stats: stats, Observer: e.obs,
			PageSize: jc.PageSize, ProgressInterval: jc.ProgressInterval, Engine: e,
			Throttle: jc.throttle(dst),
			Asked:    plan.ownMode != "" && plan.ownMode != reindexMode(job),
		}
		// In scan mode no stream reads the claims' marks: the holder
		// reads alone.
		if !plan.scan && e.sharePlan(ctx, jc) {
			o.Shared = jc.ReindexParallel
		}
		snap, err = startReindex(ctx, f.source(), o, plan.cp)
		if err != nil {
			return nil, closeOr(ctx, l, err)
		}
	} else {
		stats.SetPhase(status.PhaseFollowing)
	}

	// The pipe outlives ctx on a clean close, so pending changes can be
	// flushed and recorded; the lease still stops it at once.
	pctx, pstop := leaseContext(context.WithoutCancel(ctx), l)
	defer pstop()
	f.p = e.newPipe(pctx, jc, dst, sink.NewGuard(l.Held), stats, log, true)
	defer f.p.Abort(pipe.Closed)
	f.dog = newWatchdog(jc.FlushInterval, jc.WatchdogAnswer, func() (int64, int32) {
		if f.pausedNow.Load() {
			return 0, 0 // paused: what waits for the stream is not stalled (pause.go)
		}
		return f.fanPending.Load(), f.waiting.Load()
	})
	f.p.dog = f.dog
	defer e.watch(ctx, f.dog, job.Name, stats, log)()
	f.lagc = newLagClock(f.tok)
	f.tick = make(chan time.Time, 1)
	defer e.clock(ctx, f.lagc, f.dog, stats, f.ticked)()
	set, err := loadSet(ctx, e.store, job.Name, e.obs)
	if err != nil {
		f.p.Abort(err)
		return nil, closeOr(ctx, l, err)
	}
	f.p.errs = set
	if f.stale, err = e.loadStaleJoins(ctx, job.Name); err != nil {
		f.p.Abort(err)
		return nil, closeOr(ctx, l, err)
	}
	if snap != nil {
		f.startSnapshot(pctx, snap)
		defer func() {
			snap.Stop()
			snap.AbortCheckpoint()
		}()
	}
	f.pctx = pctx
	defer func() {
		if f.fan != nil {
			f.fan.Stop()
		}
	}()
	if len(f.deps) > 0 {
		f.startFan()
	}
	f.retries, f.retryKick = make(chan *retryRequest), make(chan struct{}, 1)
	stopRetries := f.serveRetries(ctx)
	defer stopRetries()
	if job.Verify && !plan.untilReindexed {
		stopVerify := f.startVerify(ctx)
		defer stopVerify()
	}
	if !plan.since.IsZero() {
		// The recorded position's age shows from the start (a paused job
		// records no other).
		stats.Update(func(s *status.JobSnapshot) { s.LastPosition = plan.since })
		e.observePosition(job.Name, plan.since)
	}
	if !plan.untilReindexed {
		pause, err := e.store.ReadPause(ctx, job.Name)
		if err != nil {
			f.p.Abort(err)
			return nil, closeOr(ctx, l, err)
		}
		if pause != nil {
			if err := f.enterPause(pause.PausedAt); err != nil {
				return nil, closeOr(ctx, l, err)
			}
			log.Info("paused since "+pause.PausedAt.UTC().Format(time.RFC3339)+" (recorded in MongoDB): sending nothing until `meilistream resume "+job.Name+"`", "paused_by", pause.PausedBy)
		}
	}
	if plan.since.IsZero() {
		// A position with no time of its own (a fresh stream opened at
		// the present): say so rather than print year one.
		log.Info("following", "collection", job.Collection, "since", "now")
	} else {
		log.Info("following", "collection", job.Collection, "since", plan.since.UTC().Format(time.RFC3339))
	}
	err = f.loop(ctx, plan.untilReindexed)
	if snap != nil {
		snap.Stop()
		if f.committed {
			return snap.Summary(), err
		}
	}
	return nil, err
}

// source is where the job's chains (the reindex's, the fan-out's) read
// and mark.
func (f *follower) source() Source {
	return Source{
		DB: f.e.source, State: f.e.stateName, Job: f.jc.job, Log: f.log,
		Wait:    f.e.wait,
		Blame:   func(ctx context.Context, err error) error { return leaseOr(ctx, f.l, err) },
		Waiting: &f.waiting,
		Marks:   f.marks(),
	}
}

// changes is what the follow loop reads its stream through: its share of
// the stream of its database (stream.Sub), or, for a stream the job
// cannot share (its declared fields, a lean stretch), a Reader of its own.
type changes interface {
	Items() <-chan stream.Item
	Taken(stream.Item)
	Close()
}

// marks is the chains' Source.Marks: the scanner's in scan mode, nil (a
// mark written in the state collection) otherwise.
func (f *follower) marks() func(string) {
	if f.scan == nil {
		return nil
	}
	return f.scan.mark
}

// follower is the follow loop's state.
type follower struct {
	e      *Engine
	jc     jobConfig
	l      Lease
	stats  *status.JobStats
	log    hclog.Logger
	p      *delivery
	reader changes
	// scan reads the collection by its key in scan mode (the reader's
	// feed); nil in stream mode.
	scan *scanner

	pending      map[string]int // coalescing key -> index in items
	items        []Item
	pendingBytes int
	// flushT sends what is pending flushInterval after the first of it
	// was written (firstWall, its wall time); flushArmed says it is
	// running (armFlush).
	flushT     *time.Timer
	flushArmed bool
	firstWall  time.Time
	lastTok    bson.Raw  // token of the last change in items
	wall       time.Time // its wall time
	tok        bson.Raw  // the last token read (event or idle): where to reopen
	posReq     time.Time // when a position was last submitted for recording
	retryAt    time.Time
	attempt    int
	changes    int64 // document changes read, not yet counted in the stats

	// readCT is the cluster time of the last event or idle token read:
	// every change before it is pending or handed to the pipe.
	readCT bson.Timestamp

	// The running reindex, and the sweep's ids to delete at its end.
	snap      *Reindex
	waiting   atomic.Int32 // the chains' marks written and not yet read
	gone      map[string]bson.RawValue
	committed bool

	// Related changes: the job's dependencies, the collections they are
	// on, the values gathered since the last flush, and the fan-out
	// reader sending the dependents again. fanPending counts the fan-out
	// tasks not yet durable (the follow loop adds them, the pipe's wait
	// stage ends them); no position is recorded while it is above zero.
	deps         []jobdef.Dependency // their databases resolved (resolvedDeps)
	relatedColls map[string]bool     // the namespaces (db.coll) of deps
	// ownNS, stateNS are the namespaces of the job's collection and of the
	// state collection: events are told apart by them (database.go).
	ownNS, stateNS string
	related        relatedKeys
	relatedN       int
	fan            *Fanout
	fanPending     atomic.Int64
	// relatedAllPending: a related collection went away; the next flush
	// sends every document again.
	relatedAllPending bool
	// stale: the dependencies whose dependents may hold an old join
	// (stalejoins.go); staleBase, the marks the running reindex forgets
	// when it commits.
	stale     *staleJoins
	staleBase int64
	// fanBusy counts the fan-out reader's tasks handed over and not yet
	// at their last mark (the follow loop's): only while it is above zero
	// does the reader's window need the keys the stream changes (a task's
	// reads all happen after it was handed over, so they see every change
	// before).
	fanBusy int

	// pctx is the pipe's context (a fan-out reader started later runs
	// under it); retries takes the requests of `meilistream retry`,
	// `pause`, `resume` and `reindex` (retrylive.go, pause.go).
	pctx    context.Context
	retries chan *retryRequest
	// retryKick tells the request taker that the stream read a request's
	// arrival (kickRetries).
	retryKick chan struct{}
	// paused: the stream is closed until a resume (pause.go), since
	// pausedAt; pauseWarned is when the log last said so.
	paused                bool
	pausedAt, pauseWarned time.Time
	pausedNow             atomic.Bool // paused, for the watchdog's goroutine
	// reindexNext: the follow ends for a reindex asked of the holder;
	// modeAsked, in that mode rather than the job's.
	reindexNext bool
	modeAsked   string
	ownMode     string // followPlan.ownMode
	byHand      bool   // followPlan.untilReindexed: a `meilistream reindex` holds the job

	// The last position recorded (the pipe's wait stage writes it, a
	// control flight reads it once everything is durable).
	recMu        sync.Mutex
	lastRecorded bson.Raw
	lastWall     time.Time

	// large: how the stream is read around change events over 16 MB
	// (stream.Large).
	large stream.Large

	// tick wakes the loop every lagInterval while it has a use for it
	// (ticked).
	tick chan time.Time

	// dog is the job's watchdog (watchdog.go): the loop tells it what
	// waits for a flush, the pipe what is in flight.
	dog *watchdog
	// lagc holds the cluster times of what the stream read and what is
	// recorded, against the source's newest (lag.go).
	lagc *lagClock
}

// reset starts the next batch, its buffers sized to the last one's (at
// least a few entries, at most a batch): an idle job, most of a process
// holding hundreds, holds little, and a busy one does not grow them again.
func (f *follower) reset() {
	n := min(f.jc.BatchSize, max(16, len(f.items)))
	f.pending = make(map[string]int, n)
	f.items = make([]Item, 0, n)
	f.pendingBytes = 0
	f.firstWall = time.Time{}
}

// chains are the chains whose windows are open: the reindex's, the
// fan-out's.
func (f *follower) chains() []*Chain {
	var out []*Chain
	if f.snap != nil {
		out = append(out, f.snap.Chain)
	}
	if f.fan != nil {
		out = append(out, f.fan.Chain)
	}
	return out
}

// changedKey notes that the stream changed the document of key k, for
// every chain's window.
func (f *follower) changedKey(k string) {
	if f.snap != nil {
		f.snap.shared.changed(k)
	}
	for _, c := range f.chains() {
		if c == f.fanChain() && f.fanBusy == 0 {
			continue
		}
		c.Changed[k] = true
	}
}

// fanChain is the fan-out reader's chain, nil without one.
func (f *follower) fanChain() *Chain {
	if f.fan == nil {
		return nil
	}
	return f.fan.Chain
}

// open opens the stream after f.tok (at the present when empty), retrying
// transient errors; stream.ErrHistoryLost when the history no longer holds f.tok.
func (f *follower) open(ctx context.Context) error {
	if f.scan != nil {
		if len(f.tok) == 0 {
			f.tok = f.scan.token()
		} else if f.reader != nil {
			// Reopened after an error: on from the last cursors taken in
			// (the feed may have read past what it handed over), the
			// windows' documents sent again when next read.
			f.scan.reset(f.tok)
		}
		f.reader = stream.StartFeed(ctx, f.scan.feed(f.e.stateName), f.jc.ReadAhead)
		return nil
	}
	for {
		if !f.large.Lean() {
			hub := f.e.hubs.For(f.e.source)
			if stream.Cluster(&f.jc.job.Job, f.e.source.Name()) {
				hub = f.e.hubs.Cluster(f.e.source)
			}
			sub, err := hub.Join(ctx, &f.jc.job.Job, f.tok, stream.Pace(f.jc.FlushInterval), f.jc.ReadAhead, f.hurry)
			if err == nil {
				if len(f.tok) == 0 {
					f.tok = append(bson.Raw(nil), sub.ResumeToken()...)
				}
				f.reader = sub
				return nil
			}
			if err := f.openFailed(ctx, err); err != nil {
				return err
			}
			continue
		}
		cs, err := stream.Open(ctx, f.e.source, &f.jc.job.Job, f.e.stateName, f.tok, f.large.Options()...)
		if f.large.Unsplit(err) {
			// A server before 7.0 and 6.0.9: events over 16 MB are read
			// by a lean stream instead.
			f.log.Info("MongoDB has no $changeStreamSplitLargeEvent (before 6.0.9 and 7.0): a change event over 16 MB will be read without its documents, and they by _id")
			continue
		}
		if err == nil {
			if len(f.tok) == 0 {
				f.tok = append(bson.Raw(nil), cs.ResumeToken()...)
			}
			f.reader = stream.Start(ctx, cs, stream.Pace(f.jc.FlushInterval), f.jc.ReadAhead, f.hurry)
			return nil
		}
		if err := f.openFailed(ctx, err); err != nil {
			return err
		}
	}
}

// openFailed acts on an error opening the stream: nil to try again
// (after a backoff, or in a lean stretch), or the error that ends the
// follow.
func (f *follower) openFailed(ctx context.Context, err error) error {
	if stream.IsHistoryLost(err) {
		return stream.ErrHistoryLost
	}
	if stream.TooLarge(err) {
		// The first batch met the event: the same as a getMore.
		return f.tooLarge(ctx, err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f.retried("open change stream", err, f.attempt)
	if err := sleep(ctx, backoff(f.jc.Config, f.attempt)); err != nil {
		return err
	}
	f.attempt++
	return nil
}

// hurry says whether a reindex's mark is on its way through the stream
// (called by the stream reader).
func (f *follower) hurry() bool { return f.waiting.Load() > 0 }

// loop is the follow loop proper.
func (f *follower) loop(ctx context.Context, untilReindexed bool) error {
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	f.flushT = flush
	var committed <-chan struct{}
	if f.snap != nil && untilReindexed {
		committed = f.snap.Committed()
	}
	for {
		// The one place that arms the flush: after every event, whatever
		// added the work (changes, related values, a rename of a related
		// collection), pending work has a flush on its way.
		f.armFlush()
		f.dog.queued(f.unflushed())
		f.lagc.readTo(f.tok)
		items := f.reader.Items()
		if f.paused {
			items = nil // the stream is closed: nothing to read until resumed
		}
		select {
		case now := <-f.tick:
			f.pausedTick()
			if f.paused {
				break // the documents that ran out of time are tried once resumed
			}
			if r := f.jc.timeouts.take(now); r != nil {
				if err := f.startRetry(r); err != nil {
					return f.stop(ctx, err)
				}
			}
		case it := <-items:
			if it.Err == nil {
				// The stream is open and read: the job's start is over,
				// its reindex (if any) going on with it.
				f.stats.MarkStarted()
			}
			switch {
			case it.Err != nil:
				f.reader.Close()
				if stream.IsHistoryLost(it.Err) {
					return f.stop(ctx, stream.ErrHistoryLost)
				}
				if stream.TooLarge(it.Err) {
					if err := f.tooLarge(ctx, it.Err); err != nil {
						return f.stop(ctx, err)
					}
					if err := f.open(ctx); err != nil {
						return f.stop(ctx, err)
					}
					continue
				}
				// The driver resumes a resumable error once by itself; any
				// error reaching here reopens from the last change read
				// (everything up to it is pending or in the pipe).
				f.retried("change stream", it.Err, f.attempt)
				if err := sleep(ctx, backoff(f.jc.Config, f.attempt)); err != nil {
					return f.stop(ctx, err)
				}
				f.attempt++
				if err := f.open(ctx); err != nil {
					return f.stop(ctx, err)
				}
			case it.Events != nil:
				f.attempt = 0
				err := f.events(it.Events)
				f.reader.Taken(it)
				if err != nil {
					if errors.Is(err, errInvalidatedBy) {
						f.reader.Close()
						return f.invalidated(ctx, err.(*invalidation).op)
					}
					return f.stop(ctx, err)
				}
				if err := f.endLean(ctx, false); err != nil {
					return f.stop(ctx, err)
				}
			default:
				f.attempt = 0
				if err := f.idle(it.Token); err != nil {
					return f.stop(ctx, err)
				}
				if err := f.endLean(ctx, true); err != nil {
					return f.stop(ctx, err)
				}
			}
		case <-flush.C:
			f.flushArmed = false
			if err := f.flush(); err != nil {
				return f.stop(ctx, err)
			}
		case <-f.p.Failed():
			// A stage failed (a send refused for good, a record that
			// failed, a document with onDocumentError: fail, a reindex
			// read that failed).
			return f.stop(ctx, f.p.Err())
		case r := <-f.retries:
			err := f.request(ctx, r)
			if errors.Is(err, errReindexAsked) {
				// A clean end, flushed and recorded, then the next follow
				// reindexes; only then is the request answered.
				f.reindexNext = true
				if err := f.stop(ctx, nil); err != nil {
					return err
				}
				if ctx.Err() != nil {
					return nil // closing anyway: the request is answered as not done
				}
				if m := f.modeAsked; m != "" {
					r.Finish(fmt.Sprintf("reindex (%s) started, interleaved with the stream", m), nil)
					return &ModeAsked{Job: f.jc.job.Name, Mode: m}
				}
				r.Finish(fmt.Sprintf("reindex (%s) started, interleaved with the stream", reindexMode(f.jc.job)), nil)
				return errReindexAsked
			}
			if err != nil {
				return f.stop(ctx, err)
			}
		case <-committed:
			return f.stop(ctx, nil)
		case <-ctx.Done():
			return f.stop(ctx, nil)
		}
	}
}

// ticked is called by the job's lag clock every lagInterval, from the
// process's timer of lag clocks. The lag gauge reads the live lag (the
// age of the oldest change not yet durable) as /status does, so it grows
// while the destination is down instead of keeping the last durable
// batch's value. The loop is woken only when it has a use for the tick,
// a pause to warn of or documents that ran out of time to try again: an
// idle job's loop sleeps.
func (f *follower) ticked(now time.Time) {
	f.e.observeLag(f.jc.job.Name, f.stats.Snapshot().LagSeconds)
	if f.pausedNow.Load() || f.jc.timeouts.waiting() {
		select {
		case f.tick <- now:
		default:
		}
	}
}

// events takes one batch of change events in.
func (f *follower) events(evs []bson.Raw) error {
	defer f.counted()
	f.large.Read(len(evs))
	for _, ev := range evs {
		if err := f.add(ev); err != nil {
			return err
		}
		if f.unflushed() >= f.jc.BatchSize || f.pendingBytes >= f.jc.PendingBytes {
			if err := f.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// unflushed is the work a flush hands on: the changes gathered and the
// related values (each a query of dependents) since the last one.
func (f *follower) unflushed() int { return len(f.items) + f.relatedN }

// armFlush arms the flush timer when work waits for a flush and none is
// armed. Arming on the count's transitions instead (to exactly one) misses
// an event that adds several at once (two lookups on one collection, an
// array foreignField, a key change with its pre-image) and leaves the work
// waiting for batchSize.
func (f *follower) armFlush() {
	if f.flushArmed || f.unflushed() == 0 || f.flushT == nil {
		return
	}
	f.flushT.Reset(flushDelay(f.jc.FlushInterval, f.firstWall, len(f.items) > 0, time.Now()))
	f.flushArmed = true
}

// flushDelay is how long the flush waits for more: flushInterval counted
// from when the first pending change was written (its wall time, the
// server's), not from when it was read, so the time the change spent on
// its way (the stream's getMore, its pace, the server's lookup of the
// full document) is not added to every batch's wait: under a steady flow
// a change waits half an interval on average, plus that way. At most
// half the interval is taken off, so a server clock behind the sidecar's
// costs at worst batches of half the interval, never a flush per change;
// a clock ahead, an event without wallTime, or work without a change
// (related values) waits the whole interval.
func flushDelay(interval time.Duration, firstWall time.Time, changes bool, now time.Time) time.Duration {
	if !changes || firstWall.IsZero() {
		return interval
	}
	age := now.Sub(firstWall)
	if age <= 0 {
		return interval
	}
	return interval - min(age, interval/2)
}

// counted adds the document changes read since the last call to the stats
// (once per batch of events, not per event).
func (f *follower) counted() {
	if n := f.changes; n > 0 {
		f.changes = 0
		f.stats.Update(func(s *status.JobSnapshot) { s.Changes += n })
	}
}

func (f *follower) retried(what string, err error, attempt int) {
	f.stats.Update(func(s *status.JobSnapshot) { s.Retries++; s.NoteError(err) })
	f.e.observeRetry(f.jc.job.Name, err)
	if attempt == 0 || time.Since(f.retryAt) > 10*time.Second {
		f.retryAt = time.Now()
		f.log.Warn("source error; retrying with backoff", "op", what, "attempt", attempt+1, "error", err)
	}
}

// errInvalidatedBy is what add returns (as an *invalidation) for an event
// that ends the job's stream: a drop or rename of its collection, a drop of
// its database.
var errInvalidatedBy = errors.New("invalidated")

type invalidation struct{ op string }

func (i *invalidation) Error() string        { return "invalidated by " + i.op }
func (i *invalidation) Is(target error) bool { return target == errInvalidatedBy }

// add takes one change event into the pending batch (coalesced per _id:
// the last change wins, since every change carries the document's whole
// new state), or acts on a reindex's mark.
func (f *follower) add(ev bson.Raw) error {
	opv, err := ev.LookupErr("operationType")
	if err != nil {
		return errs.New(errs.Failed, f.jc.job.Name, "change event without operationType")
	}
	op, _ := opv.StringValueOK()
	tokv, err := ev.LookupErr("_id")
	if err != nil {
		return errs.New(errs.Failed, f.jc.job.Name, "change event without resume token")
	}
	tok, _ := tokv.DocumentOK()
	f.tok = tok
	if t, i, ok := ev.Lookup("clusterTime").TimestampOK(); ok {
		f.readCT = bson.Timestamp{T: t, I: i}
	}
	coll := namespaceOf(ev, "ns")
	if coll != f.ownNS {
		switch {
		case op == "dropDatabase" || op == "invalidate":
			return &invalidation{op: op}
		case op == "rename":
			if to := namespaceOf(ev, "to"); to == f.ownNS {
				return &invalidation{op: op} // another collection renamed onto this one
			}
			if to := namespaceOf(ev, "to"); f.relatedColls[coll] || f.relatedColls[to] {
				f.relatedAll(coll, op)
			}
			return nil
		case coll == f.stateNS:
			if _, err := ev.LookupErr("documentKey", "_id", "wait"); err == nil {
				return f.onWait(tok)
			}
			if _, err := ev.LookupErr("documentKey", "_id", "retry"); err == nil {
				f.kickRetries()
				return nil
			}
			return f.onMark(ev, op, tok)
		case f.relatedColls[coll]:
			if f.snap != nil {
				f.snap.shared.relatedChanged()
			}
			return f.addRelated(ev, op, coll)
		}
		return nil
	}
	if f.relatedColls[coll] { // a job looking up its own collection
		if f.snap != nil {
			f.snap.shared.relatedChanged()
		}
		if err := f.addRelated(ev, op, coll); err != nil {
			return err
		}
	}
	var it Item
	size := len(ev)
	switch op {
	case "insert", "replace", "update":
		it.Op = transform.Operation(op)
		if f.large.Lean() {
			// Read by _id when flushed; counted at its own size.
			it.Fill = true
			if n, ok := ev.Lookup(stream.LeanSizeField).AsInt64OK(); ok {
				size += int(n)
			}
		} else if fd, err := ev.LookupErr("fullDocument"); err == nil {
			if d, ok := fd.DocumentOK(); ok {
				it.Doc = d
			}
		}
		if op == "update" {
			if ud, err := ev.LookupErr("updateDescription"); err == nil {
				it.Upd, _ = ud.DocumentOK()
			}
		}
		// An update whose lookup found nothing (fullDocument null): the
		// document was deleted since; a delete event follows. Delete now.
	case "delete":
	case "drop", "rename":
		return &invalidation{op: op}
	default:
		return nil // not a document change (none without showExpandedEvents)
	}
	idv, err := ev.LookupErr("documentKey", "_id")
	if err != nil {
		return errs.New(errs.Failed, f.jc.job.Name, "%s event without documentKey._id", op)
	}
	it.ID = idv
	k := keyOf(idv)
	it.Key = k
	if i, ok := f.pending[k]; ok {
		f.items[i] = Coalesce(f.items[i], it)
	} else {
		f.pending[k] = len(f.items)
		f.items = append(f.items, it)
	}
	f.pendingBytes += size
	f.changes++
	f.changedKey(k)
	if f.snap != nil {
		delete(f.gone, k)
	}
	f.lastTok = tok
	f.wall = eventWall(ev)
	if len(f.items) == 1 {
		f.stats.LagPending(f.wall)
		f.firstWall = wallTimeOf(ev)
	}
	f.large.Saw(ev)
	return nil
}

// wallTimeOf is a change event's wallTime (MongoDB 6.0 and later always
// report it: SERVER-65022), zero when it has none: its clusterTime counts
// whole seconds, too coarse to time a flush by.
func wallTimeOf(ev bson.Raw) time.Time {
	if w, err := ev.LookupErr("wallTime"); err == nil {
		if dt, ok := w.DateTimeOK(); ok {
			return time.UnixMilli(dt)
		}
	}
	return time.Time{}
}

// eventWall is a change event's wall time (the server's).
func eventWall(ev bson.Raw) time.Time {
	if w, err := ev.LookupErr("wallTime"); err == nil {
		if dt, ok := w.DateTimeOK(); ok {
			return time.UnixMilli(dt)
		}
	} else if ct, err := ev.LookupErr("clusterTime"); err == nil {
		if t, _, ok := ct.TimestampOK(); ok {
			return time.Unix(int64(t), 0)
		}
	}
	return time.Now()
}

// markOf returns the mark a watermark event wrote: an upsert's inserted
// document holds it, an update's updatedFields (never its fullDocument,
// looked up later: by then a later mark may be there).
func markOf(ev bson.Raw, op string) string {
	var v bson.RawValue
	var err error
	switch op {
	case "insert", "replace":
		v, err = ev.LookupErr("fullDocument", "mark")
	case "update":
		v, err = ev.LookupErr("updateDescription", "updatedFields", "mark")
	default:
		return ""
	}
	if err != nil {
		return ""
	}
	s, _ := v.StringValueOK()
	return s
}

// flush hands the pending changes to the pipe: transformed on its prepare
// stage, sent in order, and the position of the last change recorded once
// they are durable.
func (f *follower) flush() error {
	f.startFanouts()
	if len(f.items) == 0 {
		return nil
	}
	items, tok, wall, size := f.items, f.lastTok, f.wall, f.pendingBytes
	f.reset()
	jc, stats, e, set := f.jc, f.stats, f.e, f.p.errs
	to, made := f.changeTarget()
	var clear []int // set on the prepare stage, read on the wait stage after it
	fl := &pipe.Flight{To: to, Bytes: size}
	sk := f.unchangedCheck(items)
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		if err := e.fillDocs(ctx, jc, items); err != nil {
			return err
		}
		writes, _, bad, err := e.prepareItems(ctx, jc, stats, set, made, items, true, sk)
		if err != nil {
			return err
		}
		fl.Batch = sink.Batch{Writes: writes}
		// With deleteSkipped every item has its write, in order: the
		// keys computed while coalescing serve the pipe's tracking.
		if len(writes) == len(items) {
			fl.Keys = make([]string, len(items))
			for i := range items {
				fl.Keys[i] = items[i].Key
			}
		}
		clear = set.Candidates(writes, failedIDs(bad))
		items = nil
		return nil
	}
	record := f.recordAfter(tok, wall)
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.Cleared(ctx, fl, clear); err != nil {
			return err
		}
		if err := record(ctx, fl); err != nil {
			return err
		}
		stats.LagDurable()
		return nil
	}
	stats.LagFlushed()
	f.posReq = time.Now()
	return f.p.Submit(fl)
}

// changeTarget is where the followed changes go, and the set that also
// takes their error records: the live destination, or, while a reindex
// runs, its target and the records it makes.
func (f *follower) changeTarget() (pipe.Target, *deadLetterSet) {
	if f.snap == nil {
		return pipe.ToLive, nil
	}
	return f.snap.Target(), f.snap.Made()
}

// notChanged is items without the documents the stream changed (changed:
// their keys) in the window they were read in.
func notChanged(items []Item, changed map[string]bool) []Item {
	if len(changed) == 0 {
		return items
	}
	kept := items[:0:0]
	for _, it := range items {
		if !changed[keyOf(it.ID)] {
			kept = append(kept, it)
		}
	}
	return kept
}

// recordAfter returns a durable callback recording tok as the position,
// unless a fan-out is outstanding (then the related change that started it
// must stay ahead of the position, so a crash replays it).
//
// Called when everything read so far is handed to the pipe, it also
// records, and publishes (Config.Durable), the durable cluster time: just
// before the last event read. Not at it: the events of one transaction
// share their cluster time, and the rest of it may not be read yet; a
// waiter's mark (onWait), written after the write it waits for, is what
// carries the durable time past that write.
func (f *follower) recordAfter(tok bson.Raw, wall time.Time) func(ctx context.Context, fl *pipe.Flight) error {
	e, jc, l, stats := f.e, f.jc, f.l, f.stats
	durable := justBefore(f.readCT)
	return func(ctx context.Context, fl *pipe.Flight) error {
		if f.fanPending.Load() > 0 {
			return nil
		}
		if err := e.store.RecordPosition(ctx, jc.job.Name, l, tok, wall, durable); err != nil {
			return err
		}
		if e.cfg.Durable != nil && !durable.IsZero() {
			e.cfg.Durable(jc.job.Name, durable)
		}
		f.recMu.Lock()
		f.lastRecorded, f.lastWall = tok, wall
		f.recMu.Unlock()
		f.lagc.recorded(tok)
		f.scanRecorded(tok)
		e.observePosition(jc.job.Name, wall)
		stats.Update(func(s *status.JobSnapshot) { s.LastPosition = wall; s.RecordedAt = time.Now() })
		e.observeLag(jc.job.Name, stats.Snapshot().LagSeconds)
		return nil
	}
}

// idle notes an empty getMore: the stream is caught up. With nothing
// pending, the post-batch resume token is recorded every PositionInterval
// (once everything before it is durable), so a quiet collection never falls
// out of the oplog.
func (f *follower) idle(tok bson.Raw) error {
	if len(tok) > 0 {
		f.tok = tok
		if ct, ok := stream.TokenTime(tok); ok && ct.After(f.readCT) {
			f.readCT = ct
		}
	}
	if len(f.items) > 0 || f.relatedN > 0 || len(tok) == 0 {
		return nil
	}
	if time.Since(f.posReq) < f.jc.PositionInterval {
		return nil
	}
	f.posReq = time.Now()
	return f.p.Submit(&pipe.Flight{Durable: f.recordAfter(tok, time.Now())})
}

// onWait takes a waiter's mark (jobstate.MarkWait) in: with nothing
// pending, the position is recorded as soon as everything before the mark
// is durable, rather than at the next PositionInterval; otherwise the next
// flush records it. A wait never makes a batch be sent early: a flood of
// waits leaves the pipeline's batches as they are.
func (f *follower) onWait(tok bson.Raw) error {
	if len(f.items) > 0 || f.relatedN > 0 {
		return nil
	}
	f.posReq = time.Now()
	return f.p.Submit(&pipe.Flight{Durable: f.recordAfter(tok, time.Now())})
}

// justBefore is the cluster time just before ct (zero for zero).
func justBefore(ct bson.Timestamp) bson.Timestamp {
	switch {
	case ct.I > 0:
		return bson.Timestamp{T: ct.T, I: ct.I - 1}
	case ct.T > 0:
		return bson.Timestamp{T: ct.T - 1, I: ^uint32(0)}
	}
	return bson.Timestamp{}
}

// stop ends follow: cause nil or a context error on a clean close (flush
// what is pending, wait until durable and recorded, within DrainTimeout);
// otherwise the error, after stopping the pipe.
func (f *follower) stop(ctx context.Context, cause error) error {
	if c := context.Cause(ctx); c != nil && errors.Is(c, errs.ErrLeaseLost) {
		f.p.Abort(c)
		return c
	}
	select {
	case <-f.l.Lost():
		f.p.Abort(leaseErr(f.l))
		return leaseErr(f.l)
	default:
	}
	if cause != nil && ctx.Err() == nil {
		f.p.Abort(cause)
		if cause == stream.ErrHistoryLost {
			return cause
		}
		return errs.WithJob(f.jc.job.Name, cause)
	}
	// Clean close. A running reindex stops reading first; what it handed
	// over is made durable and checkpointed with the rest.
	if f.snap != nil {
		f.snap.Stop()
	}
	timer := time.AfterFunc(f.jc.DrainTimeout, func() {
		f.p.Fail(errs.New(errs.Failed, f.jc.job.Name, "flushing pending changes took longer than %s; they will be applied again after restart", f.jc.DrainTimeout))
	})
	defer timer.Stop()
	err := f.flush()
	if err == nil {
		err = f.p.Close()
	}
	if err == nil && f.snap != nil {
		err = f.snap.CloseCheckpoint()
	}
	if err != nil {
		if errors.Is(err, errs.ErrLeaseLost) {
			return err
		}
		f.log.Warn("closing: pending changes not all recorded; they will be applied again on the next run", "error", err)
		return nil
	}
	if f.snap != nil {
		f.log.Info("reindex stopped; it resumes from its checkpoint", "done", f.snap.Count())
	}
	if f.reindexNext {
		f.log.Info("pending changes flushed and recorded; reindexing next")
		return nil
	}
	f.log.Info("closed: pending changes flushed and recorded")
	return nil
}

// invalidated handles a drop, rename or dropDatabase: what came before is
// flushed and recorded, then the position (and a running reindex's
// checkpoint) is cleared (the index stays as it is) and follow returns
// ErrInvalidated, so the next run reindexes.
func (f *follower) invalidated(ctx context.Context, op string) error {
	name := f.jc.job.Name
	f.log.Warn("collection invalidated: stopping; the next run reindexes", "event", op)
	f.p.Live().OnDDL(ctx, op) // never applied to a replica (mirror jobs)
	if f.snap != nil {
		f.snap.Stop()
	}
	if err := f.flush(); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	if err := f.p.Close(); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	dctx, cancel := drainContext(ctx, f.l, f.jc.DrainTimeout)
	defer cancel()
	if f.snap != nil {
		f.snap.AbortCheckpoint()
		if err := f.e.store.DeleteCheckpoint(dctx, name, f.l); err != nil {
			return leaseOr(ctx, f.l, err)
		}
	}
	if err := f.e.store.ClearPosition(dctx, name, f.l); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	return errs.Wrap(errs.Failed, name, ErrInvalidated, "%s event on %s", op, f.jc.job.Collection)
}

// scanRecorded shows tok, just recorded, as a scan-mode job's cursor.
func (f *follower) scanRecorded(tok bson.Raw) {
	if f.scan == nil {
		return
	}
	c, ok := scanCursorOf(tok)
	if !ok {
		return
	}
	text, at := cursorText(c), cursorTime(c)
	f.stats.Update(func(s *status.JobSnapshot) {
		if s.Scan != nil {
			s.Scan.SetCursor(text, at)
		}
	})
}
