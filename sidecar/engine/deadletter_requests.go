package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// retryRequests serves, in the process holding a job's lease, the requests of
// `meilistream retry` that another process left for it (jobstate, "retry
// requests"): it looks for one when kicked (see Kick) or every Poll, takes
// it under the holder's lease epoch, hands it to the job's follow loop, which retries the
// recorded documents inside the running job, and writes the outcome into
// the request, which `retry` prints.
type retryRequests struct {
	Store   *jobstate.Store
	Job     string
	Process string         // the holder's identity
	Lease   jobstate.Fence // the holder's lease: its epoch is written into a request taken
	Poll    time.Duration
	Log     hclog.Logger
	// Kick, when not nil, says a request may wait: its arrival was read
	// on the job's stream, or the process's requestWatch found one. While
	// Watched says the job reads the arrivals, it asks only when kicked;
	// otherwise every Poll.
	Kick    <-chan struct{}
	Watched func() bool
}

// retryRequest is one retry request taken by the holder: IDs are the recorded
// documents to retry, each once.
type retryRequest struct {
	IDs []bson.RawValue
	// Limit, when longer than the job's transformTimeout, is the time
	// limit of the retried calls (transform.WithTimeout): the engine's
	// own retries of documents that ran out of time give them more.
	Limit time.Duration

	req   *jobstate.RetryRequest
	start time.Time
	// pages not yet durable; done is closed when it reaches zero.
	pages                 atomic.Int64
	written, gone, failed atomic.Int64
	done                  chan struct{}
	// note and err are what a pause, resume or reindex did (Finish).
	note string
	err  error
}

// again is what the request's documents are read again for (Item.Again).
func (r *retryRequest) again() string {
	if r.req != nil && r.req.Kind == jobstate.RepairKind {
		return OpRepair
	}
	return OpRetry
}

// Kind is what the request asks: "" (a retry of the recorded documents),
// jobstate.PauseKind, ResumeKind or ReindexKind.
func (r *retryRequest) Kind() string { return r.req.Kind }

// Mode is a reindex request's mode: "inplace", "swap" or "" (as the job
// says).
func (r *retryRequest) Mode() string { return r.req.Mode }

// Finish ends a pause, resume or reindex request: done with note saying
// what the holder did, or failed with err. Call it once, from the follow
// loop (which owns the request from when it received it).
func (r *retryRequest) Finish(note string, err error) {
	r.note, r.err = note, err
	close(r.done)
}

// newRetryRequest is a retry of ids the engine makes itself (documents
// that ran out of time, tried again under limit): no `meilistream retry`
// waits for its answer.
func newRetryRequest(ids []bson.RawValue, limit time.Duration) *retryRequest {
	return &retryRequest{IDs: ids, Limit: limit, start: time.Now(), done: make(chan struct{})}
}

// Pages says that the request's documents are retried in n pages, each
// ended by PageDone; with none it is done at once.
func (r *retryRequest) Pages(n int) {
	if n == 0 {
		close(r.done)
		return
	}
	r.pages.Store(int64(n))
}

// PageDone counts a page of the request durable: documents written (or
// deleted: kept out by the transform) whose records are cleared, gone from
// the collection (deleted from the destination), and failing again.
func (r *retryRequest) PageDone(written, gone, failed int64) {
	r.written.Add(written)
	r.gone.Add(gone)
	r.failed.Add(failed)
	if r.pages.Add(-1) == 0 {
		close(r.done)
	}
}

// Serve takes the job's requests until ctx ends, one at a time, and hands
// each to the follow loop on to. The returned stop waits for it to end and
// answers a request taken and not finished (the job stopped, or lost its
// lease, before its last page was durable: `retry` says so). Call stop
// after the follow loop returned: a retry whose pages became durable while
// the job drained is then answered as done.
func (q retryRequests) Serve(ctx context.Context, to chan<- *retryRequest) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var current *retryRequest // the goroutine's until done is closed
	go func() {
		defer close(done)
		current = q.take(ctx, to)
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
			q.answer(r, nil)
		default:
			w := what(r.req.Kind)
			var cause error = errs.New(errs.Failed, q.Job, "the job stopped in this process before the %s was done; run `meilistream %s %s` again", w, w, q.Job)
			if err := q.Lease.Err(); err != nil {
				cause = errs.Wrap(errs.LeaseLost, q.Job, err, "the holder lost the job's lease before the %s was done; run `meilistream %s %s` again", w, w, q.Job)
			}
			q.answer(r, cause)
		}
	}
}

