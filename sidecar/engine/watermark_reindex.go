package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// reindexObserver is what a reindex reports to (Observer has it).
type reindexObserver interface {
	// ObserveReindexProgress: documents read and checkpointed so far, of
	// the collection's estimated count.
	ObserveReindexProgress(job string, done, estimated int64)
	// ObserveReindexDone: the reindex completed.
	ObserveReindexDone(job string)
	deadLetterGauge
}

// reindexOptions are what a reindex needs beside its Source.
type reindexOptions struct {
	Store *jobstate.Store
	// Lease is the job's lease: the checkpoint's writes are fenced by its
	// epoch.
	Lease jobstate.Fence
	// Shared, from 2 up, shares the reindex's chunks among that many
	// slots of the pods running the job's transform, from when another
	// such pod is live (reindex_shared.go).
	Shared           int
	Engine           *Engine
	Dest             sink.Sink // staged (or resumed) for the reindex
	Stats            *status.JobStats
	Observer         reindexObserver
	PageSize         int           // documents read ahead of the checkpoint at most
	ProgressInterval time.Duration // how often the progress is logged and published
	Throttle         *Throttle     // paces the chunks; nil: unbounded
	// Asked: the job is a copy in the mode `meilistream reindex --inplace`
	// or `--swap` asked, which a fresh checkpoint records.
	Asked bool
}

// Reindex is one reindex, run by its goroutine beside the follow loop: it
// reads the collection in chunks between the marks of its chain (and, for
// a sweep, the destination's ids), which the follow loop takes at each
// mark and hands to the pipe; what became durable is checkpointed.
type Reindex struct {
	*Chain
	opts    reindexOptions
	staged  sink.Staged
	inPlace bool
	sweep   bool
	resumed bool
	cp      *jobstate.Checkpoint
	start   time.Time
	est     int64
	win     *window
	ckp     *checkpointer
	made    *deadLetterSet // error records made since the reindex began (kept at the swap)
	prev    int64          // documents read by earlier runs of a resumed reindex
	// shared: the chunks are read and transformed by any of the pods
	// running the job's transform (reindex_shared.go); nil: by the
	// holder alone.
	shared *sharedReindex
	took   time.Duration

	// Figures for the summary and the progress log.
	done    atomic.Int64 // documents read and checkpointed, earlier runs included
	indexed atomic.Int64
	skipped atomic.Int64
	bad     atomic.Int64
	removed atomic.Int64

	// What the throttle slows the chunks for, as last shown (throttle.go).
	thrMu sync.Mutex
	shown ThrottleState

	cancel    context.CancelCauseFunc
	stopped   chan struct{}
	committed chan struct{} // closed once the reindex is swapped in (or swept) and recorded
	progStop  chan struct{}
	progOnce  sync.Once
}

