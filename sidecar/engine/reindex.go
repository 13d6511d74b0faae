package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// Reindex rebuilds job's destination from the collection under l
// (`meilistream reindex NAME`): it follows the job's stream, interleaves a
// reindex (continuing a checkpointed one of the same transform), and stops
// cleanly once the rebuilt destination is live and its position recorded.
// Cancelling ctx stops it cleanly (error: ctx's cause); a later Reindex or
// Run resumes from the checkpoint.
func (e *Engine) Reindex(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats) (Summary, error) {
	return e.reindex(ctx, job, dst, l, stats, "")
}

// ReindexAsked is Reindex of job, a copy of original in the mode
// `meilistream reindex --inplace` or `--swap` asked (dst built from it):
// its checkpoint records the mode as asked, so a sidecar that goes on
// with it after an interruption does it in that mode.
func (e *Engine) ReindexAsked(ctx context.Context, job, original *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats) (Summary, error) {
	return e.reindex(ctx, job, dst, l, stats, reindexMode(original))
}

func (e *Engine) reindex(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats, own string) (Summary, error) {
	e.setKind(job.Name, job.Kind.String())
	sum, err := e.run(ctx, job, dst, l, stats, true, own, nil)
	stats.SetPhase(status.PhaseIdle)
	if err == nil && sum == nil {
		err = context.Cause(ctx)
		if err == nil {
			err = errs.New(errs.Failed, job.Name, "the reindex stopped before it was done")
		}
	}
	if err != nil {
		err = errs.WithJob(job.Name, err)
		stats.SetError(err)
		return Summary{}, err
	}
	return *sum, nil
}

// A reindex runs beside the follow loop: Reindex reads the
// collection in chunks between marks of its own, and the loop, reaching
// each mark in the stream, hands the chunk read before it to the pipe
// after the pending changes and without the documents the stream changed
// meanwhile (onMark, submitChunk). At the last mark it commits (finish):
// the sweep's deletes, then, once everything before is durable, the swap
// and the position with the new transform's hash.

// startSnapshot makes snap the running reindex.
func (f *follower) startSnapshot(ctx context.Context, snap *Reindex) {
	f.snap = snap
	f.gone = map[string]bson.RawValue{}
	f.p.SetStaged(snap.StagedSink())
	f.p.made = snap.Made()
	// A resumed reindex read its earlier chunks before this run: the
	// joins marked stale then may be in them.
	f.staleBase = 0
	if !snap.Summary().Resumed {
		f.staleBase = f.stale.since()
	}
	snap.Begin(ctx, f.p.Pipe)
}

// onMark acts on a watermark of the running reindex: the chunk read before
// it goes to the pipe, after the pending changes and without the _ids the
// stream changed since the mark before it. Marks of earlier runs are
// ignored.
func (f *follower) onMark(ev bson.Raw, op string, tok bson.Raw) error {
	mark := markOf(ev, op)
	if f.fan != nil && f.fan.Owns(mark) {
		return f.onFanMark(mark, ev, tok)
	}
	if f.snap != nil && f.snap.shared.owns(mark) {
		return f.onSharedMark(mark, ev, tok)
	}
	if f.snap == nil || !f.snap.Owns(mark) {
		return nil // a mark of an earlier run, or another holder's
	}
	c, _ := f.snap.Take(mark)
	changed := f.snap.Changed
	f.snap.Changed = map[string]bool{}
	if c == nil {
		return nil // the opening mark: a window begins
	}
	if err := f.flush(); err != nil {
		return err
	}
	wall := eventWall(ev)
	if len(c.Items) > 0 || c.Gone == nil {
		if err := f.submitChunk(c, changed, tok, wall); err != nil {
			return err
		}
	}
	for _, id := range c.Gone {
		if k := keyOf(id); !changed[k] {
			f.gone[k] = id
		}
	}
	if c.Final {
		return f.finish(tok, wall)
	}
	return nil
}

// submitChunk hands a chunk's rows, but those in changed, to the pipe for
// the reindex's target; once durable its last _id is checkpointed and tok
// recorded as the position.
func (f *follower) submitChunk(c *Chunk, changed map[string]bool, tok bson.Raw, wall time.Time) error {
	snap, jc, e, stats := f.snap, f.jc, f.e, f.stats
	items := notChanged(c.Items, changed)
	set := f.p.errs
	clearing := snap.InPlace()
	var clear []int
	fl := &pipe.Flight{To: pipe.ToStaged}
	for _, it := range items {
		fl.Bytes += len(it.Doc)
	}
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		writes, sk, bd, err := e.prepareItems(ctx, jc, stats, set, snap.Made(), items, snap.InPlace(), nil)
		if err != nil {
			return err
		}
		if clearing {
			clear = set.Candidates(writes, failedIDs(bd))
		}
		snap.Prepared(sk, len(bd))
		detachIDs(writes)
		fl.Batch = sink.Batch{Writes: writes}
		items = nil
		return nil
	}
	// The chunk's mark is a position too: recorded now and then, so a
	// long reindex of a quiet collection moves the resume point on (the
	// stream's own changes record theirs).
	var record func(ctx context.Context, fl *pipe.Flight) error
	if time.Since(f.posReq) >= chunkPositionInterval {
		record = f.recordAfter(tok, wall)
		f.posReq = time.Now()
	}
	// What the checkpoint needs of the chunk, without its documents: the
	// flight is held until durable, and its documents are slices of the
	// driver's reply, which the transform is done with once prepared.
	done := &Chunk{Last: c.Last, N: c.N}
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.Cleared(ctx, fl, clear); err != nil {
			return err
		}
		snap.Durable(fl, done)
		if record == nil {
			return nil
		}
		return record(ctx, fl)
	}
	return f.p.Submit(fl)
}

