package engine

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
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

// ReindexSummary is what a reindex did (this run; a resumed reindex's
// earlier pages are in Resumed... fields).
type ReindexSummary struct {
	Indexed  int64 // documents written
	Skipped  int64 // documents the transform kept out
	Removed  int64 // documents the sweep of an in-place reindex deleted
	Errors   int64 // documents left out for a per-document error (recorded)
	Resumed  bool  // continued from a checkpoint
	Previous int64 // documents read by earlier runs of a resumed reindex
	Duration time.Duration
}

// Reindex rebuilds job's destination from the collection under l and
// records the position taken at its start (`meilistream reindex NAME`). It
// continues a checkpointed reindex of the same transform. On failure nothing
// is recorded but the checkpoint; a lost lease ends it with LEASE_LOST before
// the swap and the record. Cancelling ctx stops it (error: ctx's cause); a
// later Reindex or Run resumes.
func (e *Engine) Reindex(ctx context.Context, job *transform.Job, sink Sink, l Lease, stats *status.JobStats) (ReindexSummary, error) {
	ctx, stop := leaseContext(ctx, l)
	defer stop()
	log := e.log.With("job", job.Name)
	err := e.store.Stamp(ctx, job.Name, l)
	if err == nil {
		err = retryPrepare(ctx, sink, e.cfg, log)
	}
	var sum ReindexSummary
	if err == nil {
		sum, err = e.reindex(ctx, job, sink, l, stats, log)
	}
	stats.SetPhase(status.PhaseIdle)
	if err != nil {
		err = errs.WithJob(job.Name, leaseOr(ctx, l, err))
		stats.SetError(err)
	}
	return sum, err
}

// currentToken returns where the collection's change history is now.
func (e *Engine) currentToken(ctx context.Context, job *transform.Job) (bson.Raw, error) {
	cs, err := e.openStream(ctx, job, nil)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job.Name, err, "open change stream to take the reindex's start position")
	}
	defer cs.Close(context.WithoutCancel(ctx))
	tok := cs.ResumeToken()
	if len(tok) == 0 {
		// No post-batch resume token in the first reply (servers send one;
		// be safe): one getMore gives it.
		cs.TryNext(ctx)
		tok = cs.ResumeToken()
	}
	if len(tok) == 0 {
		return nil, errs.New(errs.Failed, job.Name, "the change stream gave no resume token")
	}
	return append(bson.Raw(nil), tok...), nil
}

// tokenValid says whether a stream can still resume after tok.
func (e *Engine) tokenValid(ctx context.Context, job *transform.Job, tok bson.Raw) (bool, error) {
	cs, err := e.openStream(ctx, job, tok)
	if isHistoryLost(err) {
		return false, nil
	}
	if err != nil {
		return false, errs.Wrap(errs.Failed, job.Name, err, "open change stream")
	}
	_ = cs.Close(context.WithoutCancel(ctx))
	return true, nil
}

