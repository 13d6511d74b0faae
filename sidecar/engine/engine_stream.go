package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/transform"
)

// errHistoryLost is follow's signal that the recorded position is gone from
// the server's history (codes 286 ChangeStreamHistoryLost and 280
// ChangeStreamFatalError on open or resume; 136 CappedPositionLost when an
// open stream is overtaken by the oplog's truncation).
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

// maxItemEvents bounds the events of one csItem (a getMore batch is at most
// 16 MB; this keeps the follow loop's turns short).
const maxItemEvents = 1000

// DefaultReadAhead is how many bytes of change events the stream reader
// may have handed the follow loop and the loop not yet taken in: one
// largest getMore reply. A destination slower than the source then holds
// the stream back instead of growing the process.
const DefaultReadAhead = 16 << 20

// csItem is what the stream reader hands the follow loop: the events of one
// getMore batch (in order), an idle report with the post-batch resume
// token, or the stream's error. One hand-off per batch, not per event: a
// goroutine switch per change was a large part of follow's CPU.
type csItem struct {
	evs   []bson.Raw
	tok   bson.Raw
	err   error
	bytes int // of evs, released to the reader's budget once taken in
}

// streamFilter is the $match of a job's change stream. The stream is
// opened on the job's database, so one resume token orders the job's
// collection and the job's own watermark documents in the state collection
// (the interleaved reindex reads between two of them). A database stream is
// not invalidated by a drop or rename of one collection: those events are
// matched for the job's collection (by name, and as a rename's target) and
// the follow loop ends the job on them, as a collection stream's invalidate
// would.
func streamFilter(job *transform.Job, state string) bson.D {
	return bson.D{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "ns.coll", Value: job.Collection}},
		bson.D{{Key: "to.coll", Value: job.Collection}},
		bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.watermark", Value: job.Name}},
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$in", Value: bson.A{"dropDatabase", "invalidate"}}}}},
	}}}}}
}

// openStream opens the job's change stream after token, or at the present
// when token is empty.
func (e *Engine) openStream(ctx context.Context, job *transform.Job, token bson.Raw) (*mongo.ChangeStream, error) {
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(streamAwait)
	if len(token) > 0 {
		opts.SetResumeAfter(token)
	}
	return e.source.Watch(ctx, mongo.Pipeline{streamFilter(job, e.stateName)}, opts)
}

// streamPace is the least time between two getMores of a busy stream:
// FlushInterval/4, at most 25ms. A getMore returns as soon as anything is
// there, so a stream of a few thousand changes a second read without a
// pause costs one round trip (and its goroutine switches and syscalls) per
// change or two; pausing after a batch lets the next one gather more. An
// idle stream's getMore still waits on the server (maxAwaitTime), so a lone
// write is not delayed; a busy one by at most the pace, which keeps a busy
// stream's write-to-searchable within flushInterval + 50 ms.
func streamPace(flush time.Duration) time.Duration {
	return min(flush/4, 25*time.Millisecond)
}

// streamReader owns one change stream (a mongo.ChangeStream is not safe for
// concurrent use): its goroutine reads it and hands the follow loop one
// csItem per getMore batch, with at most budget bytes of events handed over
// and not yet taken in. Close stops the goroutine and closes the stream.
type streamReader struct {
	items  chan csItem
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	budget *byteBudget
	// hurry, when set, skips the pace after a batch: a reindex waits for
	// its watermark to come through the stream.
	hurry func() bool
}

func startStream(ctx context.Context, cs *mongo.ChangeStream, pace time.Duration, budget int, hurry func() bool) *streamReader {
	rctx, cancel := context.WithCancel(ctx)
	r := &streamReader{
		items:  make(chan csItem, 1),
		cancel: cancel,
		done:   make(chan struct{}),
		budget: newByteBudget(budget),
		hurry:  hurry,
	}
	go func() {
		defer close(r.done)
		r.read(rctx, cs, pace)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = cs.Close(cctx)
		cancel()
	}()
	return r
}

// Items is where the batches come.
func (r *streamReader) Items() <-chan csItem { return r.items }

// Taken gives an item's bytes back to the reader's budget once the follow
// loop has taken its events in (they then count against the pending
// batch's bound).
func (r *streamReader) Taken(it csItem) { r.budget.release(it.bytes) }

// Close stops the reader and waits until the stream is closed. Idempotent.
func (r *streamReader) Close() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

func (r *streamReader) read(ctx context.Context, cs *mongo.ChangeStream, pace time.Duration) {
	send := func(it csItem) bool {
		select {
		case r.items <- it:
			return true
		case <-ctx.Done():
			r.budget.release(it.bytes)
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
			// for change streams).
			n := min(cs.RemainingBatchLength()+1, maxItemEvents)
			evs := make([]bson.Raw, 0, n)
			size := 0
			for {
				ev := cs.Current[:len(cs.Current):len(cs.Current)]
				evs = append(evs, ev)
				size += len(ev)
				if len(evs) == maxItemEvents || cs.RemainingBatchLength() == 0 || !cs.TryNext(ctx) {
					break
				}
			}
			if r.budget.acquire(ctx, size) != nil {
				return
			}
			if !send(csItem{evs: evs, bytes: size}) {
				return
			}
			if d := time.Until(started.Add(pace)); d > 0 && cs.RemainingBatchLength() == 0 && (r.hurry == nil || !r.hurry()) {
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

// byteBudget bounds bytes held between a producer and a consumer. One
// request larger than the whole budget is let through when nothing else is
// held, so a single large item never deadlocks.
type byteBudget struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{}
}

func newByteBudget(n int) *byteBudget {
	if n <= 0 {
		n = DefaultReadAhead
	}
	return &byteBudget{max: n, wake: make(chan struct{})}
}

func (b *byteBudget) acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.max || b.used == 0 {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (b *byteBudget) release(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
