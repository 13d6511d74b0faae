// Package pipe carries a job's batches to its sinks in order: prepared
// (transformed), sent and made durable in three pipelined stages, with
// retries that never reorder writes, refused documents found by bisection,
// flights routed to the live or a staged destination, and control flights
// that run once everything before them is durable. What it reports goes to
// its owner's Hooks.
package pipe

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/budget"
	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// Config tunes a Pipe.
type Config struct {
	// MaxInFlight is how many batches may be sent and not yet durable
	// (at least 1).
	MaxInFlight int
	// QueueBytes bounds the bytes of the flights submitted and not yet
	// prepared (Flight.Bytes).
	QueueBytes int
	// Track keeps, per destination, which flight last wrote each
	// document, so a write sent again never undoes a later one (see Pipe).
	Track bool
	// Key is the identity of a source _id (documents with equal keys are
	// one document); required with Track.
	Key func(bson.RawValue) string
	// Backoff is the wait before the attempt-th retry of a send or wait.
	Backoff func(attempt int) time.Duration
}

// Hooks is what a Pipe tells its owner; every method may be called from
// the pipe's goroutines (one at a time for Refused and Settled, which run
// on the wait stage).
type Hooks interface {
	// Retried reports a send or a wait that failed and is tried again
	// after a backoff (attempt counts from 0).
	Retried(what string, err error, attempt int)
	// Refused reports a document the destination refused for a reason of
	// the document (recorded once even when both destinations refuse it).
	// A non-nil error stops the pipe with it (onDocumentError: fail);
	// otherwise the document is left out of the destination.
	Refused(ctx context.Context, id bson.RawValue, code, msg string) error
	// Settled reports a flight made durable: up upserts (refused ones not
	// counted) and del deletes.
	Settled(f *Flight, up, del int64)
}

// A Pipe carries batches to a sink in order, pipelined in three stages, each
// one goroutine: prepare (transform), send (one Send at a time, in order,
// retried with backoff until it succeeds, so a failed send blocks every later
// one) and wait (one Wait at a time, in order). Up to MaxInFlight batches
// are sent and not yet durable, so memory stays flat however long the
// stream. A flight's durable callback (record the position or checkpoint)
// runs in submission order once the flight and every earlier one are
// durable.
//
// Order with resends: Meilisearch has no conditional writes, so a write of
// flight N sent again after flight N+1 was sent would undo N+1's write of
// the same document. When the pipe tracks keys (follow), a write of N is
// sent again (after a failed Wait, or while bisecting a refused task) only
// if no later flight wrote its document. All resends happen under sendMu,
// so no new batch goes out in between.
type Pipe struct {
	cfg   Config
	hooks Hooks
	live  sink.Sink  // the live destination
	guard sink.Guard // the lease's check, made before each send

	ctx      context.Context
	cancel   context.CancelCauseFunc
	in       chan *Flight  // flights submitted and not yet prepared
	queued   *budget.Bytes // their bytes
	prepared chan *Flight
	sent     chan *Flight
	done     chan struct{}
	once     sync.Once

	failMu  sync.Mutex
	failErr error

	// staged is the target of a swap reindex while one runs (nil
	// otherwise, and in place, where the live destination is the target).
	// Read and written by the send stage only, after newPipe.
	staged sink.Sink

	// Flights handed to the wait stage and flights it finished: a control
	// flight runs once they are equal (everything before it durable).
	flowMu   sync.Mutex
	handed   uint64
	finished uint64
	flowWake chan struct{}

	sendMu sync.Mutex
	// key -> seq of the last flight that sent it, per side (live, staged);
	// guarded by sendMu
	latest [2]map[string]uint64
	seq    uint64 // guarded by sendMu
}

// Target says where a flight's writes go.
type Target uint8

const (
	ToLive   Target = iota // the live destination
	ToStaged               // a reindex's Target: the staged index, or the live destination in place
	ToBoth                 // both (a followed change while a swap reindex runs)
)

// side is the destination a flight was sent To: sideLive or sideStaged.
type side uint8

const (
	sideLive side = iota
	sideStaged
)

