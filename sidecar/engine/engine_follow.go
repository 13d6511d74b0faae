package engine

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// errHistoryLost is follow's signal that the recorded position is gone from
// the server's history: codes 286 ChangeStreamHistoryLost and 280
// ChangeStreamFatalError on open or resume, 136 CappedPositionLost when an
// open stream is overtaken by the oplog's truncation (the server's
// src/mongo/base/error_codes.yml).
var errHistoryLost = errors.New("change stream history lost")

// errStreamClosed: the server closed the cursor without an invalidate event.
var errStreamClosed = errors.New("change stream closed by the server")

func isHistoryLost(err error) bool {
	var se mongo.ServerError
	if errors.As(err, &se) {
		return se.HasErrorCode(286) || se.HasErrorCode(280) || se.HasErrorCode(136)
	}
	return false
}

// streamAwait is the getMore wait of the change stream: how often an idle
// stream reports (its post-batch resume token), not a latency bound.
const streamAwait = 500 * time.Millisecond

// lagInterval is how often the follow lag gauge is updated while following.
var lagInterval = time.Second

// csItem is what the stream reader hands the follow loop: the events of one
// getMore batch (copied, in order), an idle report with the post-batch
// resume token, or the stream's error. One hand-off per batch, not per
// event: a goroutine switch per change was a large part of follow's CPU.
type csItem struct {
	evs []bson.Raw
	tok bson.Raw
	err error
}

// maxItemEvents bounds the events of one csItem (a getMore batch is at most
// 16 MB; this keeps the follow loop's turns short).
const maxItemEvents = 1000

func (e *Engine) openStream(ctx context.Context, job *transform.Job, token bson.Raw) (*mongo.ChangeStream, error) {
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(streamAwait)
	if len(token) > 0 {
		opts.SetResumeAfter(token)
	}
	return e.source.Collection(job.Collection).Watch(ctx, mongo.Pipeline{}, opts)
}

// streamPace is the least time between two getMores of a busy stream:
// FlushInterval/4, at most 25ms. A getMore returns as soon as anything is
// there, so a stream of a few thousand changes a second read without a
// pause costs one round trip (and its goroutine switches and syscalls) per
// change or two; pausing after a batch lets the next one gather more. An
// idle stream's getMore still waits on the server (maxAwaitTime), so a lone
// write is not delayed; a busy one by at most the pace, which keeps a busy
// stream's write-to-searchable within flushInterval + 50 ms. A shorter
// pace leaves a busy stream's round trips a visible part of follow's CPU
// per change (go run ./bench measures it).
func streamPace(flush time.Duration) time.Duration {
	return min(flush/4, 25*time.Millisecond)
}