// startReindex prepares a reindex of the job into o.Dest: it resumes cp (a
// checkpoint of the same transform whose staged index still exists), else
// stages afresh and records a fresh checkpoint.
func startReindex(ctx context.Context, src Source, o reindexOptions, cp *jobstate.Checkpoint) (*Reindex, error) {
	job, log := src.Job, src.Log
	inPlace := job.Reindex == "inplace" || job.Kind == jobdef.Mirror
	s := &Reindex{
		Chain:   newChain(src, "reindex"),
		opts:    o,
		inPlace: inPlace,
		sweep:   inPlace && job.Sweep,
		start:   time.Now(),
		stopped: make(chan struct{}), committed: make(chan struct{}), progStop: make(chan struct{}),
	}
	recorded := cp // the checkpoint found, whatever becomes of it
	if cp != nil && cp.Swapping {
		log.Info("the last reindex stopped while swapping its index in: starting over (its staged index may already be the old live one)")
		cp = nil
	}
	if cp != nil && (cp.Hash != job.Hash || cp.InPlace != inPlace) {
		cp = nil
	}
	if cp != nil {
		staged, err := o.Dest.Stage(ctx, true)
		switch {
		case errors.Is(err, sink.ErrNoStage):
			log.Info("reindex checkpoint found but its staged index is gone: starting over")
		case err != nil:
			return nil, errs.Wrap(errs.Failed, job.Name, err, "stage the reindex")
		default:
			s.staged, s.resumed, s.cp, s.prev = staged, true, cp, cp.Count
			if cp.Destination == "" {
				cp.Destination = jobstate.Destination(&job.Job) // rewritten with the next checkpoint
			}
		}
	}
	if s.staged == nil {
		s.discardAbandoned(ctx, recorded)
		staged, err := o.Dest.Stage(ctx, false)
		if err != nil {
			return nil, errs.Wrap(errs.Failed, job.Name, err, "stage the reindex")
		}
		s.staged = staged
		s.cp = &jobstate.Checkpoint{StartedAt: time.Now(), Hash: job.Hash, InPlace: inPlace, Asked: o.Asked, Destination: jobstate.Destination(&job.Job)}
		if err := o.Store.WriteCheckpoint(ctx, job.Name, o.Lease, s.cp); err != nil {
			return nil, err
		}
	}
	s.done.Store(s.cp.Count)
	s.win = newWindow(o.PageSize)
	if o.Shared > 1 {
		s.shared = newSharedReindex(o.Engine, s, o.Shared)
	}
	s.est, _ = jobColl(src.DB, &job.Job).EstimatedDocumentCount(ctx)
	// Error records: in place, a document written without error clears its
	// record once durable; into a staged index, records are only known
	// stale when the swap is done (then every record not made again by
	// this reindex is cleared). A resumed staged reindex keeps the records
	// of its earlier runs (and, not knowing which those are, all older ones).
	var kept *deadLetterSet
	if s.resumed && !inPlace {
		var err error
		if kept, err = loadSet(ctx, o.Store, job.Name, o.Observer); err != nil {
			return nil, err
		}
	}
	s.made = keepSet(o.Store, job.Name, o.Observer, kept)
	if s.resumed {
		log.Info("reindex resumed from checkpoint", "done", s.cp.Count, "last_id", IDString(s.cp.LastID), "estimated_total", s.est, "in_place", inPlace)
	} else {
		log.Info("reindex started", "estimated_total", s.est, "in_place", inPlace)
	}
	o.Stats.SetPhase(status.PhaseReindexing)
	o.Stats.Update(func(st *status.JobSnapshot) {
		st.Reindex = status.ReindexProgress{Done: s.cp.Count, Estimated: s.est, Started: s.start, Resumed: s.resumed}
	})
	return s, nil
}

// discardAbandoned deletes the staged target of the unfinished swap
// reindex recorded in cp, which a reindex starting over abandons: one
// staged for another destination (the job's index uid changed), or any
// when the job now reindexes in place. A fresh swap reindex into the same
// destination needs nothing: its Stage drops the leftover. A checkpoint of
// an earlier release does not name its destination: it was the job's
// (the uid is then taken as unchanged). A target another job's unfinished
// reindex stages into is left alone; a failure is only logged (the next
// reindex that starts over tries again, and the target can be deleted by
// hand).
func (s *Reindex) discardAbandoned(ctx context.Context, cp *jobstate.Checkpoint) {
	job, log, inPlace := s.src.Job, s.src.Log, s.inPlace
	if cp == nil || cp.InPlace {
		return
	}
	dest := jobstate.Destination(&job.Job)
	was := cp.Destination
	if was == "" {
		was = dest
	}
	if was == dest && !inPlace {
		return
	}
	others, err := s.opts.Store.StagingInto(ctx, job.Name, was)
	if err != nil {
		log.Warn("the staged index of the abandoned reindex is left in place: cannot tell whether another job uses it", "destination", was, "error", err)
		return
	}
	if len(others) > 0 {
		log.Info("the staged index of the abandoned reindex is left in place: another job's reindex stages into it", "destination", was, "jobs", others)
		return
	}
	if err := s.opts.Dest.DiscardStage(ctx, was); err != nil {
		log.Warn("deleting the staged index of the abandoned reindex failed; delete it by hand", "destination", was, "error", err)
		return
	}
	log.Info("deleted the staged index of the abandoned reindex", "destination", was, "in_place", inPlace)
}

// InPlace says whether the reindex writes the live destination itself
// (a mirror job, reindex: "inplace") rather than a staged index swapped in
// at the end.
func (s *Reindex) InPlace() bool { return s.inPlace }

// Made is the set of the error records made since the reindex began: they
// are the job's records once the staged index is swapped in.
func (s *Reindex) Made() *deadLetterSet { return s.made }