// flight is one batch on its way.
type Flight struct {
	// Bytes is what the flight holds until it is prepared (the change
	// events or documents it transforms): the pipe's queue is bounded by
	// it.
	Bytes int
	// Prepare fills Batch (runs on the prepare stage, in order); may be
	// nil.
	Prepare func(ctx context.Context, f *Flight) error
	// Batch is what is sent.
	Batch sink.Batch
	// Keys are the identities (Config.Key) of Batch.Writes' source _ids,
	// when the submitter has them; the pipe computes them otherwise.
	Keys []string
	// To is where the writes go.
	To Target
	// Ctl, when set, makes this a control flight: it runs on the send
	// stage once every earlier flight is durable (and its Durable callback
	// ran), before any later flight is sent. A swap and the switch back to
	// the live destination alone are such flights.
	Ctl func(ctx context.Context) error
	// Durable runs in order once the batch is durable; may be nil.
	Durable func(ctx context.Context, f *Flight) error

	seq        uint64
	dst        sink.Sink // where it was sent (set by the send stage)
	side       side
	receipt    sink.Receipt
	refusedPos []int     // positions of writes refused for a document reason (left out)
	sentAt     time.Time // when the first send began
	// pair is, on the staged half of a flight sent to both destinations,
	// its live half (sent just before it, so durable first): a document
	// both refuse is recorded and counted once.
	pair *Flight
	// half marks the live half of such a flight: its statistics are
	// counted with the other half's.
	half bool
}

// IsRefused says whether the write at pos was refused for a reason of its
// document (by either destination of a flight sent to both).
func (f *Flight) IsRefused(pos int) bool {
	for _, p := range f.refusedPos {
		if p == pos {
			return true
		}
	}
	return f.pair != nil && f.pair.IsRefused(pos)
}

// RefusedCount is how many of f's writes were refused (by either
// destination).
func (f *Flight) RefusedCount() int {
	if f.pair == nil {
		return len(f.refusedPos)
	}
	n := 0
	for i := range f.Batch.Writes {
		if f.IsRefused(i) {
			n++
		}
	}
	return n
}

// New starts a pipe writing to live (and, once SetStaged names one, to a
// staged destination), until ctx ends or Close or Abort is called. guard
// is checked right before each send (the lease's own-clock check), so a
// batch prepared before a freeze is not sent after it.
func New(ctx context.Context, cfg Config, live sink.Sink, guard sink.Guard, hooks Hooks) *Pipe {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &Pipe{
		cfg: cfg, hooks: hooks, live: live, guard: guard,
		ctx: ctx, cancel: cancel,
		in:       make(chan *Flight, queueFlights),
		queued:   budget.New(cfg.QueueBytes),
		prepared: make(chan *Flight),
		// Sent and not yet durable: the one being waited for, those queued
		// here and the one the sender holds: MaxInFlight in all.
		sent:     make(chan *Flight, max(cfg.MaxInFlight-2, 0)),
		done:     make(chan struct{}),
		flowWake: make(chan struct{}),
	}
	if cfg.Track {
		p.latest = [2]map[string]uint64{make(map[string]uint64), make(map[string]uint64)}
	}
	go p.prepareLoop()
	go p.sendLoop()
	go p.waitLoop()
	return p
}

// Live is the live destination.
func (p *Pipe) Live() sink.Sink { return p.live }

// Fail stops the pipe with err (the first one wins), without waiting.
func (p *Pipe) Fail(err error) {
	p.failMu.Lock()
	if p.failErr == nil {
		p.failErr = err
	}
	p.failMu.Unlock()
	p.cancel(err)
}

// Err returns why the pipe stopped, or nil.
func (p *Pipe) Err() error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return p.failErr
}

// Done is closed when the pipe has stopped (failed, or closed and drained).
func (p *Pipe) Done() <-chan struct{} { return p.done }

// Failed is closed as soon as the pipe fails (or is stopped): its stages
// stop taking work, though Done waits until the submitter closes it.
func (p *Pipe) Failed() <-chan struct{} { return p.ctx.Done() }

// queueFlights bounds the flights submitted and not yet prepared (their
// bytes are bounded by Config.QueueBytes). The queue lets the follow loop go on
// reading the stream, coalescing into new batches, while the destination is
// busy with a reindex's chunks: the stream keeps up with the change history
// however slow a send, up to the queue's bytes.
const queueFlights = 256

