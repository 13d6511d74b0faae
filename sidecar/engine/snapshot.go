package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/deadletter"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/prepare"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// A reindex is work interleaved into the job's change stream, never a phase
// before it: the watermark algorithm of DBLog (Andreakis and
// Papapanagiotou, "DBLog: A Watermark Based Change-Data-Capture
// Framework", 2020), which Debezium ships as incremental snapshots.
//
// The snapshot goroutine reads the collection in _id-ordered chunks. Before
// each read it has written a watermark (a unique mark in the job's
// watermark document of the state collection, which the job's stream
// follows), and after it the next one: chunk k is read between marks k-1
// and k. The follow loop, reading the stream in order, collects the _ids
// the stream changed since the last mark; when it reaches mark k it drops
// those from chunk k (the stream's version is as new or newer) and hands
// the rest to the pipe right there, between the changes before the mark and
// the ones after. A row not changed between the marks had at mark k the
// value it was read with, so every write lands in change order and the
// destination converges to the collection, however long the whole read
// takes: the change history only has to cover the stream, not the reindex.
//
// Where this differs from DBLog: the stream is never paused (the changed
// _ids are collected as a set from mark k-1 on and applied at mark k; the
// chunk is read by then, since mark k is written after the read); mark k
// closes chunk k's window and opens chunk k+1's, so there is one write per
// chunk; and each chunk is its own query (a find with a limit, never a
// getMore of an older cursor, whose documents may have been read before the
// mark). From Debezium's MongoDB incremental snapshot: the signal
// collection watched by the same stream, and chunks by _id with a limit.
//
// Each read must see every write before the mark that opened it: marks are
// written with majority write concern and chunks read with majority read
// concern in one causally consistent session, so the read carries the
// mark's operation time as afterClusterTime (also behind mongos, where the
// stream merges the shards' events in cluster time order).
//
// A swap reindex writes chunks to the staged index and every followed
// change to both the live and the staged index (search stays fresh); in
// place, both go to the live destination. A sweep (in place) lists the
// destination's ids the same way, between marks: an id absent from the
// collection when read, and not changed by the stream since, is deleted at
// the end unless the stream changes it before then.

// chunk is one read between two marks, registered under the mark written
// after it.
type chunk struct {
	items []prepare.Item  // the documents read, in _id order
	last  bson.RawValue   // the last _id read (the checkpoint after it)
	n     int             // documents read: the window's share
	gone  []bson.RawValue // sweep: destination ids absent from the collection
	final bool            // nothing follows: the reindex commits (or the fan-out ends) after it
	task  *fanTask        // a fan-out's page: the task it belongs to
}

// snapshot is one reindex, run by its goroutine beside the follow loop.
type snapshot struct {
	*chain
	stats   *status.JobStats
	staged  sink.Staged
	inPlace bool
	sweep   bool
	resumed bool
	cp      *jobstate.Checkpoint
	start   time.Time
	est     int64
	win     *window
	ckp     *checkpointer
	made    *deadletter.Set // error records made since the reindex began (kept at the swap)
	prev    int64           // documents read by earlier runs of a resumed reindex
	took    time.Duration

	// Figures for the summary and the progress log.
	done    atomic.Int64 // documents read and checkpointed, earlier runs included
	indexed atomic.Int64
	skipped atomic.Int64
	bad     atomic.Int64
	removed atomic.Int64

	cancel    context.CancelCauseFunc
	stopped   chan struct{}
	committed chan struct{} // closed once the reindex is swapped in (or swept) and recorded
	progStop  chan struct{}
	progOnce  sync.Once
}