// take is Serve's loop; it returns the request it was serving when ctx
// ended, if any.
func (q retryRequests) take(ctx context.Context, to chan<- *retryRequest) *retryRequest {
	t := time.NewTimer(0) // at once: what arrived before the job started
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-q.Kick:
		}
		t.Stop()
		req, err := q.Store.ClaimRetry(ctx, q.Job, q.Process, q.Lease.Epoch())
		if err != nil || req == nil {
			if err != nil && ctx.Err() == nil && !failing {
				q.Log.Warn("looking for retry requests failed; trying again", "error", err)
			}
			failing = err != nil
			q.rearm(t, err)
			continue
		}
		failing = false
		r := &retryRequest{req: req, start: time.Now(), done: make(chan struct{})}
		switch req.Kind {
		case jobstate.RepairKind:
			// verify --repair: the documents it found differing, written
			// again the way a retry writes its recorded ones.
			r.IDs = distinctIDs(req.IDs)
			q.Log.Info("repairing the documents verify found differing, asked by verify", "documents", len(r.IDs), "request", req.ID)
		case "":
			ids, err := q.Store.DocErrorIDs(ctx, q.Job)
			if err != nil {
				q.answer(r, err)
				q.rearm(t, nil)
				continue
			}
			r.IDs = distinctIDs(ids)
			q.Log.Info("retrying the recorded documents, asked by meilistream retry", "documents", len(r.IDs), "request", req.ID)
		default:
			q.Log.Info("asked by meilistream "+req.Kind, "request", req.ID, "mode", req.Mode)
		}
		select {
		case to <- r:
		case <-ctx.Done():
			return r
		}
		select {
		case <-r.done:
			q.answer(r, nil)
		case <-ctx.Done():
			return r
		}
		// Others may have arrived meanwhile, their arrivals read once.
		t.Reset(0)
	}
}

// rearm sets t for the next ask after one that found nothing (or failed
// with err): when kicked only, unless it failed, then after RetryFallback
// polls.
func (q retryRequests) rearm(t *time.Timer, err error) {
	d := q.wait()
	if d == 0 && err != nil {
		d = q.Poll * RetryFallback
	}
	if d > 0 {
		t.Reset(d)
	}
}

// wait is how long take waits before it asks again for a request; 0:
// only when kicked (the job reads the arrivals, and the process's
// requestWatch finds what it did not read).
func (q retryRequests) wait() time.Duration {
	if q.Kick != nil && q.Watched != nil && q.Watched() {
		return 0
	}
	return q.Poll
}

// answer writes r's outcome into its request: done with the counts, or
// failed with cause.
func (q retryRequests) answer(r *retryRequest, cause error) {
	out := *r.req
	out.Retried, out.Written, out.Gone, out.Failed = int64(len(r.IDs)), r.written.Load(), r.gone.Load(), r.failed.Load()
	out.Duration = time.Since(r.start)
	out.State, out.Note = jobstate.RequestDone, r.note
	if cause == nil {
		cause = r.err
	}
	if cause != nil {
		out.State, out.Code, out.Error = jobstate.RequestFailed, string(errs.CodeOf(cause)), cause.Error()
		q.Log.Warn("request not done", "kind", what(r.req.Kind), "request", r.req.ID, "error", cause)
	} else if r.req.Kind != "" {
		q.Log.Info("request answered", "kind", r.req.Kind, "note", r.note, "request", r.req.ID)
	} else {
		q.Log.Info("retry done", "retried", out.Retried, "written", out.Written, "gone", out.Gone, "failed", out.Failed, "request", r.req.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Store.FinishRetry(ctx, &out); err != nil {
		q.Log.Warn("answering the retry request failed; meilistream retry will give up waiting", "request", r.req.ID, "error", err)
	}
}

// what names a request's kind as its command does.
func what(kind string) string {
	if kind == "" {
		return "retry"
	}
	return kind
}

// distinctIDs is ids without the ones MongoDB holds as the same _id as an
// earlier one (records of 5 and 5.0 are one document): a batch writes
// each document once.
func distinctIDs(ids []bson.RawValue) []bson.RawValue {
	seen := make(map[string]bool, len(ids))
	out := ids[:0]
	for _, id := range ids {
		if k := jobdef.IDKey(id); !seen[k] {
			seen[k] = true
			out = append(out, id)
		}
	}
	return out
}