// readStream feeds out until ctx ends or the stream fails, pausing at
// least pace between getMores that returned events.
func readStream(ctx context.Context, cs *mongo.ChangeStream, out chan<- csItem, pace time.Duration) {
	send := func(it csItem) bool {
		select {
		case out <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		started := time.Now()
		if cs.TryNext(ctx) {
			// The rest of the batch the driver holds, without another
			// getMore. Not copied: each event is a slice of the reply the
			// driver read it into, which it never writes to again (see
			// readPart; TestStreamEventsStayValidAcrossGetMores pins it
			// for change streams), which saves a fifth of what a change
			// allocates.
			n := min(cs.RemainingBatchLength()+1, maxItemEvents)
			evs := make([]bson.Raw, 0, n)
			for {
				evs = append(evs, cs.Current[:len(cs.Current):len(cs.Current)])
				if len(evs) == maxItemEvents || cs.RemainingBatchLength() == 0 || !cs.TryNext(ctx) {
					break
				}
			}
			if !send(csItem{evs: evs}) {
				return
			}
			if d := time.Until(started.Add(pace)); d > 0 && cs.RemainingBatchLength() == 0 {
				if sleep(ctx, d) != nil {
					return
				}
			}
			continue
		}
		if err := cs.Err(); err != nil {
			if ctx.Err() == nil {
				send(csItem{err: err})
			}
			return
		}
		if cs.ID() == 0 {
			send(csItem{err: errStreamClosed})
			return
		}
		if !send(csItem{tok: append(bson.Raw(nil), cs.ResumeToken()...)}) {
			return
		}
	}
}

// follow applies the change stream from pos until ctx ends (nil, after a
// flush), the lease is lost, the history is lost (errHistoryLost), the
// collection is invalidated, or a non-retryable error.
func (e *Engine) follow(ctx context.Context, job *transform.Job, sink Sink, l Lease, stats *status.JobStats, pos *jobstate.Position, log hclog.Logger) error {
	jc := e.jobCfg(job)
	stats.SetPhase(status.PhaseFollowing)

	// The pipe outlives ctx on a clean close, so pending changes can be
	// flushed and recorded; the lease still stops it at once.
	pctx, pstop := leaseContext(context.WithoutCancel(ctx), l)
	defer pstop()
	p := e.newPipe(pctx, jc, sink, stats, log, true)
	defer p.abort(errPipeClosed)
	set, err := e.loadErrSet(ctx, job.Name)
	if err != nil {
		return f0stop(ctx, l, p, err)
	}
	p.errs = set

	f := &follower{e: e, jc: jc, l: l, stats: stats, log: log, p: p, tok: pos.Token}
	f.reset()
	stats.LagReset()
	log.Info("following", "collection", job.Collection, "since", pos.WallTime)

	var (
		rcancel context.CancelFunc
		rdone   chan struct{}
		items   chan csItem
		attempt int
	)
	// The reader goroutine owns the change stream (it is not safe for
	// concurrent use) and closes it when it ends.
	stopReader := func() {
		if rcancel != nil {
			rcancel()
			<-rdone
			rcancel = nil
		}
	}
	defer stopReader()
	open := func() error {
		for {
			cs, err := e.openStream(ctx, job, f.tok)
			if err == nil {
				var rctx context.Context
				rctx, rcancel = context.WithCancel(ctx)
				rdone = make(chan struct{})
				items = make(chan csItem, 256)
				go func(done chan struct{}) {
					defer close(done)
					readStream(rctx, cs, items, streamPace(jc.FlushInterval))
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
					_ = cs.Close(cctx)
					cancel()
				}(rdone)
				return nil
			}
			if isHistoryLost(err) {
				return errHistoryLost
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f.retried("open change stream", err, attempt)
			if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
				return err
			}
			attempt++
		}
	}
	if err := open(); err != nil {
		return f.stop(ctx, err)
	}
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	// The lag gauge reads the live lag (the age of the oldest change not yet
	// durable) every second, as /status does, so it grows while the
	// destination is down instead of keeping the last durable batch's value.
	lagTick := time.NewTicker(lagInterval)
	defer lagTick.Stop()
	for {
		select {
		case <-lagTick.C:
			e.observeLag(job.Name, stats.Snapshot().LagSeconds)
		case it := <-items:
			switch {
			case it.err != nil:
				stopReader()
				if isHistoryLost(it.err) {
					return f.stop(ctx, errHistoryLost)
				}
				// The driver resumes a resumable error once by itself; any
				// error reaching here reopens from the last change read
				// (everything up to it is pending or in the pipe).
				f.retried("change stream", it.err, attempt)
				if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
					return f.stop(ctx, err)
				}
				attempt++
				if err := open(); err != nil {
					return f.stop(ctx, err)
				}
			case it.evs != nil:
				attempt = 0
				for k, ev := range it.evs {
					inv, err := f.add(ev)
					if err != nil {
						f.counted(k + 1)
						return f.stop(ctx, err)
					}
					if inv != "" {
						f.counted(k + 1)
						stopReader()
						return f.invalidated(ctx, inv)
					}
					if len(f.items) == 1 {
						flush.Reset(jc.FlushInterval)
					}
					if len(f.items) >= jc.BatchSize {
						flush.Stop()
						if err := f.flush(); err != nil {
							f.counted(k + 1)
							return f.stop(ctx, err)
						}
					}
				}
				f.counted(len(it.evs))
			default:
				attempt = 0
				if err := f.idle(it.tok); err != nil {
					return f.stop(ctx, err)
				}
			}
		case <-flush.C:
			if err := f.flush(); err != nil {
				return f.stop(ctx, err)
			}
		case <-p.Failed():
			// A stage failed (a send refused for good, a record that
			// failed, a document with onDocumentError: fail).
			return f.stop(ctx, p.Err())
		case <-ctx.Done():
			return f.stop(ctx, nil)
		}
	}
}