// newSnapshot prepares a reindex of job into sink: it resumes cp (a
// checkpoint of the same transform whose staged index still exists) when
// resume is true, else stages afresh. It records a fresh checkpoint.
func (e *Engine) newSnapshot(ctx context.Context, jc jobConfig, dst sink.Sink, l Lease, stats *status.JobStats, log hclog.Logger, cp *jobstate.Checkpoint, resume bool) (*snapshot, error) {
	job := jc.job
	inPlace := job.Reindex == "inplace" || job.Kind == transform.Mirror
	s := &snapshot{
		chain:   e.newChain(jc, l, log, "reindex"),
		stats:   stats,
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
	if cp != nil && (!resume || cp.Hash != job.Hash || cp.InPlace != inPlace) {
		cp = nil
	}
	if cp != nil {
		staged, err := dst.Stage(ctx, true)
		switch {
		case errors.Is(err, sink.ErrNoStage):
			log.Info("reindex checkpoint found but its staged index is gone: starting over")
		case err != nil:
			return nil, errs.Wrap(errs.Failed, job.Name, err, "stage the reindex")
		default:
			s.staged, s.resumed, s.cp, s.prev = staged, true, cp, cp.Count
			if cp.Destination == "" {
				cp.Destination = jobstate.Destination(job) // rewritten with the next checkpoint
			}
		}
	}
	if s.staged == nil {
		e.discardAbandoned(ctx, job, dst, recorded, inPlace, log)
		staged, err := dst.Stage(ctx, false)
		if err != nil {
			return nil, errs.Wrap(errs.Failed, job.Name, err, "stage the reindex")
		}
		s.staged = staged
		s.cp = &jobstate.Checkpoint{StartedAt: time.Now(), Hash: job.Hash, InPlace: inPlace, Destination: jobstate.Destination(job)}
		if err := e.store.WriteCheckpoint(ctx, job.Name, l, s.cp); err != nil {
			return nil, err
		}
	}
	s.done.Store(s.cp.Count)
	s.win = newWindow(jc.PageSize)
	s.est, _ = e.source.Collection(job.Collection).EstimatedDocumentCount(ctx)
	// Error records: in place, a document written without error clears its
	// record once durable; into a staged index, records are only known
	// stale when the swap is done (then every record not made again by
	// this reindex is cleared). A resumed staged reindex keeps the records
	// of its earlier runs (and, not knowing which those are, all older ones).
	var kept *deadletter.Set
	if s.resumed && !inPlace {
		var err error
		if kept, err = deadletter.Load(ctx, e.store, job.Name, e.obs); err != nil {
			return nil, err
		}
	}
	s.made = deadletter.Keep(e.store, job.Name, e.obs, kept)
	if s.resumed {
		log.Info("reindex resumed from checkpoint", "done", s.cp.Count, "last_id", idString(s.cp.LastID), "estimated_total", s.est, "in_place", inPlace)
	} else {
		log.Info("reindex started", "estimated_total", s.est, "in_place", inPlace)
	}
	stats.SetPhase(status.PhaseReindexing)
	stats.Update(func(st *status.JobSnapshot) {
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
func (e *Engine) discardAbandoned(ctx context.Context, job *transform.Job, dst sink.Sink, cp *jobstate.Checkpoint, inPlace bool, log hclog.Logger) {
	d, ok := dst.(sink.StageDiscarder)
	if cp == nil || cp.InPlace || !ok {
		return
	}
	dest := jobstate.Destination(job)
	was := cp.Destination
	if was == "" {
		was = dest
	}
	if was == dest && !inPlace {
		return
	}
	others, err := e.store.StagingInto(ctx, job.Name, was)
	if err != nil {
		log.Warn("the staged index of the abandoned reindex is left in place: cannot tell whether another job uses it", "destination", was, "error", err)
		return
	}
	if len(others) > 0 {
		log.Info("the staged index of the abandoned reindex is left in place: another job's reindex stages into it", "destination", was, "jobs", others)
		return
	}
	if err := d.DiscardStage(ctx, was); err != nil {
		log.Warn("deleting the staged index of the abandoned reindex failed; delete it by hand", "destination", was, "error", err)
		return
	}
	log.Info("deleted the staged index of the abandoned reindex", "destination", was, "in_place", inPlace)
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// changeTarget is where the snapshot's chunks go, and followed changes' while it
// runs: the staged index, or the live destination in place.
func (s *snapshot) changeTarget() pipe.Target {
	if s.inPlace {
		return pipe.ToLive
	}
	return pipe.ToBoth
}

// stagedSink is the sink the pipe writes pipe.ToStaged flights to: nil in place
// (the live destination itself).
func (s *snapshot) stagedSink() sink.Sink {
	if s.inPlace {
		return nil
	}
	return s.staged
}

// start runs the reads in the background; they end by themselves after the
// last chunk, or fail the pipe.
func (s *snapshot) begin(ctx context.Context, p *pipe.Pipe) {
	ctx, s.cancel = context.WithCancelCause(ctx)
	go func() {
		defer close(s.stopped)
		if err := s.read(ctx, p); err != nil && ctx.Err() == nil {
			p.Fail(err)
		}
	}()
	go s.progress()
}

// stop ends the reads and waits for them. Idempotent.
func (s *snapshot) stop() {
	if s.cancel != nil {
		s.cancel(pipe.Closed)
		<-s.stopped
	}
	s.stopProgress()
}

func (s *snapshot) stopProgress() {
	s.progOnce.Do(func() { close(s.progStop) })
}

// read is the snapshot goroutine: the opening mark, the chunks, the sweep's
// pages, each followed by its mark.
func (s *snapshot) read(ctx context.Context, p *pipe.Pipe) error {
	sctx, marks, end, err := s.session(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := s.mark(sctx, marks, nil); err != nil {
		return err
	}
	last := s.cp.LastID
	size := partSize(s.jc.PageSize)
	for {
		if err := s.win.acquire(ctx, p, size); err != nil {
			return err
		}
		c, err := s.readChunk(sctx, nil, last, size)
		if err != nil {
			return err
		}
		s.win.release(size - c.n)
		if c.n > 0 {
			last = c.last
		} else {
			c.last = last
		}
		end := c.final // the collection holds nothing after it
		c.final = end && !s.sweep
		if err := s.mark(sctx, marks, c); err != nil {
			return err
		}
		if end {
			break
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
func (s *snapshot) readSweep(ctx, sctx context.Context, marks *mongo.Collection, last bson.RawValue) error {
	err := s.staged.Keys(ctx, func(ids []bson.RawValue) error {
		if len(ids) == 0 {
			return nil
		}
		gone, err := s.absent(sctx, ids)
		if err != nil {
			return err
		}
		return s.mark(sctx, marks, &chunk{gone: gone, last: last})
	})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return leaseOr(ctx, s.l, errs.Wrap(errs.Failed, s.jc.job.Name, err, "sweep: list the destination's documents"))
	}
	return s.mark(sctx, marks, &chunk{final: true, last: last})
}

// absent returns the ids of ids that the collection does not hold.
func (s *snapshot) absent(ctx context.Context, ids []bson.RawValue) ([]bson.RawValue, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	have := make(map[string]bool, len(ids))
	for cur.Next(ctx) {
		have[keyOf(cur.Current.Lookup("_id"))] = true
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	var gone []bson.RawValue
	for _, id := range ids {
		if !have[keyOf(id)] {
			gone = append(gone, bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)})
		}
	}
	return gone, nil
}

// progress logs and publishes the reindex's progress every
// ProgressInterval until the snapshot stops.
func (s *snapshot) progress() {
	t := time.NewTicker(s.jc.ProgressInterval)
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
			s.stats.Update(func(st *status.JobSnapshot) { st.Reindex.Rate = rate; st.Reindex.ETA = eta })
			s.log.Info("reindex progress", "done", n, "estimated_total", s.est, "rate_per_s", int64(rate), "eta", eta)
		case <-s.progStop:
			return
		}
	}
}

func watermarkKey(job string) bson.D { return bson.D{{Key: "watermark", Value: job}} }
