package engine

import (
	"context"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// A `meilistream retry NAME` while another process holds the job's lease
// leaves a request in the state collection (jobstate, "retry requests").
// The holder, while it follows, looks for one every RetryPoll, takes it,
// and retries the recorded documents under its own lease, inside the
// running job: never beside it, because a document the retry read could
// otherwise land after a newer version the stream wrote. The recorded ids
// go to the fan-out reader (fanout.go) as tasks of up to half a page each:
// each task is read by _id between two marks of the reader's chain, and
// at its mark the follow loop hands the page to the pipe, after the
// changes before the mark, without the documents the stream changed in the
// window (the stream's version went before, or comes after: their records
// are then the stream's to clear). An id the collection no longer holds is
// deleted from the destination, in order too. What succeeds clears its
// record once durable; what fails again keeps (updates) it. When the last
// page is durable the holder writes the counts into the request, which
// `retry` prints. No position waits for a retry: its records outlive a
// crash, and the request is taken again by the next holder.

// DefaultRetryPoll is how often a following job's holder looks for retry
// requests.
const DefaultRetryPoll = time.Second

// liveRetry is one retry request served inside the running job.
type liveRetry struct {
	req   *jobstate.RetryRequest
	ids   []bson.RawValue
	start time.Time
	// pages not yet durable; done is closed when it reaches zero.
	pages                 atomic.Int64
	written, gone, failed atomic.Int64
	done                  chan struct{}
}

func (r *liveRetry) summary() RetrySummary {
	return RetrySummary{
		Retried: int64(len(r.ids)), Written: r.written.Load(), Gone: r.gone.Load(), Failed: r.failed.Load(),
		Duration: time.Since(r.start),
	}
}

// serveRetries takes the job's retry requests until ctx ends, one at a
// time, and hands each to the follow loop. The returned stop waits for it
// to end and answers a request taken and not finished (the job stopped, or
// lost its lease, before its last page was durable: `retry` says so). Call
// stop after the follow loop returned: a retry whose pages became durable
// while the job drained is then answered as done.
func (f *follower) serveRetries(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var current *liveRetry // the goroutine's until done is closed
	go func() {
		defer close(done)
		current = f.takeRetries(ctx)
	}()
	return func() {
		cancel()
		<-done
		r := current
		if r == nil {
			return
		}
		select {
		case <-r.done:
			f.answerRetry(r, nil)
		default:
			var cause error = errs.New(errs.Failed, f.jc.job.Name, "the job stopped in this process before the retry was done; run `meilistream retry %s` again", f.jc.job.Name)
			if err := f.l.Err(); err != nil {
				cause = errs.Wrap(errs.LeaseLost, f.jc.job.Name, err, "the holder lost the job's lease before the retry was done; run `meilistream retry %s` again", f.jc.job.Name)
			}
			f.answerRetry(r, cause)
		}
	}
}

// takeRetries is serveRetries' loop; it returns the request it was serving
// when ctx ended, if any.
func (f *follower) takeRetries(ctx context.Context) *liveRetry {
	e, name := f.e, f.jc.job.Name
	t := time.NewTicker(e.cfg.RetryPoll)
	defer t.Stop()
	var swept time.Time
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Since(swept) >= time.Minute {
			swept = time.Now()
			if err := e.store.DropExpiredRequests(ctx, name); err != nil && ctx.Err() == nil {
				f.log.Warn("deleting expired retry requests failed", "error", err)
			}
		}
		req, err := e.store.ClaimRetry(ctx, name, e.cfg.Process, f.l.Epoch())
		if err != nil || req == nil {
			if err != nil && ctx.Err() == nil && !failing {
				f.log.Warn("looking for retry requests failed; trying again", "error", err)
			}
			failing = err != nil
			continue
		}
		failing = false
		r := &liveRetry{req: req, start: time.Now(), done: make(chan struct{})}
		ids, err := e.store.DocErrorIDs(ctx, name)
		if err != nil {
			f.answerRetry(r, err)
			continue
		}
		r.ids = distinctIDs(ids)
		f.log.Info("retrying the recorded documents, asked by meilistream retry", "documents", len(r.ids), "request", req.ID)
		select {
		case f.retries <- r:
		case <-ctx.Done():
			return r
		}
		select {
		case <-r.done:
			f.answerRetry(r, nil)
		case <-ctx.Done():
			return r
		}
	}
}