func (e *Engine) reindex(ctx context.Context, job *transform.Job, sink Sink, l Lease, stats *status.JobStats, log hclog.Logger) (ReindexSummary, error) {
	start := time.Now()
	jc := e.jobCfg(job)
	name := job.Name
	var sum ReindexSummary
	stats.SetPhase(status.PhaseReindexing)
	inPlace := job.Reindex == "inplace" || job.Kind == transform.Mirror
	coll := e.source.Collection(job.Collection)

	// Resume a checkpoint of the same transform whose start is still in
	// the history, into the staged target it was writing.
	cp, err := e.store.ReadCheckpoint(ctx, name)
	if err != nil {
		return sum, errs.Wrap(errs.Failed, name, err, "read reindex checkpoint")
	}
	var staged Staged
	if cp != nil && cp.Swapping {
		log.Info("the last reindex stopped while swapping its index in: starting over (its staged index may already be the old live one)")
		cp = nil
	}
	if cp != nil && cp.Hash == job.Hash && cp.InPlace == inPlace && len(cp.StartToken) > 0 {
		ok, err := e.tokenValid(ctx, job, cp.StartToken)
		if err != nil {
			return sum, err
		}
		if ok {
			staged, err = sink.Stage(ctx, true)
			switch {
			case errors.Is(err, ErrNoStage):
				log.Info("reindex checkpoint found but its staged index is gone: starting over")
				staged = nil
			case err != nil:
				return sum, errs.Wrap(errs.Failed, name, err, "stage the reindex")
			default:
				sum.Resumed, sum.Previous = true, cp.Count
			}
		} else {
			log.Info("reindex checkpoint's start is no longer in the change history: starting over")
		}
	}
	if staged == nil {
		tok, err := e.currentToken(ctx, job)
		if err != nil {
			return sum, err
		}
		staged, err = sink.Stage(ctx, false)
		if err != nil {
			return sum, errs.Wrap(errs.Failed, name, err, "stage the reindex")
		}
		cp = &jobstate.Checkpoint{StartToken: tok, StartedAt: time.Now(), Hash: job.Hash, InPlace: inPlace}
		if err := e.store.WriteCheckpoint(ctx, name, l, cp); err != nil {
			return sum, err
		}
	}
	est, _ := coll.EstimatedDocumentCount(ctx)
	if sum.Resumed {
		log.Info("reindex resumed from checkpoint", "done", cp.Count, "last_id", idString(cp.LastID), "estimated_total", est, "in_place", inPlace)
	} else {
		log.Info("reindex started", "estimated_total", est, "in_place", inPlace)
	}
	stats.Update(func(s *status.JobSnapshot) {
		s.Reindex = status.ReindexProgress{Done: cp.Count, Estimated: est, Started: start, Resumed: sum.Resumed}
	})

	// Progress every few seconds, in the log and the stats.
	var done atomic.Int64
	done.Store(cp.Count)
	progStop := make(chan struct{})
	defer close(progStop)
	go func() {
		t := time.NewTicker(jc.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				n := done.Load()
				el := time.Since(start).Seconds()
				rate := float64(n-sum.Previous) / el
				var eta time.Duration
				if rate > 0 && est > n {
					eta = time.Duration(float64(est-n) / rate * float64(time.Second)).Round(time.Second)
				}
				stats.Update(func(s *status.JobSnapshot) { s.Reindex.Rate = rate; s.Reindex.ETA = eta })
				log.Info("reindex progress", "done", n, "estimated_total", est, "rate_per_s", int64(rate), "eta", eta)
			case <-progStop:
				return
			}
		}
	}()

	// Pages in _id order, read in parts: a part is one batch of the cursor
	// (the find or one getMore) and one batch to the destination,
	// transformed on the pipe's prepare stage, sent and waited for on its
	// other stages, and checkpointed in order once durable. A window keeps
	// the documents read and not yet checkpointed to one page: a part is
	// fetched only when it fits, and its documents leave the window once
	// their checkpoint is written. So a process killed at any point reads
	// again at most one page on restart, while the next part is still read
	// as the ones before it are transformed and uploaded.
	// The pipe outlives ctx on a clean stop, so what was sent is made
	// durable and checkpointed (within DrainTimeout); the lease still stops
	// it at once. At most two batches are in flight: enough to keep
	// Meilisearch busy (the window holds two parts at most by default).
	rjc := jc
	rjc.MaxInFlight = min(jc.MaxInFlight, 2)
	pctx, pstop := leaseContext(context.WithoutCancel(ctx), l)
	defer pstop()
	p := e.newPipe(pctx, rjc, staged, stats, log, false)
	defer p.abort(errPipeClosed)
	win := newWindow(jc.PageSize)
	ckp := e.newCheckpointer(pctx, name, l, cp, win, p.fail, func(n int64) {
		done.Store(n)
		stats.Update(func(s *status.JobSnapshot) { s.Reindex.Done = n })
		e.observeProgress(name, n, est)
	})
	defer ckp.abort()
	// Error records: in place, a document written without error clears its
	// record once durable; into a staged index, records are only known
	// stale when the swap is done (then every record not made again by this
	// reindex is cleared).
	// A resumed staged reindex keeps the records of its earlier runs (and,
	// not knowing which those are, all older ones).
	set := &errSet{e: e, job: name, m: map[string]bool{}}
	if inPlace || sum.Resumed {
		if set, err = e.loadErrSet(ctx, name); err != nil {
			return sum, err
		}
		set.keepOnly = !inPlace
	}
	p.errs = set
	var skipped, bad, indexed atomic.Int64
	size := partSize(jc.PageSize)
	findOpts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(size))
	// submit hands one part to the pipe; once durable, the checkpointer
	// records its last _id and the count so far.
	submit := func(batch []item) error {
		last := batch[len(batch)-1].id
		var clear []int
		f := &flight{
			prepare: func(ctx context.Context, f *flight) error {
				writes, sk, bd, err := transformAll(ctx, job, batch, inPlace)
				if err != nil {
					return err
				}
				if err := e.handleDocErrors(ctx, jc, stats, set, bd); err != nil {
					return err
				}
				clear = set.candidates(writes, bd)
				skipped.Add(int64(sk))
				bad.Add(int64(len(bd)))
				stats.Add(0, 0, int64(sk), 0)
				e.observeSkipped(name, int64(sk))
				f.batch = Batch{Writes: writes}
				return nil
			},
			durable: func(ctx context.Context, f *flight) error {
				var up int64
				for i := range f.batch.Writes {
					if !f.batch.Writes[i].Delete {
						up++
					}
				}
				if err := set.cleared(ctx, f, clear); err != nil {
					return err
				}
				indexed.Add(up - int64(len(f.refusedPos)))
				bad.Add(int64(len(f.refusedPos)))
				ckp.durable(last, len(batch))
				return nil
			},
		}
		return p.submit(f)
	}
	// stopped ends a reindex cut short: on a clean stop (ctx cancelled, not
	// a lost lease) what was sent is made durable and checkpointed first.
	stopped := func(err error) (ReindexSummary, error) {
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errs.ErrLeaseLost) {
			timer := time.AfterFunc(jc.DrainTimeout, func() {
				p.fail(context.DeadlineExceeded)
				ckp.fail(context.DeadlineExceeded)
			})
			defer timer.Stop()
			cerr := p.close()
			if cerr == nil {
				cerr = ckp.close()
			}
			if cerr == nil {
				log.Info("reindex stopped; it resumes from its checkpoint", "done", done.Load())
			}
			return sum, context.Cause(ctx)
		}
		return sum, err
	}
	var cur *mongo.Cursor
	defer func() {
		if cur != nil {
			cur.Close(context.WithoutCancel(ctx))
		}
	}()
	lastRead := cp.LastID
	for attempt := 0; ; {
		// Room for a whole part before anything is fetched: the find and
		// each getMore return up to size documents.
		if err := win.acquire(ctx, p, size); err != nil {
			return stopped(err)
		}
		if cur == nil {
			if cur, err = coll.Find(ctx, resumeFilter(lastRead), findOpts); err != nil {
				win.release(size)
				return stopped(leaseOr(ctx, l, errs.Wrap(errs.Failed, name, err, "read the collection")))
			}
		}
		batch, more := readPart(ctx, cur, size)
		win.release(size - len(batch))
		if len(batch) > 0 {
			lastRead = batch[len(batch)-1].id
			attempt = 0
			if err := submit(batch); err != nil {
				return stopped(err)
			}
		}
		if more {
			continue
		}
		err := cur.Err()
		if err == nil || ctx.Err() != nil {
			break
		}
		// A dropped connection or a cursor timed out on the server (a
		// destination stuck for long): read on from the last _id read.
		if attempt >= 10 {
			return stopped(leaseOr(ctx, l, errs.Wrap(errs.Failed, name, err, "read the collection")))
		}
		log.Warn("reading the collection failed; reading on from the last document read", "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
			return stopped(err)
		}
		attempt++
		cur.Close(context.WithoutCancel(ctx))
		cur = nil
	}
	if ctx.Err() != nil {
		return stopped(ctx.Err())
	}
	if err := p.close(); err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	if err := ckp.close(); err != nil {
		return sum, leaseOr(ctx, l, err)
	}
	sum.Indexed, sum.Skipped, sum.Errors = indexed.Load(), skipped.Load(), bad.Load()

	// Everything is durable. Ask the server before each destructive or
	// recording step.
	if inPlace && job.Sweep {
		if err := l.Confirm(ctx); err != nil {
			return sum, err
		}
		removed, err := e.sweep(ctx, jc, staged, coll, stats, log)
		if err != nil {
			return sum, err
		}
		sum.Removed = removed
	}
	// The last steps are short and must not be cut between the swap and the
	// record by a clean stop (the next start would reindex again): they run
	// on a context only the lease and DrainTimeout end.
	if ctx.Err() != nil {
		return sum, context.Cause(ctx)
	}
	fctx, fstop := drainContext(ctx, l, jc.DrainTimeout)
	defer fstop()
	if err := l.Confirm(fctx); err != nil {
		return sum, err
	}
	if !inPlace {
		cp.Swapping = true
		if err := e.store.WriteCheckpoint(fctx, name, l, cp); err != nil {
			return sum, err
		}
		if err := staged.Commit(fctx); err != nil {
			return sum, errs.Wrap(errs.Failed, name, err, "swap the rebuilt index in")
		}
		if err := l.Confirm(fctx); err != nil {
			return sum, err
		}
		if err := e.clearStaleErrors(fctx, name, set); err != nil {
			return sum, err
		}
	}
	if err := e.store.RecordNewPosition(fctx, job, l, cp.StartToken, cp.StartedAt); err != nil {
		return sum, err
	}
	if err := e.store.DeleteCheckpoint(fctx, name, l); err != nil {
		return sum, err
	}
	sum.Duration = time.Since(start)
	stats.Update(func(s *status.JobSnapshot) {
		s.Reindexes++
		s.Reindex.Done = cp.Count
		s.LastPosition = cp.StartedAt
		s.RecordedAt = time.Now()
	})
	e.observeReindex(name, sum.Duration)
	log.Info("reindex done", "indexed", sum.Indexed, "skipped", sum.Skipped, "removed", sum.Removed, "errors", sum.Errors,
		"resumed", sum.Resumed, "duration", sum.Duration.Round(time.Millisecond))
	return sum, nil
}