// Target is where the reindex's chunks go, and followed changes' while it
// runs: the staged index and the live one, or the live destination in
// place.
func (s *Reindex) Target() pipe.Target {
	if s.inPlace {
		return pipe.ToLive
	}
	return pipe.ToBoth
}

// StagedSink is the sink the pipe writes pipe.ToStaged flights to: nil in
// place (the live destination itself).
func (s *Reindex) StagedSink() sink.Sink {
	if s.inPlace {
		return nil
	}
	return s.staged
}

// Begin runs the reads in the background, for the pipe p the follow loop
// hands the chunks to; they end by themselves after the last chunk, or
// fail p. What becomes durable is checkpointed from now on (Durable).
func (s *Reindex) Begin(ctx context.Context, p *pipe.Pipe) {
	name := s.src.Job.Name
	s.ckp = newCheckpointer(ctx, s.opts.Store, name, s.opts.Lease, s.cp, s.win, p.Fail, s.throttled, func(n int64) {
		s.done.Store(n)
		s.opts.Stats.Update(func(st *status.JobSnapshot) { st.Reindex.Done = n })
		s.opts.Observer.ObserveReindexProgress(name, n, s.est)
	})
	ctx, s.cancel = context.WithCancelCause(ctx)
	go func() {
		defer close(s.stopped)
		defer s.unthrottled()
		if err := s.read(ctx, p); err != nil && ctx.Err() == nil {
			p.Fail(err)
		}
	}()
	go s.progress()
}

// Stop ends the reads and waits for them. Idempotent.
func (s *Reindex) Stop() {
	if s.cancel != nil {
		s.cancel(pipe.Closed)
		<-s.stopped
	}
	s.stopProgress()
}

func (s *Reindex) stopProgress() {
	s.progOnce.Do(func() { close(s.progStop) })
}

// read is the reindex's goroutine: the opening mark, the chunks, the
// sweep's pages, each followed by its mark.
func (s *Reindex) read(ctx context.Context, p *pipe.Pipe) error {
	sctx, marks, end, err := s.session(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := s.mark(sctx, marks, nil); err != nil {
		return err
	}
	last := s.cp.LastID
	size := PartSize(s.opts.PageSize)
	for {
		if s.shared != nil && s.shared.join(ctx) {
			return s.readShared(ctx, sctx, marks, p, last)
		}
		if err := s.win.acquire(ctx, p, size); err != nil {
			return err
		}
		c, err := s.readThrottled(sctx, last, size)
		if err != nil {
			return err
		}
		s.win.release(size - c.N)
		if c.N > 0 {
			last = c.Last
		} else {
			c.Last = last
		}
		end := c.Final // the collection holds nothing after it
		c.Final = end && !s.sweep
		if err := s.mark(sctx, marks, c); err != nil {
			return err
		}
		if end {
			break
		}
		if err := s.pace(ctx, c.N); err != nil {
			return err
		}
	}
	if !s.sweep {
		return nil
	}
	return s.readSweep(ctx, sctx, marks, last)
}

// readSweep lists the destination's ids in pages; each page's ids absent
// from the collection are registered under a mark, and the last (empty)
// chunk ends the reindex. The destination is read outside the source's
// session (a replica is another client's).
func (s *Reindex) readSweep(ctx, sctx context.Context, marks *mongo.Collection, last bson.RawValue) error {
	err := s.staged.Keys(ctx, func(ids []bson.RawValue) error {
		if len(ids) == 0 {
			return nil
		}
		gone, err := s.absent(sctx, ids)
		if err != nil {
			return err
		}
		return s.mark(sctx, marks, &Chunk{Gone: gone, Last: last})
	})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return s.src.Blame(ctx, errs.Wrap(errs.Failed, s.src.Job.Name, err, "sweep: list the destination's documents"))
	}
	return s.mark(sctx, marks, &Chunk{Final: true, Last: last})
}

// absent returns the ids of ids that the collection does not hold (the
// walk a scan-mode job's sweep shares: absentIDs).
func (s *Reindex) absent(ctx context.Context, ids []bson.RawValue) ([]bson.RawValue, error) {
	return absentIDs(ctx, s.coll, ids)
}

