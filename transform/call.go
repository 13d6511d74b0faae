package transform

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// Each runtime runs on a goroutine of its own and its caller waits for it
// with a deadline. goja's Interrupt only stops JavaScript between two of
// its instructions; a built-in function (a regular expression matching, a
// sort) finishes what it does first. Bounding what the built-ins may be
// asked to do (harden.go) keeps that short; should one still run on past
// its call's limit, the caller gives up on it abandonGrace after the
// interrupt: the document fails with TRANSFORM_FAILED, the job goes on
// with a fresh runtime, and the abandoned one ends in the background when
// the built-in returns (never reused, never read from again).
const abandonGrace = 500 * time.Millisecond

// MaxTimeout is the longest time limit a transform call may have
// (transformTimeout, MEILISTREAM_TRANSFORM_TIMEOUT,
// MEILISTREAM_JOB_<NAME>_TRANSFORM_TIMEOUT): a transform is a function of
// one document, and the limit also bounds how long a regular expression
// may backtrack (see init).
const MaxTimeout = time.Minute

// maxTimeoutRetries is how many times a call that ran out of time is tried
// again, each time on a fresh runtime, before its document is failed: on
// a busy machine a transform can miss its limit without being at fault. A
// transform that loops for good fails after 1+maxTimeoutRetries limits
// (plus the time to evaluate the module in the fresh runtimes); one stuck
// in a built-in past abandonGrace is not tried again.
const maxTimeoutRetries = 2

// loadTimeout bounds evaluating a module (and reading its options): user
// code runs there too, and a loop at the top of a file must not hang a
// load or a reload. Ten times a call's limit, from one to ten seconds: a
// module only sets up.
func loadTimeout(j *Job) time.Duration {
	return min(max(10*j.opts.Timeout, time.Second), maxLoadTimeout)
}

const maxLoadTimeout = 10 * time.Second

var (
	errLoadTimeout = errors.New("load timeout")
	errTimeout     = errors.New("transform timeout")
)

// callReq is one call's input and output. A vm holds one, written by the
// caller before the vm's goroutine runs it and read back after; an
// abandoned call's goroutine may still write it, but then no one reads it
// again.
type callReq struct {
	job        *Job
	doc        bson.Raw
	idv        bson.RawValue
	op         Operation
	updateDesc bson.Raw
	track      bool // keep what the call reads (Result.Reads)
	lookups    jobdef.LookupResults
	res        Result
	err        error
}

// newVM makes a runtime on a goroutine of its own, installs the sandbox,
// evaluates the module and then runs after (reading the options, for the
// first runtime), all under loadTimeout; a throw or panic from user code
// is TRANSFORM_FAILED.
func newVM(ctx context.Context, j *Job, prog *goja.Program, con *consoleLimiter, after func(*vm) error) (*vm, error) {
	rt := goja.New()
	v := &vm{rt: rt, vTrue: rt.ToValue(true), vFalse: rt.ToValue(false)}
	v.start()
	limit := loadTimeout(j)
	var fired atomic.Bool
	timer := time.AfterFunc(limit, func() {
		fired.Store(true)
		v.interrupt(errLoadTimeout)
	})
	giveUp := time.NewTimer(limit + abandonGrace)
	defer giveUp.Stop()
	var err error
	v.work <- func() {
		defer func() {
			if r := recover(); r != nil {
				err = loadPanic(j, r)
			}
		}()
		err = v.install(j, prog, con)
		if err == nil && after != nil {
			err = after(v)
		}
	}
	select {
	case <-v.done:
	case <-giveUp.C:
		// Still in a built-in past the limit: left to end on its own.
		close(v.work)
		return nil, errs.New(errs.TransformFailed, j.Name, "load: %s: evaluating the module did not finish within %s", j.file(), limit)
	case <-ctx.Done():
		timer.Stop()
		v.interrupt(context.Cause(ctx))
		grace := time.NewTimer(abandonGrace)
		defer grace.Stop()
		select {
		case <-v.done:
		case <-grace.C:
		}
		close(v.work)
		return nil, context.Cause(ctx)
	}
	if !timer.Stop() || fired.Load() { // it fired: this runtime is spoiled
		close(v.work)
		return nil, errs.New(errs.TransformFailed, j.Name, "load: %s: evaluating the module did not finish within %s", j.file(), limit)
	}
	if v.crash != nil {
		err = loadPanic(j, v.crash)
	}
	if err != nil {
		close(v.work)
		return nil, err
	}
	return v, nil
}