// Submit hands f to the pipe, blocking while its queue is full; the error
// is why the pipe stopped. One goroutine submits (the pipe keeps the order
// of submission).
func (p *Pipe) Submit(f *Flight) error {
	if err := p.queued.Acquire(p.ctx, f.Bytes); err != nil {
		if perr := p.Err(); perr != nil {
			return perr
		}
		return err
	}
	select {
	case p.in <- f:
		return nil
	case <-p.ctx.Done():
		p.queued.Release(f.Bytes)
		if err := p.Err(); err != nil {
			return err
		}
		return context.Cause(p.ctx)
	}
}

// Close waits until every submitted flight is durable and its callback ran,
// and returns the pipe's error.
func (p *Pipe) Close() error {
	p.once.Do(func() { close(p.in) })
	<-p.done
	p.cancel(context.Canceled)
	return p.Err()
}

// Abort stops the pipe without waiting for what is in flight, and waits
// until its goroutines are done.
func (p *Pipe) Abort(err error) {
	p.Fail(err)
	p.once.Do(func() { close(p.in) })
	<-p.done
}

func (p *Pipe) prepareLoop() {
	defer close(p.prepared)
	for f := range p.in {
		if p.ctx.Err() != nil {
			p.queued.Release(f.Bytes)
			continue
		}
		if f.Prepare != nil {
			err := f.Prepare(p.ctx, f)
			p.queued.Release(f.Bytes)
			if err != nil {
				p.Fail(err)
				continue
			}
		} else {
			p.queued.Release(f.Bytes)
		}
		select {
		case p.prepared <- f:
		case <-p.ctx.Done():
		}
	}
}

func (p *Pipe) sendLoop() {
	defer close(p.sent)
	for f := range p.prepared {
		if p.ctx.Err() != nil {
			continue
		}
		if f.Ctl != nil {
			if err := p.runControl(f); err != nil {
				p.Fail(err)
				continue
			}
			if !p.hand(f) {
				continue
			}
			continue
		}
		if f.To == ToBoth && p.staged != nil {
			// Two flights, one per destination, so each keeps its own
			// order of resends; the durable callback runs after the second.
			twin := &Flight{Batch: f.Batch, Keys: f.Keys, To: ToStaged, Durable: f.Durable, pair: f}
			f.To, f.Durable, f.half = ToLive, nil, true
			if !p.sendOne(f) || !p.hand(f) || !p.sendOne(twin) || !p.hand(twin) {
				continue
			}
			continue
		}
		if !p.sendOne(f) {
			continue
		}
		p.hand(f)
	}
}