// progress logs and publishes the reindex's progress every
// ProgressInterval until the reindex stops.
func (s *Reindex) progress() {
	t := time.NewTicker(s.opts.ProgressInterval)
	defer t.Stop()
	first := s.done.Load()
	for {
		select {
		case <-t.C:
			n := s.done.Load()
			el := time.Since(s.start).Seconds()
			rate := float64(n-first) / el
			var eta time.Duration
			if rate > 0 && s.est > n {
				eta = time.Duration(float64(s.est-n) / rate * float64(time.Second)).Round(time.Second)
			}
			s.opts.Stats.Update(func(st *status.JobSnapshot) { st.Reindex.Rate = rate; st.Reindex.ETA = eta })
			s.src.Log.Info("reindex progress", "done", n, "estimated_total", s.est, "rate_per_s", int64(rate), "eta", eta)
		case <-s.progStop:
			return
		}
	}
}

// Prepared counts a chunk's documents the transform kept out or failed
// on (on the prepare stage).
func (s *Reindex) Prepared(skipped, failed int) {
	s.skipped.Add(int64(skipped))
	s.bad.Add(int64(failed))
}

// Durable counts the chunk c, handed to the pipe as fl, durable: its
// writes but the refused ones indexed, the refused ones failed; and hands
// its last _id to the checkpoint.
func (s *Reindex) Durable(fl *pipe.Flight, c *Chunk) {
	var up int64
	for i := range fl.Batch.Writes {
		if !fl.Batch.Writes[i].Delete && !fl.IsRefused(i) {
			up++
		}
	}
	s.indexed.Add(up)
	s.bad.Add(int64(fl.RefusedCount()))
	s.ckp.durable(c.Last, c.N)
}

// Removed counts n documents the sweep deleted, durable.
func (s *Reindex) Removed(n int64) { s.removed.Add(n) }

// Count is the documents read and checkpointed, earlier runs included.
func (s *Reindex) Count() int64 { return s.done.Load() }

// CloseCheckpoint records what was handed over (Durable) and stops the
// checkpoint; it returns why a write failed or the checkpoint was stopped.
func (s *Reindex) CloseCheckpoint() error { return s.ckp.close() }

// AbortCheckpoint stops the checkpoint without recording more, and waits
// until it has.
func (s *Reindex) AbortCheckpoint() { s.ckp.abort() }

// Swap swaps the staged index in: it first records in the checkpoint that
// the swap begins, so that a reindex stopped from now on starts over
// rather than resume into what may already be the old live index.
func (s *Reindex) Swap(ctx context.Context) error {
	s.cp.Swapping = true
	if err := s.opts.Store.WriteCheckpoint(ctx, s.src.Job.Name, s.opts.Lease, s.cp); err != nil {
		return err
	}
	if err := s.staged.Commit(ctx); err != nil {
		return errs.Wrap(errs.Failed, s.src.Job.Name, err, "swap the rebuilt index in")
	}
	return nil
}

// Finished notes the end of the reindex, in the log and the metrics.
func (s *Reindex) Finished() {
	s.took = time.Since(s.start)
	s.stopProgress()
	s.opts.Observer.ObserveReindexDone(s.src.Job.Name)
	s.src.Log.Info("reindex done", "indexed", s.indexed.Load(), "skipped", s.skipped.Load(), "removed", s.removed.Load(), "errors", s.bad.Load(),
		"resumed", s.resumed, "duration", s.took.Round(time.Millisecond))
}

// MarkCommitted closes Committed: the reindex is swapped in (or swept)
// and its position recorded.
func (s *Reindex) MarkCommitted() { close(s.committed) }

// Committed is closed once the reindex is swapped in (or swept) and its
// position recorded.
func (s *Reindex) Committed() <-chan struct{} { return s.committed }

// Summary is what a reindex did (this run; a resumed reindex's earlier
// pages are in Previous).
type Summary struct {
	Indexed  int64 // documents written
	Skipped  int64 // documents the transform kept out
	Removed  int64 // documents the sweep of an in-place reindex deleted
	Errors   int64 // documents left out for a per-document error (recorded)
	Resumed  bool  // continued from a checkpoint
	Previous int64 // documents read by earlier runs of a resumed reindex
	Duration time.Duration
}

// Summary is what the reindex did.
func (s *Reindex) Summary() *Summary {
	return &Summary{
		Indexed: s.indexed.Load(), Skipped: s.skipped.Load(), Removed: s.removed.Load(), Errors: s.bad.Load(),
		Resumed: s.resumed, Previous: s.prev, Duration: s.took,
	}
}