// loadPanic turns what was thrown while loading into TRANSFORM_FAILED.
func loadPanic(j *Job, r any) error {
	switch x := r.(type) {
	case *goja.InterruptedError:
		return runErr(j, "load", x)
	case *goja.StackOverflowError:
		return runErr(j, "load", x)
	case *goja.Exception:
		return runErr(j, "load", x)
	case goja.Value:
		return runErr(j, "load", &goja.Exception{})
	}
	return errs.New(errs.TransformFailed, j.Name, "load: %s: internal error (%s): please report it", j.file(), clipText(fmt.Sprint(r), 200))
}

// start runs the vm's goroutine: it runs what work hands it, one at a
// time, until work is closed, then gives the vm's pool slot back.
func (v *vm) start() {
	v.work = make(chan func())
	v.done = make(chan struct{}, 1)
	v.exited = make(chan struct{})
	v.runReq = v.runCall
	v.runEach = func() {
		r := v.eachRun
		v.eachRun = nil
		v.each(r, v.eachGen)
	}
	go v.serve()
}

func (v *vm) serve() {
	for fn := range v.work {
		v.do(fn)
		v.done <- struct{}{}
	}
	if v.guard != nil {
		v.guard.close()
	}
	if v.slot != nil {
		<-v.slot
	}
	close(v.exited)
}

// do runs fn; a panic that fn let through (a bug) is kept for the caller
// and spoils the runtime.
func (v *vm) do(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			v.crash, v.spoiled = r, true
		}
	}()
	fn()
}

// interrupt stops the JavaScript running in v, and tells the built-ins
// that loop (harden.go) to stop too.
func (v *vm) interrupt(reason any) {
	v.stop.Store(true)
	v.rt.Interrupt(reason)
}

// runCall runs v.req (on v's goroutine).
func (v *vm) runCall() {
	r := &v.req
	v.out = v.out[:0]
	r.res, v.out, r.err = v.run(r.job, v.out, r.doc, r.idv, r.op, r.updateDesc, r.lookups, r.res)
	if f := v.readFail; f != nil { // whatever the script made of it
		v.readFail = nil
		r.res, r.err = Result{}, f
	}
}

// A run is a series of calls handed to one vm at once: a hand-off between
// goroutines, and the thread switch it often costs, once per series
// rather than once per document. The vm's goroutine runs the calls in
// order, each under the guard, and writes each outcome under mu unless
// the caller has given up on it (gen moved on: the run goes on with
// another vm); it stops at the first call whose runtime cannot be used
// again (interrupted, spoiled, or a panic: v.crash) or whose failure is
// the job's (failed).
type run struct {
	ctx     context.Context
	job     *Job
	timeout time.Duration
	calls   []prepared
	out     []Outcome

	mu   sync.Mutex
	dst  []byte // the results' JSON, one after the other
	cur  int    // the call running or about to
	stop stopReason
	gen  int // the hand-off that owns the run; an abandoned one's vm writes nothing more
}

// stopReason is why a run's vm stopped before the end of its calls.
type stopReason int

const (
	ranAll      stopReason = iota
	interrupted            // the time limit (or the context) interrupted calls[cur]
	spoiled                // calls[cur] is done, but its runtime is not to be used again
	failed                 // calls[cur-1] failed with FAILED (the job's failure, not the document's): the rest need not run
)