// answerRetry writes r's outcome into its request: done with the counts,
// or failed with cause.
func (f *follower) answerRetry(r *liveRetry, cause error) {
	out := *r.req
	sum := r.summary()
	out.Retried, out.Written, out.Gone, out.Failed, out.Duration = sum.Retried, sum.Written, sum.Gone, sum.Failed, sum.Duration
	out.State = jobstate.RequestDone
	if cause != nil {
		out.State, out.Code, out.Error = jobstate.RequestFailed, string(errs.CodeOf(cause)), cause.Error()
		f.log.Warn("retry of the recorded documents not done", "request", r.req.ID, "error", cause)
	} else {
		f.log.Info("retry done", "retried", sum.Retried, "written", sum.Written, "gone", sum.Gone, "failed", sum.Failed, "request", r.req.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.e.store.FinishRetry(ctx, &out); err != nil {
		f.log.Warn("answering the retry request failed; meilistream retry will give up waiting", "request", r.req.ID, "error", err)
	}
}

// startRetry hands r's ids to the fan-out reader (started now if the job
// has none), half a page per task.
func (f *follower) startRetry(r *liveRetry) error {
	if len(r.ids) == 0 {
		close(r.done)
		return nil
	}
	if f.fan == nil {
		f.startFan()
	}
	size := partSize(f.jc.PageSize)
	var tasks []*fanTask
	for lo := 0; lo < len(r.ids); lo += size {
		tasks = append(tasks, &fanTask{ids: r.ids[lo:min(lo+size, len(r.ids))], retry: r})
	}
	r.pages.Store(int64(len(tasks)))
	f.fanBusy += len(tasks)
	for _, t := range tasks {
		select {
		case f.fan.tasks <- t:
		case <-f.p.Failed():
			return f.p.Err()
		}
	}
	return nil
}

// readRetryPage reads a retry task's documents by _id (one find: a task
// holds at most size ids) and registers them under a mark, with the ids
// the collection no longer holds as gone.
func (fo *fanout) readRetryPage(ctx, sctx context.Context, marks *mongo.Collection, p *pipe.Pipe, t *fanTask, size int) error {
	if err := fo.win.acquire(ctx, p, size); err != nil {
		return err
	}
	c, err := fo.readIDs(sctx, t.ids)
	if err != nil {
		return err
	}
	fo.win.release(size - c.n)
	c.task = t
	return fo.mark(sctx, marks, c)
}

// readIDs reads the documents of ids (retried on a transient error: no
// mark is written in between, so a read again is still inside the
// window).
func (c *chain) readIDs(ctx context.Context, ids []bson.RawValue) (*chunk, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}
	for attempt := 0; ; attempt++ {
		items, err := c.findAll(ctx, filter)
		if err == nil {
			found := make(map[string]bool, len(items))
			for _, it := range items {
				found[keyOf(it.id)] = true
			}
			ch := &chunk{items: items, n: len(items), final: true}
			for _, id := range ids {
				if !found[keyOf(id)] {
					ch.gone = append(ch.gone, id)
				}
			}
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if attempt >= 10 {
			return nil, leaseOr(ctx, c.l, errs.Wrap(errs.Failed, c.jc.job.Name, err, "read the documents to retry"))
		}
		c.log.Warn("reading the documents to retry failed; reading them again", "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(c.jc.Config, attempt)); err != nil {
			return nil, err
		}
	}
}

// findAll reads every document matching filter in _id order. The documents
// are slices of the replies (readFirstBatch says why that is safe).
func (c *chain) findAll(ctx context.Context, filter bson.D) ([]item, error) {
	// Trimmed to the job's fields, as the stream's documents are.
	cur, err := c.coll.Find(ctx, filter, retryFind(c.jc.job).SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var items []item
	for cur.Next(ctx) {
		doc := cur.Current[:len(cur.Current):len(cur.Current)]
		items = append(items, item{doc: doc, id: doc.Lookup("_id"), op: transform.OpReindex})
	}
	return items, cur.Err()
}

// submitRetryPage hands a retry page to the pipe: its documents but those
// the stream changed in the window, transformed again, and deletes for the
// ids the collection no longer holds. Once durable, the records of what
// was written are cleared and the page counted into its request.
func (f *follower) submitRetryPage(c *chunk, changed map[string]bool) error {
	r := c.task.retry
	var items []item
	var superseded []bson.RawValue // the stream's to write: counted by what it did
	goneIDs := map[string]bool{}
	for _, it := range c.items {
		if changed[keyOf(it.id)] {
			superseded = append(superseded, it.id)
			continue
		}
		items = append(items, it)
	}
	for _, id := range c.gone {
		k := keyOf(id)
		if changed[k] {
			superseded = append(superseded, id)
			continue
		}
		goneIDs[k] = true
		items = append(items, item{id: id, op: transform.OpReindex}) // no document: a delete
	}
	// A document failing again is recorded, whatever onDocumentError says:
	// a retry never stops the job on the document it retries.
	jc := f.jc
	jc.OnDocumentError = "skip"
	stats, e, set := f.stats, f.e, f.p.errs
	var made *errSet
	to := pipe.ToLive
	if f.snap != nil {
		to, made = f.snap.changeTarget(), f.snap.made
	}
	fl := &pipe.Flight{To: to}
	for _, it := range items {
		fl.Bytes += len(it.doc)
	}
	var clear []int // writes without a transform error: their records go once durable
	bad := 0
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		lk, err := e.lookups(ctx, jc, items)
		if err != nil {
			return err
		}
		writes, skipped, bd, err := transformAll(ctx, jc.job, items, lk, true)
		if err != nil {
			return err
		}
		if err := e.handleDocErrors(ctx, jc, stats, set, bd); err != nil {
			return err
		}
		badKeys := make(map[string]bool, len(bd))
		for _, b := range bd {
			made.add(b.id)
			badKeys[keyOf(b.id)] = true
		}
		stats.Add(0, 0, int64(skipped), 0)
		e.observeSkipped(jc.job.Name, int64(skipped))
		fl.Batch = sink.Batch{Writes: writes}
		for i := range writes {
			if !badKeys[keyOf(writes[i].SourceID)] {
				clear = append(clear, i)
			}
		}
		bad = len(bd)
		items = nil
		return nil
	}
	fan, n := f.fan, c.n
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.cleared(ctx, fl, clear); err != nil {
			return err
		}
		fan.win.release(n)
		var written, gone int64
		for _, i := range clear {
			switch w := fl.Batch.Writes[i]; {
			case fl.IsRefused(i):
			case w.Delete && goneIDs[keyOf(w.SourceID)]:
				gone++
			default:
				written++
			}
		}
		failed := int64(bad + fl.RefusedCount())
		for _, id := range superseded {
			// The stream's write went before this page: its record
			// is cleared if that write succeeded.
			if set.has(id) {
				failed++
			} else {
				written++
			}
		}
		r.written.Add(written)
		r.gone.Add(gone)
		r.failed.Add(failed)
		if r.pages.Add(-1) == 0 {
			close(r.done)
		}
		return nil
	}
	return f.p.Submit(fl)
}

// distinctIDs is ids without the ones MongoDB holds as the same _id as an
// earlier one (records of 5 and 5.0 are one document): a batch writes
// each document once.
func distinctIDs(ids []bson.RawValue) []bson.RawValue {
	seen := make(map[string]bool, len(ids))
	out := ids[:0]
	for _, id := range ids {
		if k := keyOf(id); !seen[k] {
			seen[k] = true
			out = append(out, id)
		}
	}
	return out
}