// partSize is how many documents a reindex reads and sends at a time: half
// a page, so that one part is read while the one before it is transformed
// and uploaded and still at most one page is read and not checkpointed.
// It is not capped by batchSize, follow's trigger: bigger batches cost less
// per document (fewer tasks, getMores and checkpoints), and a part is one
// cursor batch, so never more than the 16 MB MongoDB returns at once,
// however large the documents.
func partSize(pageSize int) int {
	return max(1, pageSize/2)
}

// readPart reads the documents of the cursor's current batch, fetching
// one if it has none (at most size: the cursor's batch size). more is false
// once the cursor is exhausted or failed (see cur.Err).
//
// The documents are not copied: each is cur.Current, a slice of the reply
// the driver read it from. mongo.Cursor's documentation says Current is
// valid only until the next Next, but the driver (v2.10.0) reads every
// reply into a buffer of its own (x/mongo/driver/topology connection.read:
// make([]byte, size); decompression and decryption make new ones too) and
// never writes to it again, so a slice of it stays valid while it is held.
// TestReadPartKeepsDocumentsValidAcrossBatches pins this for the driver in
// go.mod. Copying each part into a buffer of our own (a megabyte per part
// of 1000 articles, living as long as the reply does) costs a few percent
// of a reindex's CPU and peak memory for nothing.
func readPart(ctx context.Context, cur *mongo.Cursor, size int) (batch []item, more bool) {
	for len(batch) < size && cur.Next(ctx) {
		if batch == nil {
			batch = make([]item, 0, size)
		}
		doc := cur.Current[:len(cur.Current):len(cur.Current)]
		batch = append(batch, item{doc: doc, id: doc.Lookup("_id"), op: transform.OpReindex})
		if cur.RemainingBatchLength() == 0 {
			return batch, true
		}
	}
	return batch, len(batch) == size
}

