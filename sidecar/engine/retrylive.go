package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

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
// go to the fan-out reader (Fanout) as tasks of up to half a page each:
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

// serveRetries takes the job's retry requests until ctx ends and hands
// them to the follow loop (retryRequests.Serve, whose stop the
// caller defers after the loop). A job reading a change stream reads its
// requests' arrivals on it (stream.Filter), so it asks for one at once
// when one arrives; what it did not read, the process's requestWatch
// finds for all its jobs in one query every RetryFallback polls: a
// process holding hundreds of idle jobs does not ask hundreds of times a
// second, nor hundreds of times a fallback period. In scan mode, and
// while paused (the stream is closed), it asks every RetryPoll.
func (f *follower) serveRetries(ctx context.Context) (stop func()) {
	scan := f.scan != nil
	stopServe := retryRequests{
		Store: f.e.store, Job: f.jc.job.Name, Process: f.e.cfg.Process, Lease: f.l,
		Poll: f.e.cfg.RetryPoll, Log: f.log,
		Kick:    f.retryKick,
		Watched: func() bool { return !scan && !f.pausedNow.Load() },
	}.Serve(ctx, f.retries)
	unwatch := f.e.requests.add(f.jc.job.Name, f.l.Epoch(), f.kickRetries)
	return func() {
		unwatch()
		stopServe()
	}
}

// RetryFallback is how many RetryPolls pass between two looks of the
// process's requestWatch for requests whose arrival a job did not read
// (one left running by a holder that went away is taken when the job
// starts): well within the 30 s after which a command withdraws a request
// no holder took.
const RetryFallback = 10

// kickRetries tells the request taker that a request arrived.
func (f *follower) kickRetries() {
	select {
	case f.retryKick <- struct{}{}:
	default:
	}
}

// startRetry hands r's ids to the fan-out reader (started now if the job
// has none), half a page per task.
func (f *follower) startRetry(r *retryRequest) error {
	if len(r.IDs) == 0 {
		r.Pages(0)
		return nil
	}
	if f.fan == nil {
		f.startFan()
	}
	size := PartSize(f.jc.PageSize)
	var tasks []*Task
	for lo := 0; lo < len(r.IDs); lo += size {
		tasks = append(tasks, &Task{IDs: r.IDs[lo:min(lo+size, len(r.IDs))], Retry: r})
	}
	r.Pages(len(tasks))
	f.fanBusy += len(tasks)
	for _, t := range tasks {
		select {
		case f.fan.Tasks() <- t:
		case <-f.p.Failed():
			return f.p.Err()
		}
	}
	return nil
}

// submitRetryPage hands a retry page to the pipe: its documents but those
// the stream changed in the window, transformed again, and deletes for the
// ids the collection no longer holds. Once durable, the records of what
// was written are cleared and the page counted into its request.
func (f *follower) submitRetryPage(c *Chunk, changed map[string]bool) error {
	r := c.Task.Retry
	var items []Item
	var superseded []bson.RawValue // the stream's to write: counted by what it did
	goneIDs := map[string]bool{}
	again := r.again()
	for _, it := range c.Items {
		if changed[keyOf(it.ID)] {
			superseded = append(superseded, it.ID)
			continue
		}
		it.Again = again
		items = append(items, it)
	}
	for _, id := range c.Gone {
		k := keyOf(id)
		if changed[k] {
			superseded = append(superseded, id)
			continue
		}
		goneIDs[k] = true
		items = append(items, Item{ID: id, Op: transform.OpReindex, Again: again}) // no document: a delete
	}
	// A document failing again is recorded, whatever onDocumentError says:
	// a retry never stops the job on the document it retries.
	jc := f.jc
	jc.OnDocumentError = "skip"
	stats, e, set := f.stats, f.e, f.p.errs
	to, made := f.changeTarget()
	fl := &pipe.Flight{To: to}
	for _, it := range items {
		fl.Bytes += len(it.Doc)
	}
	var clear []int // writes without a transform error: their records go once durable
	bad := 0
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		if r.Limit > 0 {
			ctx = transform.WithTimeout(ctx, r.Limit)
		}
		writes, _, bd, err := e.prepareItems(ctx, jc, stats, set, made, items, true, nil)
		if err != nil {
			return err
		}
		badKeys := make(map[string]bool, len(bd))
		for _, b := range bd {
			badKeys[keyOf(b.ID)] = true
		}
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
	fan, n := f.fan, c.N
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.Cleared(ctx, fl, clear); err != nil {
			return err
		}
		fan.Release(n)
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
			if set.Has(id) {
				failed++
			} else {
				written++
			}
		}
		r.PageDone(written, gone, failed)
		return nil
	}
	return f.p.Submit(fl)
}
