package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A pipe carries batches to a sink in order, pipelined in three stages, each
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
type pipe struct {
	e     *Engine
	jc    jobConfig
	sink  Sink
	stats *status.JobStats
	log   hclog.Logger
	track bool

	ctx      context.Context
	cancel   context.CancelCauseFunc
	in       chan *flight
	prepared chan *flight
	sent     chan *flight
	done     chan struct{}
	once     sync.Once

	failMu  sync.Mutex
	failErr error

	sendMu sync.Mutex
	latest map[string]uint64 // key -> seq of the last flight that sent it; guarded by sendMu
	seq    uint64            // guarded by sendMu

	retryLog time.Time // last retry warning, rate-limited; guarded by failMu

	errs *errSet // the job's error records; nil: not tracked
}

// flight is one batch on its way.
type flight struct {
	seq uint64
	// prepare fills batch (runs on the prepare stage); may be nil.
	prepare func(ctx context.Context, f *flight) error
	batch   Batch
	keys    []string // coalescing keys of batch.Writes, when tracked
	receipt Receipt
	// durable runs in order once the batch is durable; may be nil.
	durable    func(ctx context.Context, f *flight) error
	refusedPos []int     // positions of writes refused for a document reason (left out)
	sentAt     time.Time // when the first send began
}

func (f *flight) isRefused(pos int) bool {
	for _, p := range f.refusedPos {
		if p == pos {
			return true
		}
	}
	return false
}

func (e *Engine) newPipe(ctx context.Context, jc jobConfig, sink Sink, stats *status.JobStats, log hclog.Logger, track bool) *pipe {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &pipe{
		e: e, jc: jc, sink: sink, stats: stats, log: log, track: track,
		ctx: ctx, cancel: cancel,
		in:       make(chan *flight),
		prepared: make(chan *flight),
		// Sent and not yet durable: the one being waited for, those queued
		// here and the one the sender holds: MaxInFlight in all.
		sent: make(chan *flight, max(jc.MaxInFlight-2, 0)),
		done: make(chan struct{}),
	}
	if track {
		p.latest = make(map[string]uint64)
	}
	go p.prepareLoop()
	go p.sendLoop()
	go p.waitLoop()
	return p
}

// fail stops the pipe with err (the first one wins).
func (p *pipe) fail(err error) {
	p.failMu.Lock()
	if p.failErr == nil {
		p.failErr = err
	}
	p.failMu.Unlock()
	p.cancel(err)
}

// Err returns why the pipe stopped, or nil.
func (p *pipe) Err() error {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return p.failErr
}

// Done is closed when the pipe has stopped (failed, or closed and drained).
func (p *pipe) Done() <-chan struct{} { return p.done }

// Failed is closed as soon as the pipe fails (or is stopped): its stages
// stop taking work, though Done waits until the submitter closes it.
func (p *pipe) Failed() <-chan struct{} { return p.ctx.Done() }

// submit hands f to the pipe, blocking while it is full.
func (p *pipe) submit(f *flight) error {
	select {
	case p.in <- f:
		return nil
	case <-p.ctx.Done():
		if err := p.Err(); err != nil {
			return err
		}
		return context.Cause(p.ctx)
	}
}

// close waits until every submitted flight is durable and its callback ran,
// and returns the pipe's error.
func (p *pipe) close() error {
	p.once.Do(func() { close(p.in) })
	<-p.done
	p.cancel(context.Canceled)
	return p.Err()
}

// abort stops the pipe without waiting for what is in flight.
func (p *pipe) abort(err error) {
	p.fail(err)
	p.once.Do(func() { close(p.in) })
	<-p.done
}

func (p *pipe) prepareLoop() {
	defer close(p.prepared)
	for f := range p.in {
		if p.ctx.Err() != nil {
			continue
		}
		if f.prepare != nil {
			if err := f.prepare(p.ctx, f); err != nil {
				p.fail(err)
				continue
			}
		}
		select {
		case p.prepared <- f:
		case <-p.ctx.Done():
		}
	}
}

func (p *pipe) sendLoop() {
	defer close(p.sent)
	for f := range p.prepared {
		if p.ctx.Err() != nil {
			continue
		}
		p.sendMu.Lock()
		p.seq++
		f.seq = p.seq
		if len(f.batch.Writes) > 0 {
			f.sentAt = time.Now()
			r, err := p.sendRetry(p.ctx, f.batch)
			if err != nil {
				p.sendMu.Unlock()
				p.fail(err)
				continue
			}
			f.receipt = r
			if p.track {
				if f.keys == nil {
					f.keys = make([]string, len(f.batch.Writes))
					for i := range f.batch.Writes {
						f.keys[i] = keyOf(f.batch.Writes[i].SourceID)
					}
				}
				for _, k := range f.keys {
					p.latest[k] = f.seq
				}
			}
		}
		p.sendMu.Unlock()
		select {
		case p.sent <- f:
		case <-p.ctx.Done():
		}
	}
}

func (p *pipe) waitLoop() {
	defer close(p.done)
	for f := range p.sent {
		if p.ctx.Err() != nil {
			continue
		}
		if err := p.settle(p.ctx, f); err != nil {
			p.fail(err)
			continue
		}
		if f.durable != nil {
			if err := f.durable(p.ctx, f); err != nil {
				p.fail(err)
				continue
			}
		}
	}
}

// sendRetry sends b until the sink accepts it; called with sendMu held.
func (p *pipe) sendRetry(ctx context.Context, b Batch) (Receipt, error) {
	for attempt := 0; ; attempt++ {
		r, err := p.sink.Send(ctx, b)
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
		if err := sleep(ctx, backoff(p.jc.Config, attempt)); err != nil {
			return nil, err
		}
	}
}