// window bounds the documents a reindex has read and not yet
// checkpointed.
type window struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{} // closed (and replaced) when room is made
}

func newWindow(n int) *window { return &window{max: n, wake: make(chan struct{})} }

// acquire waits until n more documents fit, or ctx ends or p fails.
func (w *window) acquire(ctx context.Context, p *pipe, n int) error {
	for {
		w.mu.Lock()
		if w.used+n <= w.max || w.used == 0 {
			w.used += n
			w.mu.Unlock()
			return nil
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.Failed():
			if err := p.Err(); err != nil {
				return err
			}
			return context.Cause(p.ctx)
		}
	}
}

// release lets n documents out.
func (w *window) release(n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	w.used -= n
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}

// checkpointer records a reindex's checkpoint off the pipe's wait stage: a
// part that became durable only hands over its last _id and size (in
// submission order, so the last one handed over is the furthest durable
// point, in _id order). One goroutine writes the latest (parts that became
// durable during a write are recorded together by the next one), then lets
// their documents out of the window. The checkpoint is fenced by the lease
// epoch (jobstate.Store.WriteCheckpoint); a failed write fails the pipe.
type checkpointer struct {
	e        *Engine
	job      string
	l        Lease
	cp       *jobstate.Checkpoint // the goroutine's until done is closed
	win      *window
	failPipe func(error)
	written  func(count int64)

	ctx    context.Context
	cancel context.CancelCauseFunc
	wake   chan struct{} // one pending signal at most
	done   chan struct{}
	err    error // set before done is closed

	mu     sync.Mutex
	lastID bson.RawValue
	count  int64 // documents read up to lastID, earlier runs included
	docs   int   // documents durable and not yet recorded
	closed bool
}