// follower is the follow loop's state.
type follower struct {
	e     *Engine
	jc    jobConfig
	l     Lease
	stats *status.JobStats
	log   hclog.Logger
	p     *pipe

	pending map[string]int // coalescing key -> index in items
	items   []item
	lastTok bson.Raw  // token of the last change in items
	wall    time.Time // its wall time
	tok     bson.Raw  // the last token read (event or idle): where to reopen
	posReq  time.Time // when a position was last submitted for recording
	retryAt time.Time
}

func (f *follower) reset() {
	f.pending = make(map[string]int, f.jc.BatchSize)
	f.items = make([]item, 0, f.jc.BatchSize)
}

// counted adds n change events read to the stats (once per batch of
// events, not per event).
func (f *follower) counted(n int) {
	f.stats.Update(func(s *status.JobSnapshot) { s.Changes += int64(n) })
}

func (f *follower) retried(what string, err error, attempt int) {
	f.stats.Update(func(s *status.JobSnapshot) { s.Retries++; s.NoteError(err) })
	f.e.observeRetry(f.jc.job.Name, err)
	if attempt == 0 || time.Since(f.retryAt) > 10*time.Second {
		f.retryAt = time.Now()
		f.log.Warn("source error; retrying with backoff", "op", what, "attempt", attempt+1, "error", err)
	}
}

// add takes one change event into the pending batch (coalesced per _id:
// the last change wins, since every change carries the document's whole
// new state). It returns the operation type when the event invalidates the
// stream.
func (f *follower) add(ev bson.Raw) (string, error) {
	opv, err := ev.LookupErr("operationType")
	if err != nil {
		return "", errs.New(errs.Failed, f.jc.job.Name, "change event without operationType")
	}
	op, _ := opv.StringValueOK()
	tokv, err := ev.LookupErr("_id")
	if err != nil {
		return "", errs.New(errs.Failed, f.jc.job.Name, "change event without resume token")
	}
	tok, _ := tokv.DocumentOK()
	f.tok = tok
	var it item
	switch op {
	case "insert", "replace", "update":
		it.op = transform.Operation(op)
		if fd, err := ev.LookupErr("fullDocument"); err == nil {
			if d, ok := fd.DocumentOK(); ok {
				it.doc = d
			}
		}
		if op == "update" {
			if ud, err := ev.LookupErr("updateDescription"); err == nil {
				it.upd, _ = ud.DocumentOK()
			}
		}
		// An update whose lookup found nothing (fullDocument null): the
		// document was deleted since; a delete event follows. Delete now.
	case "delete":
	case "drop", "rename", "dropDatabase", "invalidate":
		return op, nil
	default:
		return "", nil // not a document change (none without showExpandedEvents)
	}
	idv, err := ev.LookupErr("documentKey", "_id")
	if err != nil {
		return "", errs.New(errs.Failed, f.jc.job.Name, "%s event without documentKey._id", op)
	}
	it.id = idv
	k := keyOf(idv)
	it.key = k
	if i, ok := f.pending[k]; ok {
		f.items[i] = it
	} else {
		f.pending[k] = len(f.items)
		f.items = append(f.items, it)
	}
	f.lastTok = tok
	if w, err := ev.LookupErr("wallTime"); err == nil {
		if dt, ok := w.DateTimeOK(); ok {
			f.wall = time.UnixMilli(dt)
		}
	} else if ct, err := ev.LookupErr("clusterTime"); err == nil {
		if t, _, ok := ct.TimestampOK(); ok {
			f.wall = time.Unix(int64(t), 0)
		}
	}
	if len(f.items) == 1 {
		f.stats.LagPending(f.wall)
	}
	return "", nil
}