// prepared is one call's input, checked and converted on the caller's side.
type prepared struct {
	doc        bson.Raw
	idv        bson.RawValue
	op         Operation
	updateDesc bson.Raw
	lookups    jobdef.LookupResults
	track      bool
	res        Result
	skip       bool // its outcome is already known (out holds it)
}

// each runs r's calls from r.cur on (on v's goroutine), as hand-off gen.
func (v *vm) each(r *run, gen int) {
	for {
		r.mu.Lock()
		if r.gen != gen {
			r.mu.Unlock()
			return
		}
		k := r.cur
		for k < len(r.calls) && r.calls[k].skip {
			k++
		}
		r.cur = k
		r.mu.Unlock()
		if k == len(r.calls) {
			return
		}
		c := &r.calls[k]
		v.req = callReq{job: r.job, doc: c.doc, idv: c.idv, op: c.op, updateDesc: c.updateDesc, lookups: c.lookups, track: c.track, res: c.res}
		v.guard.begin(r.ctx, r.timeout)
		v.runCall() // a panic past it ends each: do keeps it as v.crash
		ok := v.guard.end()
		var reads *Reads
		if v.reads.on {
			reads = v.reads.result(r.job)
		}
		res, err := v.req.res, v.req.err
		v.req = callReq{}
		r.mu.Lock()
		if r.gen != gen {
			r.mu.Unlock()
			return
		}
		if !ok {
			// The time limit passed, whether or not the call then
			// returned: a built-in cut short by its own limit (a regular
			// expression's) may have given a wrong answer, so its result
			// is not used.
			r.stop = interrupted
			r.mu.Unlock()
			return
		}
		if err == nil {
			res.Reads = reads
			if res.JSON != nil {
				start := len(r.dst)
				r.dst = append(r.dst, res.JSON...)
				res.JSON = r.dst[start:len(r.dst):len(r.dst)]
			}
		} else {
			res = Result{}
		}
		r.out[k] = Outcome{Result: res, Err: err}
		r.cur = k + 1
		if err != nil && errs.CodeOf(err) == errs.Failed && !v.spoiled {
			r.stop = failed
			r.mu.Unlock()
			return
		}
		if v.spoiled {
			r.cur = k
			r.stop = spoiled
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// hand runs r on v and waits: false when the caller gave up on a call
// stuck in a built-in (see abandonGrace), r.cur then being that call.
func (v *vm) hand(r *run) (finished bool) {
	if v.guard == nil {
		v.guard = newGuard(v)
		if w := r.job.rt.mem; w != nil {
			v.guard.mem = w
			w.add(v.guard)
		}
	}
	r.mu.Lock()
	v.eachRun, v.eachGen = r, r.gen
	r.mu.Unlock()
	v.work <- v.runEach
	select {
	case <-v.done:
		return true
	case <-v.guard.abandon:
		select {
		case <-v.done:
			return true
		default:
		}
		r.mu.Lock()
		r.gen++
		r.mu.Unlock()
		return false
	}
}

// pool hands out vms, creating up to size of them on demand. An abandoned
// vm moves from its slot to one of size zombie slots while its goroutine
// runs on; with those all taken it keeps its slot, so at most 2*size
// goroutines of a job run JavaScript at once. A vm left idle for
// idleRuntime is let go (its runtime and goroutine): a process holding
// hundreds of jobs, most of them quiet, keeps runtimes for the busy ones
// only, and a quiet job's next change makes one again (a module
// evaluated anew, as for any runtime of the pool).
type pool struct {
	mk      func(context.Context) (*vm, error)
	idle    chan *vm
	sem     chan struct{}
	zombies chan struct{}

	mu   sync.Mutex
	trim *time.Timer // armed while a vm is idle
}

// idleRuntime is how long a pool keeps a vm nobody uses.
var idleRuntime = time.Minute

func newPool(size int, mk func(context.Context) (*vm, error)) *pool {
	return &pool{mk: mk, idle: make(chan *vm, size), sem: make(chan struct{}, size), zombies: make(chan struct{}, size)}
}

// adopt takes v, made outside get, into the pool (it takes a slot).
func (p *pool) adopt(v *vm) {
	p.sem <- struct{}{}
	v.slot = p.sem
	p.put(v)
}

func (p *pool) get(ctx context.Context) (*vm, error) {
	select {
	case v := <-p.idle:
		return v, nil
	default:
	}
	select {
	case v := <-p.idle:
		return v, nil
	case p.sem <- struct{}{}:
		v, err := p.mk(ctx)
		if err != nil {
			<-p.sem
			return nil, err
		}
		v.slot = p.sem
		return v, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *pool) put(v *vm) {
	v.idleAt = time.Now()
	p.idle <- v
	p.armTrim()
}

func (p *pool) armTrim() {
	p.mu.Lock()
	if p.trim == nil {
		p.trim = time.AfterFunc(idleRuntime, p.trimIdle)
	}
	p.mu.Unlock()
}

// trimIdle lets go the vms idle for idleRuntime, and checks again later
// while some are idle for less.
func (p *pool) trimIdle() {
	p.mu.Lock()
	p.trim = nil
	p.mu.Unlock()
	kept := 0
	for range len(p.idle) {
		select {
		case v := <-p.idle:
			if time.Since(v.idleAt) >= idleRuntime {
				p.discard(v)
			} else {
				p.idle <- v
				kept++
			}
		default:
		}
	}
	if kept > 0 {
		p.armTrim()
	}
}

// discard forgets a vm that must not be reused (interrupted, spoiled);
// its goroutine ends and gives its slot back.
func (p *pool) discard(v *vm) { close(v.work) }

// abandon forgets a vm whose call is still running.
func (p *pool) abandon(v *vm) {
	select {
	case p.zombies <- struct{}{}:
		<-p.sem
		v.slot = p.zombies
	default:
	}
	close(v.work)
}

func (p *pool) drain() {
	for {
		select {
		case v := <-p.idle:
			p.discard(v)
		default:
			return
		}
	}
}

// ErrTimeout is the cause of a document's TRANSFORM_FAILED when its call
// ran out of time on every try (errors.Is): the engine tries such a
// document again later, with a longer limit (WithTimeout), since on a
// loaded machine a transform can miss its limit without being at fault.
// A call abandoned in a built-in is not one of them.
var ErrTimeout = errors.New("the machine may be overloaded, or the transformTimeout too small")

type timeoutKey struct{}

// WithTimeout returns ctx making the calls of a job under it take d as
// their time limit when d is longer than the job's own, up to MaxTimeout.
func WithTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey{}, d)
}

// timeoutIn is the time limit of a call of j under ctx (WithTimeout).
func (j *Job) timeoutIn(ctx context.Context) time.Duration {
	t := j.timeout()
	if d, ok := ctx.Value(timeoutKey{}).(time.Duration); ok && d > t {
		t = min(d, max(MaxTimeout, t))
	}
	return t
}

// CallTimeout is the time limit of one call of j: its transformTimeout.
func (j *Job) CallTimeout() time.Duration { return j.timeout() }

// timeout is the time limit of one call of j.
func (j *Job) timeout() time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	if j.opts.Timeout > 0 {
		return j.opts.Timeout
	}
	return DefaultTimeout
}

// Outcome is one document's result from ApplyEach: Result (its JSON
// within the buffer ApplyEach returns) or Err, as ApplyWith returns them.
type Outcome struct {
	Result Result
	Err    error
}

// Input is one document for ApplyEach, as ApplyWith takes it.
type Input struct {
	Doc        bson.Raw
	Op         Operation
	UpdateDesc bson.Raw
	Lookups    jobdef.LookupResults
}

// ApplyEach runs each of in through the transform, as ApplyWith would one
// after the other (search documents written at the end of dst, returned
// grown), into out (len(out) == len(in)). The documents are handed to a
// runtime as one series, not one at a time: on a busy machine each
// hand-off between goroutines costs a thread switch.
func (j *Job) ApplyEach(ctx context.Context, dst []byte, in []Input, out []Outcome) []byte {
	start := len(dst)
	dst = j.applyEach(ctx, dst, in, out)
	j.noteJSON(len(dst)-start, len(in))
	return dst
}

func (j *Job) applyEach(ctx context.Context, dst []byte, in []Input, out []Outcome) []byte {
	calls := make([]prepared, len(in))
	for i, x := range in {
		c := &calls[i]
		c.op, c.updateDesc, c.lookups, c.track = x.Op, x.UpdateDesc, x.Lookups, j.tracks(x.Op, x.UpdateDesc)
		doc, idv, res, err := j.prepare(x.Doc, x.Lookups)
		if err != nil {
			out[i], c.skip = Outcome{Err: err}, true
			continue
		}
		c.doc, c.idv, c.res = doc, idv, res
		if j.rt == nil {
			r, b, err := j.identityGuarded(dst, doc, idv, res)
			dst = b
			out[i], c.skip = Outcome{Result: r, Err: err}, true
		}
	}
	if j.rt == nil {
		return dst
	}
	if floorBuild {
		return j.floorEach(ctx, dst, calls, out)
	}
	return j.rt.applyEach(ctx, j, dst, calls, out)
}

// prepare is the part of a call done before the transform: the lookups
// merged in, the _id and the destination's id.
func (j *Job) prepare(doc bson.Raw, lookups jobdef.LookupResults) (bson.Raw, bson.RawValue, Result, error) {
	if len(j.Lookups) > 0 {
		merged, err := j.withLookups(doc, lookups)
		if err != nil {
			return nil, bson.RawValue{}, Result{}, errs.New(errs.NotADocument, j.Name, "the source document is not valid BSON")
		}
		doc = merged
	}
	idv, err := doc.LookupErr("_id")
	if err != nil {
		return nil, bson.RawValue{}, Result{}, errs.New(errs.NotADocument, j.Name, "the source document has no _id")
	}
	var res Result
	if j.Kind == jobdef.Mirror {
		res.ID = idv
	} else {
		id, err := jobdef.IndexID(idv)
		if err != nil {
			return nil, bson.RawValue{}, Result{}, errs.WithJob(j.Name, err)
		}
		res.ID = id
	}
	return doc, idv, res, nil
}

// single is a run of one call with room for it, kept by its jobRuntime
// for the next: a call of ApplyTo or ApplyWith then allocates none of
// them.
type single struct {
	r     run
	calls [1]prepared
	out   [1]Outcome
}

// applyOne runs c as applyEach would.
func (jr *jobRuntime) applyOne(ctx context.Context, j *Job, dst []byte, c prepared) (Outcome, []byte) {
	s, _ := jr.singles.Get().(*single)
	if s == nil {
		s = new(single)
	}
	s.calls[0] = c
	s.r = run{ctx: ctx, job: j, timeout: j.timeoutIn(ctx), calls: s.calls[:], out: s.out[:], dst: dst}
	dst = jr.runCalls(&s.r)
	o := s.out[0]
	if s.r.gen != 0 {
		// A vm abandoned in the call may still look at the run: it is
		// not to be reused.
		return o, dst
	}
	*s = single{}
	jr.singles.Put(s)
	return o, dst
}

// applyEach runs calls (those not skipped) on the pool's runtimes, a
// series at a time. A call that ran out of time is tried again on a fresh
// runtime, up to maxTimeoutRetries times; the calls after it go on there.
func (jr *jobRuntime) applyEach(ctx context.Context, j *Job, dst []byte, calls []prepared, out []Outcome) []byte {
	return jr.runCalls(&run{ctx: ctx, job: j, timeout: j.timeoutIn(ctx), calls: calls, out: out, dst: dst})
}

// runCalls is applyEach's work on its run r.
func (jr *jobRuntime) runCalls(r *run) []byte {
	ctx, j, calls, out, timeout := r.ctx, r.job, r.calls, r.out, r.timeout
	tries, triesAt := 0, -1 // times calls[triesAt] ran out of time
	for {
		for r.cur < len(calls) && calls[r.cur].skip {
			r.cur++
		}
		if r.cur != triesAt {
			tries, triesAt = 0, r.cur
		}
		if r.cur == len(calls) {
			return r.dst
		}
		v, err := jr.pool.get(ctx)
		if err != nil {
			if ctx.Err() == nil {
				err = errs.WithJob(j.Name, err)
			}
			for k := r.cur; k < len(calls); k++ {
				if !calls[k].skip {
					out[k] = Outcome{Err: err}
				}
			}
			return r.dst
		}
		if v.fn == nil { // an object without transform: identity
			jr.pool.put(v)
			for k := r.cur; k < len(calls); k++ {
				if c := &calls[k]; !c.skip {
					res, b, err := j.identityGuarded(r.dst, c.doc, c.idv, c.res)
					r.dst, out[k] = b, Outcome{Result: res, Err: err}
				}
			}
			return r.dst
		}
		r.stop = ranAll
		if !v.hand(r) {
			jr.pool.abandon(v)
			err := ctx.Err()
			if err != nil {
				err = context.Cause(ctx)
			} else {
				// Not tried again: a call stuck in a built-in is stuck in
				// it whatever the load of the machine.
				err = errs.New(errs.TransformFailed, j.Name, "the transform did not finish within %s (it was still in a built-in function %s later, and was abandoned)", timeout, abandonGrace)
				if v.guard.overMemory() {
					err = memoryErr(j, true)
				}
			}
			out[r.cur] = Outcome{Err: err}
			r.cur++
			continue
		}
		if crash := v.crash; crash != nil {
			jr.pool.discard(v)
			out[r.cur] = Outcome{Err: internalErr(j, crash)}
			r.cur++
			continue
		}
		switch r.stop {
		case ranAll:
			jr.pool.put(v)
			return r.dst
		case failed:
			// The job fails with it (MongoDB down under a read global):
			// the documents after it are not run, and say why.
			jr.pool.put(v)
			err := out[r.cur-1].Err
			for k := r.cur; k < len(calls); k++ {
				if !calls[k].skip {
					out[k] = Outcome{Err: err}
				}
			}
			return r.dst
		case spoiled:
			// The call finished (its outcome is written); its runtime is
			// not to be used again: a fresh one replaces it, so no
			// half-updated module state survives.
			jr.pool.discard(v)
			r.cur++
		case interrupted:
			// An interrupt may still be pending in the runtime: a fresh
			// one replaces it.
			jr.pool.discard(v)
			if ctx.Err() != nil {
				out[r.cur] = Outcome{Err: context.Cause(ctx)}
				r.cur++
				continue
			}
			overMemory := v.guard.overMemory()
			if overMemory {
				jr.mem.cleanUp(v)
			}
			// A call stopped by the memory bound is tried once more: it
			// may have been stopped for another call's growth.
			if tries < maxTimeoutRetries && (!overMemory || tries < 1) {
				tries++
				if overMemory {
					j.log.Debug("a transform call was stopped by the memory bound; trying it again on a fresh runtime", "attempt", tries+1, "memory_limit_mib", j.memoryLimit()>>20)
				} else {
					j.log.Debug("a transform call ran out of time; trying it again on a fresh runtime", "attempt", tries+1, "timeout", timeout)
				}
				continue
			}
			var err error = errs.Wrap(errs.TransformFailed, j.Name, ErrTimeout, "the transform did not finish within %s", timeout)
			if overMemory {
				err = memoryErr(j, false)
			}
			out[r.cur] = Outcome{Err: err}
			r.cur++
		}
	}
}