func (e *Engine) newCheckpointer(ctx context.Context, job string, l Lease, cp *jobstate.Checkpoint, win *window, failPipe func(error), written func(int64)) *checkpointer {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &checkpointer{
		e: e, job: job, l: l, cp: cp, win: win, failPipe: failPipe, written: written,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}),
		lastID: cp.LastID, count: cp.Count,
	}
	go c.loop()
	return c
}

// durable hands over a part that is durable: n documents up to last.
func (c *checkpointer) durable(last bson.RawValue, n int) {
	c.mu.Lock()
	c.lastID = last
	c.count += int64(n)
	c.docs += n
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		last, count, docs, closed := c.lastID, c.count, c.docs, c.closed
		c.docs = 0
		c.mu.Unlock()
		if docs > 0 {
			c.cp.LastID, c.cp.Count = last, count
			if err := c.e.store.WriteCheckpoint(c.ctx, c.job, c.l, c.cp); err != nil {
				if c.ctx.Err() != nil {
					err = context.Cause(c.ctx)
				}
				c.err = err
				c.failPipe(err)
				return
			}
			c.win.release(docs)
			c.written(count)
			continue
		}
		if closed {
			return
		}
		select {
		case <-c.wake:
		case <-c.ctx.Done():
			c.err = context.Cause(c.ctx)
			return
		}
	}
}

// close records what was handed over and stops; it returns why a write
// failed or the checkpointer was stopped.
func (c *checkpointer) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
	return c.err
}

// fail stops the checkpointer without waiting.
func (c *checkpointer) fail(err error) { c.cancel(err) }

// abort stops the checkpointer and waits until it has.
func (c *checkpointer) abort() {
	c.cancel(errPipeClosed)
	<-c.done
}