// sendOne sends f to its destination (in order: under sendMu) and notes
// which documents it wrote; false when the pipe failed.
func (p *Pipe) sendOne(f *Flight) bool {
	f.dst, f.side = p.live, sideLive
	if f.To != ToLive && p.staged != nil {
		f.dst, f.side = p.staged, sideStaged
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.seq++
	f.seq = p.seq
	if len(f.Batch.Writes) == 0 {
		return true
	}
	f.sentAt = time.Now()
	r, err := p.sendRetry(p.ctx, f.dst, f.Batch)
	if err != nil {
		p.Fail(err)
		return false
	}
	f.receipt = r
	if p.cfg.Track {
		if f.Keys == nil {
			f.Keys = make([]string, len(f.Batch.Writes))
			for i := range f.Batch.Writes {
				f.Keys[i] = p.cfg.Key(f.Batch.Writes[i].SourceID)
			}
		}
		latest := p.latest[f.side]
		for _, k := range f.Keys {
			latest[k] = f.seq
		}
	}
	return true
}

// hand passes f to the wait stage; false when the pipe failed.
func (p *Pipe) hand(f *Flight) bool {
	p.flowMu.Lock()
	p.handed++
	p.flowMu.Unlock()
	select {
	case p.sent <- f:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// finish notes that the wait stage is done with a flight.
func (p *Pipe) finish() {
	p.flowMu.Lock()
	p.finished++
	close(p.flowWake)
	p.flowWake = make(chan struct{})
	p.flowMu.Unlock()
}

// runControl waits until every flight handed to the wait stage is durable,
// then runs f's control function.
func (p *Pipe) runControl(f *Flight) error {
	for {
		p.flowMu.Lock()
		idle, wake := p.handed == p.finished, p.flowWake
		p.flowMu.Unlock()
		if idle {
			break
		}
		select {
		case <-wake:
		case <-p.ctx.Done():
			return context.Cause(p.ctx)
		}
	}
	p.sendMu.Lock()
	p.seq++
	f.seq = p.seq
	p.sendMu.Unlock()
	return f.Ctl(p.ctx)
}

// SetStaged makes s the target of ToStaged and ToBoth flights (nil: the
// live destination). Only before the first Submit, or from a control
// flight's Ctl.
func (p *Pipe) SetStaged(s sink.Sink) { p.staged = s }

func (p *Pipe) waitLoop() {
	defer close(p.done)
	for f := range p.sent {
		if p.ctx.Err() != nil {
			p.finish()
			continue
		}
		if err := p.settle(p.ctx, f); err != nil {
			p.Fail(err)
			p.finish()
			continue
		}
		if f.Durable != nil {
			if err := f.Durable(p.ctx, f); err != nil {
				p.Fail(err)
			}
		}
		p.finish()
	}
}

// sendRetry sends b to sink until it accepts it; called with sendMu held.
func (p *Pipe) sendRetry(ctx context.Context, dst sink.Sink, b sink.Batch) (sink.Receipt, error) {
	for attempt := 0; ; attempt++ {
		// The lease may have lapsed since the batch was prepared (or
		// during the backoff): checked here whatever the sink, which
		// checks again before each request it makes.
		if err := p.guard.Check(); err != nil {
			return nil, err
		}
		r, err := dst.Send(ctx, b)
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !retryable(err) {
			return nil, err
		}
		p.retried("send", err, attempt)
		if err := sleep(ctx, p.cfg.Backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

func (p *Pipe) retried(what string, err error, attempt int) {
	p.hooks.Retried(what, err, attempt)
}

// settle waits until f is durable, sending again what must be sent again
// and taking refused documents through the per-document error path.
func (p *Pipe) settle(ctx context.Context, f *Flight) error {
	if len(f.Batch.Writes) == 0 {
		return nil
	}
	all := make([]int, len(f.Batch.Writes))
	for i := range all {
		all[i] = i
	}
	fails, err := f.dst.Wait(ctx, f.receipt)
	for attempt := 0; err != nil; attempt++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !retryable(err) {
			return err
		}
		p.retried("wait", err, attempt)
		if err := sleep(ctx, p.cfg.Backoff(attempt)); err != nil {
			return err
		}
		p.sendMu.Lock()
		sub := p.resendable(f, all)
		if len(sub) == 0 {
			p.sendMu.Unlock()
			fails, err = nil, nil
			break
		}
		var r sink.Receipt
		r, err = p.sendRetry(ctx, f.dst, subBatch(f, sub))
		p.sendMu.Unlock()
		if err != nil {
			return err
		}
		fails, err = f.dst.Wait(ctx, r)
		fails = remap(fails, sub)
		all = sub
	}
	if len(fails) > 0 {
		p.sendMu.Lock()
		for _, fl := range fails {
			if err := p.resolve(ctx, f, fl.Writes, fl.Code, fl.Message); err != nil {
				p.sendMu.Unlock()
				return err
			}
		}
		p.sendMu.Unlock()
	}
	if p.cfg.Track {
		p.sendMu.Lock()
		latest := p.latest[f.side]
		for _, k := range f.Keys {
			if latest[k] == f.seq {
				delete(latest, k)
			}
		}
		p.sendMu.Unlock()
	}
	if f.half {
		return nil // counted with its other half
	}
	var up, del int64
	for i := range f.Batch.Writes {
		if f.Batch.Writes[i].Delete {
			del++
		} else {
			up++
		}
	}
	up -= int64(f.RefusedCount())
	p.hooks.Settled(f, up, del)
	return nil
}

// resendable returns the positions of f's writes that no later flight
// wrote; called with sendMu held.
func (p *Pipe) resendable(f *Flight, positions []int) []int {
	if !p.cfg.Track {
		return positions
	}
	out := make([]int, 0, len(positions))
	latest := p.latest[f.side]
	for _, i := range positions {
		if latest[f.Keys[i]] == f.seq {
			out = append(out, i)
		}
	}
	return out
}

func subBatch(f *Flight, positions []int) sink.Batch {
	w := make([]sink.Write, len(positions))
	for j, i := range positions {
		w[j] = f.Batch.Writes[i]
	}
	return sink.Batch{Writes: w}
}

// remap turns failures naming positions of a sub-batch into positions of
// the flight's batch.
func remap(fails []sink.DocFailure, sub []int) []sink.DocFailure {
	for k := range fails {
		m := make([]int, 0, len(fails[k].Writes))
		for _, j := range fails[k].Writes {
			if j >= 0 && j < len(sub) {
				m = append(m, sub[j])
			}
		}
		fails[k].Writes = m
	}
	return fails
}

// resolve finds, by bisection, the documents among positions that the
// destination refuses, and takes each through the per-document error path;
// called with sendMu held. Writes a later flight superseded are not sent
// again (that would reorder); if the refused document was one of them, the
// later flight meets it again.
func (p *Pipe) resolve(ctx context.Context, f *Flight, positions []int, code, msg string) error {
	if len(positions) == 0 {
		return nil
	}
	if len(positions) == 1 {
		return p.refused(ctx, f, positions[0], code, msg)
	}
	cand := p.resendable(f, positions)
	if len(cand) == 0 {
		return nil
	}
	half := len(cand) / 2
	for _, part := range [][]int{cand[:half], cand[half:]} {
		if len(part) == 0 {
			continue
		}
		fails, err := p.sendWait(ctx, f, part)
		if err != nil {
			return err
		}
		for _, fl := range fails {
			if len(fl.Writes) == 1 && len(part) == 1 {
				if err := p.refused(ctx, f, fl.Writes[0], fl.Code, fl.Message); err != nil {
					return err
				}
				continue
			}
			if err := p.resolve(ctx, f, fl.Writes, fl.Code, fl.Message); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendWait sends the writes of f at positions and waits until they are
// durable, retrying transient errors; failures name positions of f's batch.
func (p *Pipe) sendWait(ctx context.Context, f *Flight, positions []int) ([]sink.DocFailure, error) {
	for attempt := 0; ; attempt++ {
		r, err := p.sendRetry(ctx, f.dst, subBatch(f, positions))
		if err != nil {
			return nil, err
		}
		fails, err := f.dst.Wait(ctx, r)
		if err == nil {
			return remap(fails, positions), nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !retryable(err) {
			return nil, err
		}
		p.retried("wait", err, attempt)
		if err := sleep(ctx, p.cfg.Backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// refused takes one document the destination refused through the
// per-document error path: recorded in the errors collection, counted, and
// left out of the destination (its older version deleted), or the job
// fails with onDocumentError: fail. Called with sendMu held.
func (p *Pipe) refused(ctx context.Context, f *Flight, pos int, code, msg string) error {
	w := f.Batch.Writes[pos]
	f.refusedPos = append(f.refusedPos, pos)
	// The staged half of a flight sent to both destinations: a document
	// its live half refused too is recorded and counted once.
	if f.pair == nil || !f.pair.IsRefused(pos) {
		if err := p.hooks.Refused(ctx, w.SourceID, code, msg); err != nil {
			return err
		}
	}
	if w.Delete {
		return nil
	}
	if p.cfg.Track && p.latest[f.side][f.Keys[pos]] != f.seq {
		return nil
	}
	del := &Flight{Batch: sink.Batch{Writes: []sink.Write{{SourceID: w.SourceID, Delete: true}}}, dst: f.dst, side: f.side}
	_, err := p.sendWait(ctx, del, []int{0})
	return err
}

// SentAt is when the flight's first send began (zero for a flight with
// nothing to send).
func (f *Flight) SentAt() time.Time { return f.sentAt }

// Closed is the error a pipe stopped by its owner gives.
var Closed = errors.New("pipe closed")

// retryable says whether an error of a sink may be retried: a FAILED one
// (the project's code rule: anything else stops the job).
func retryable(err error) bool { return errs.CodeOf(err) == errs.Failed }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