// flush hands the pending changes to the pipe: transformed on its prepare
// stage, sent in order, and the position of the last change recorded once
// they are durable.
func (f *follower) flush() error {
	if len(f.items) == 0 {
		return nil
	}
	items, tok, wall := f.items, f.lastTok, f.wall
	f.reset()
	jc, stats, e, set := f.jc, f.stats, f.e, f.p.errs
	var clear []int // set on the prepare stage, read on the wait stage after it
	fl := &flight{
		prepare: func(ctx context.Context, fl *flight) error {
			writes, skipped, bad, err := transformAll(ctx, jc.job, items, true)
			if err != nil {
				return err
			}
			if err := e.handleDocErrors(ctx, jc, stats, set, bad); err != nil {
				return err
			}
			stats.Add(0, 0, int64(skipped), 0)
			e.observeSkipped(jc.job.Name, int64(skipped))
			fl.batch = Batch{Writes: writes}
			// With deleteSkipped every item has its write, in order: the
			// keys computed while coalescing serve the pipe's tracking.
			if len(writes) == len(items) {
				fl.keys = make([]string, len(items))
				for i := range items {
					fl.keys[i] = items[i].key
				}
			}
			clear = set.candidates(writes, bad)
			return nil
		},
	}
	record := f.recordAfter(tok, wall, false)
	fl.durable = func(ctx context.Context, fl *flight) error {
		if err := set.cleared(ctx, fl, clear); err != nil {
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
	return f.p.submit(fl)
}

// recordAfter returns a durable callback recording tok as the position.
func (f *follower) recordAfter(tok bson.Raw, wall time.Time, idle bool) func(ctx context.Context, fl *flight) error {
	e, jc, l, stats := f.e, f.jc, f.l, f.stats
	return func(ctx context.Context, fl *flight) error {
		if err := e.store.RecordPosition(ctx, jc.job.Name, l, tok, wall, jc.job.Hash); err != nil {
			return err
		}
		e.observePosition(jc.job.Name, wall)
		lag := 0.0
		if !idle {
			lag = max(time.Since(wall).Seconds(), 0)
		}
		stats.Update(func(s *status.JobSnapshot) { s.LastPosition = wall; s.RecordedAt = time.Now(); s.LagSeconds = lag })
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
	}
	if len(f.items) > 0 || len(tok) == 0 {
		return nil
	}
	if time.Since(f.posReq) < f.jc.PositionInterval {
		stats := f.stats
		return f.p.submit(&flight{durable: func(context.Context, *flight) error {
			stats.Update(func(s *status.JobSnapshot) { s.LagSeconds = 0 })
			return nil
		}})
	}
	f.posReq = time.Now()
	return f.p.submit(&flight{durable: f.recordAfter(tok, time.Now(), true)})
}

// stop ends follow: cause nil or a context error on a clean close (flush
// what is pending, wait until durable and recorded, within DrainTimeout);
// otherwise the error, after stopping the pipe.
func (f *follower) stop(ctx context.Context, cause error) error {
	if c := context.Cause(ctx); c != nil && errors.Is(c, errs.ErrLeaseLost) {
		f.p.abort(c)
		return c
	}
	select {
	case <-f.l.Lost():
		f.p.abort(leaseErr(f.l))
		return leaseErr(f.l)
	default:
	}
	if cause != nil && ctx.Err() == nil {
		f.p.abort(cause)
		if cause == errHistoryLost {
			return cause
		}
		return errs.WithJob(f.jc.job.Name, cause)
	}
	// Clean close.
	timer := time.AfterFunc(f.jc.DrainTimeout, func() {
		f.p.fail(errs.New(errs.Failed, f.jc.job.Name, "flushing pending changes took longer than %s; they will be applied again after restart", f.jc.DrainTimeout))
	})
	defer timer.Stop()
	err := f.flush()
	if err == nil {
		err = f.p.close()
	}
	if err != nil {
		if errors.Is(err, errs.ErrLeaseLost) {
			return err
		}
		f.log.Warn("closing: pending changes not all recorded; they will be applied again on the next run", "error", err)
		return nil
	}
	f.log.Info("closed: pending changes flushed and recorded")
	return nil
}

// invalidated handles a drop, rename or dropDatabase: what came before is
// flushed and recorded, then the position is cleared (the index stays as it
// is) and follow returns ErrInvalidated, so the next run reindexes.
func (f *follower) invalidated(ctx context.Context, op string) error {
	name := f.jc.job.Name
	f.log.Warn("collection invalidated: stopping; the next run reindexes", "event", op)
	if o, ok := f.p.sink.(DDLObserver); ok {
		o.OnDDL(ctx, op) // never applied to a replica
	} else if f.jc.job.Kind == transform.Mirror {
		f.e.observeDDL(name, op)
	}
	if err := f.flush(); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	if err := f.p.close(); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	dctx, cancel := drainContext(ctx, f.l, f.jc.DrainTimeout)
	defer cancel()
	if err := f.e.store.ClearPosition(dctx, name, f.l); err != nil {
		return leaseOr(ctx, f.l, err)
	}
	return errs.Wrap(errs.Failed, name, ErrInvalidated, "%s event on %s", op, f.jc.job.Collection)
}

// f0stop ends follow before the loop started.
func f0stop(ctx context.Context, l Lease, p *pipe, err error) error {
	p.abort(err)
	return closeOr(ctx, l, err)
}