// sweep deletes, after an in-place reindex, what the destination holds for
// _ids no longer in the collection. (Documents the transform keeps out
// were deleted while reindexing.) The ids to delete are collected first:
// deleting while paging through the destination would shift its pages.
func (e *Engine) sweep(ctx context.Context, jc jobConfig, staged Staged, coll *mongo.Collection, stats *status.JobStats, log hclog.Logger) (int64, error) {
	name := jc.job.Name
	var gone []bson.RawValue
	err := staged.Keys(ctx, func(ids []bson.RawValue) error {
		if len(ids) == 0 {
			return nil
		}
		in := make(bson.A, len(ids))
		for i, id := range ids {
			in[i] = id
		}
		cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		have := make(map[string]bool, len(ids))
		for cur.Next(ctx) {
			have[keyOf(cur.Current.Lookup("_id"))] = true
		}
		if err := cur.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if !have[keyOf(id)] {
				gone = append(gone, bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)})
			}
		}
		return nil
	})
	if err != nil {
		return 0, errs.Wrap(errs.Failed, name, err, "sweep: list the destination's documents")
	}
	if len(gone) == 0 {
		return 0, nil
	}
	log.Info("sweep: deleting documents no longer in the collection", "count", len(gone))
	p := e.newPipe(ctx, jc, staged, stats, log, false)
	defer p.abort(errPipeClosed)
	for lo := 0; lo < len(gone); lo += jc.BatchSize {
		chunk := gone[lo:min(lo+jc.BatchSize, len(gone))]
		w := make([]Write, len(chunk))
		for i, id := range chunk {
			w[i] = Write{SourceID: id, Delete: true}
		}
		if err := p.submit(&flight{batch: Batch{Writes: w}}); err != nil {
			return 0, err
		}
	}
	if err := p.close(); err != nil {
		return 0, err
	}
	return int64(len(gone)), nil
}

// resumeFilter selects the _ids after last in _id order. MongoDB's
// comparison operators only match values of the same canonical type ("type
// bracketing",
// https://www.mongodb.com/docs/manual/reference/mql/query-predicates/type-bracketing/),
// so {$gt: last} alone would skip every _id of a type that sorts after
// last's: those are added by $type.
func resumeFilter(last bson.RawValue) bson.D {
	if last.Type == 0 {
		return bson.D{}
	}
	gt := bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}
	later := laterTypes(last.Type)
	if len(later) == 0 {
		return gt
	}
	return bson.D{{Key: "$or", Value: bson.A{gt, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}}}}}
}

// typeRank is MongoDB's canonical sort order of BSON types
// (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
var typeRank = map[bson.Type]int{
	bson.TypeMinKey: 0, bson.TypeNull: 1, bson.TypeUndefined: 1,
	bson.TypeDouble: 2, bson.TypeInt32: 2, bson.TypeInt64: 2, bson.TypeDecimal128: 2,
	bson.TypeString: 3, bson.TypeSymbol: 3, bson.TypeEmbeddedDocument: 4, bson.TypeArray: 5,
	bson.TypeBinary: 6, bson.TypeObjectID: 7, bson.TypeBoolean: 8, bson.TypeDateTime: 9,
	bson.TypeTimestamp: 10, bson.TypeRegex: 11, bson.TypeDBPointer: 12, bson.TypeJavaScript: 13,
	bson.TypeCodeWithScope: 14, bson.TypeMaxKey: 15,
}

// laterTypes returns the type numbers ($type accepts them) of the types
// that sort after t.
func laterTypes(t bson.Type) bson.A {
	r, ok := typeRank[t]
	if !ok {
		return nil
	}
	var out bson.A
	for typ, rank := range typeRank {
		if rank > r && typ != bson.TypeArray { // an _id is never an array
			n := int32(typ)
			if typ == bson.TypeMinKey {
				n = -1
			}
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].(int32) < out[j].(int32) })
	return out
}