// finish ends the reindex at its last mark: the sweep's deletes, then, once
// everything before is durable, the swap (or nothing in place) and the
// record of the new position with the transform's hash.
func (f *follower) finish(tok bson.Raw, wall time.Time) error {
	snap := f.snap
	if len(f.gone) > 0 {
		f.log.Info("sweep: deleting documents no longer in the collection", "count", len(f.gone))
		ids := make([]bson.RawValue, 0, len(f.gone))
		for _, id := range f.gone {
			ids = append(ids, id)
		}
		for lo := 0; lo < len(ids); lo += f.jc.BatchSize {
			part := ids[lo:min(lo+f.jc.BatchSize, len(ids))]
			w := make([]sink.Write, len(part))
			for i, id := range part {
				w[i] = sink.Write{SourceID: id, Delete: true}
			}
			n := int64(len(part))
			err := f.p.Submit(&pipe.Flight{To: pipe.ToStaged, Batch: sink.Batch{Writes: w}, Durable: func(context.Context, *pipe.Flight) error {
				snap.Removed(n)
				return nil
			}})
			if err != nil {
				return err
			}
		}
	}
	f.snap, f.gone = nil, nil
	e, jc, l, p, stats := f.e, f.jc, f.l, f.p, f.stats
	stale, staleBase := f.stale, f.staleBase
	commit := func(ctx context.Context) error {
		// The last steps are short and must not be cut between the swap
		// and the record by a clean stop (the next start would reindex
		// again): only the lease and DrainTimeout end them.
		ctx, cancel := context.WithTimeout(ctx, jc.DrainTimeout)
		defer cancel()
		if err := snap.CloseCheckpoint(); err != nil {
			return err
		}
		if err := l.Confirm(ctx); err != nil {
			return err
		}
		if !snap.InPlace() {
			if err := snap.Swap(ctx); err != nil {
				return err
			}
			if err := l.Confirm(ctx); err != nil {
				return err
			}
			if err := snap.Made().ClearOthers(ctx); err != nil {
				return err
			}
			p.errs.Reset(snap.Made())
		}
		p.SetStaged(nil)
		p.made = nil
		// The reindex is done: its hash is the destination's now. The
		// position moves to its last mark unless a fan-out is outstanding
		// (then it stays where it was, ahead of the related change).
		if f.fanPending.Load() > 0 {
			f.recMu.Lock()
			tok, wall = f.lastRecorded, f.lastWall
			f.recMu.Unlock()
		}
		if err := e.store.RecordNewPosition(ctx, &jc.job.Job, l, tok, wall); err != nil {
			return err
		}
		f.lagc.recorded(tok)
		f.scanRecorded(tok)
		// Every document is the new transform's, with its joins of
		// the reindex: the joins marked stale before it began are not.
		if err := stale.forget(ctx, e.store, jc.job.Name, l, staleBase); err != nil {
			return err
		}
		if err := e.store.DeleteCheckpoint(ctx, jc.job.Name, l); err != nil {
			return err
		}
		snap.Finished()
		stats.SetPhase(status.PhaseFollowing)
		stats.Update(func(s *status.JobSnapshot) {
			s.Reindexes++
			s.Reindex.Done = snap.Count()
			s.LastPosition = wall
			s.RecordedAt = time.Now()
		})
		snap.MarkCommitted()
		return nil
	}
	f.committed = true
	return f.p.Submit(&pipe.Flight{Ctl: commit})
}

// detachIDs copies the source _ids of writes into one buffer of their own.
// They are slices of the driver's reply, which holds the whole documents
// read: a flight keeps its writes until durable (resends, refusals,
// cleared errors), and would keep the reply alive with them.
func detachIDs(writes []sink.Write) {
	n := 0
	for i := range writes {
		n += len(writes[i].SourceID.Value)
	}
	buf := make([]byte, 0, n)
	for i := range writes {
		v := &writes[i].SourceID
		if v.Value == nil {
			continue
		}
		at := len(buf)
		buf = append(buf, v.Value...)
		v.Value = buf[at:len(buf):len(buf)]
	}
}