func (p *pipe) retried(what string, err error, attempt int) {
	p.stats.Update(func(s *status.JobSnapshot) { s.Retries++; s.NoteError(err) })
	p.e.observeRetry(p.jc.job.Name, err)
	p.failMu.Lock()
	loud := time.Since(p.retryLog) > 10*time.Second || attempt == 0
	if loud {
		p.retryLog = time.Now()
	}
	p.failMu.Unlock()
	if loud {
		p.log.Warn("destination error; retrying with backoff", "op", what, "attempt", attempt+1, "error", err)
	}
}

// settle waits until f is durable, sending again what must be sent again
// and taking refused documents through the per-document error path.
func (p *pipe) settle(ctx context.Context, f *flight) error {
	if len(f.batch.Writes) == 0 {
		return nil
	}
	all := make([]int, len(f.batch.Writes))
	for i := range all {
		all[i] = i
	}
	fails, err := p.sink.Wait(ctx, f.receipt)
	for attempt := 0; err != nil; attempt++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !retryable(err) {
			return err
		}
		p.retried("wait", err, attempt)
		if err := sleep(ctx, backoff(p.jc.Config, attempt)); err != nil {
			return err
		}
		p.sendMu.Lock()
		sub := p.resendable(f, all)
		if len(sub) == 0 {
			p.sendMu.Unlock()
			fails, err = nil, nil
			break
		}
		var r Receipt
		r, err = p.sendRetry(ctx, subBatch(f, sub))
		p.sendMu.Unlock()
		if err != nil {
			return err
		}
		fails, err = p.sink.Wait(ctx, r)
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
	if p.track {
		p.sendMu.Lock()
		for _, k := range f.keys {
			if p.latest[k] == f.seq {
				delete(p.latest, k)
			}
		}
		p.sendMu.Unlock()
	}
	var up, del int64
	for i := range f.batch.Writes {
		if f.batch.Writes[i].Delete {
			del++
		} else {
			up++
		}
	}
	up -= int64(len(f.refusedPos))
	p.stats.Update(func(s *status.JobSnapshot) { s.Indexed += up; s.Deleted += del; s.Batches++ })
	p.e.observeBatch(p.jc.job.Name, time.Since(f.sentAt), len(f.batch.Writes))
	p.e.observeWrites(p.jc.job.Name, up, del)
	return nil
}

// resendable returns the positions of f's writes that no later flight
// wrote; called with sendMu held.
func (p *pipe) resendable(f *flight, positions []int) []int {
	if !p.track {
		return positions
	}
	out := make([]int, 0, len(positions))
	for _, i := range positions {
		if p.latest[f.keys[i]] == f.seq {
			out = append(out, i)
		}
	}
	return out
}

func subBatch(f *flight, positions []int) Batch {
	w := make([]Write, len(positions))
	for j, i := range positions {
		w[j] = f.batch.Writes[i]
	}
	return Batch{Writes: w}
}

// remap turns failures naming positions of a sub-batch into positions of
// the flight's batch.
func remap(fails []DocFailure, sub []int) []DocFailure {
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
func (p *pipe) resolve(ctx context.Context, f *flight, positions []int, code, msg string) error {
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
func (p *pipe) sendWait(ctx context.Context, f *flight, positions []int) ([]DocFailure, error) {
	for attempt := 0; ; attempt++ {
		r, err := p.sendRetry(ctx, subBatch(f, positions))
		if err != nil {
			return nil, err
		}
		fails, err := p.sink.Wait(ctx, r)
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
		if err := sleep(ctx, backoff(p.jc.Config, attempt)); err != nil {
			return nil, err
		}
	}
}

// refused takes one document the destination refused through the
// per-document error path: recorded in the errors collection, counted, and
// left out of the destination (its older version deleted), or the job
// fails with onDocumentError: fail. Called with sendMu held.
func (p *pipe) refused(ctx context.Context, f *flight, pos int, code, msg string) error {
	w := f.batch.Writes[pos]
	f.refusedPos = append(f.refusedPos, pos)
	name := p.jc.job.Name
	p.log.Warn("destination refused a document", "id", idString(w.SourceID), "code", code, "error", msg)
	// Recorded in both modes, so `meilistream retry` and `status` see it.
	if err := p.e.store.RecordDocError(ctx, name, w.SourceID, code, msg); err != nil {
		return err
	}
	if p.jc.OnDocumentError == "fail" {
		return errs.New(errs.Failed, name, "the destination refused document _id %s: %s: %s; fix the document (or the transform); onDocumentError is fail, so the job stops", idString(w.SourceID), code, msg)
	}
	p.errs.add(w.SourceID)
	p.stats.Add(0, 0, 0, 1)
	p.e.observeDocError(name, code)
	if w.Delete {
		return nil
	}
	if p.track && p.latest[f.keys[pos]] != f.seq {
		return nil
	}
	_, err := p.sendWait(ctx, &flight{batch: Batch{Writes: []Write{{SourceID: w.SourceID, Delete: true}}}}, []int{0})
	return err
}

// idString renders a source _id for logs and messages as relaxed Extended
// JSON (what mongosh shows and a query takes: "f1", 5,
// {"$oid":"65f1..."}).
func idString(id bson.RawValue) string {
	if id.Type == 0 {
		return "<none>"
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: id}}, false, false)
	if err != nil {
		return id.String()
	}
	s := strings.TrimPrefix(string(b), `{"v":`)
	return strings.TrimSuffix(s, "}")
}

var errPipeClosed = errors.New("pipe closed")
