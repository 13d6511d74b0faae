package transform

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
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
	lookups    LookupResults
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
	v.runReq = v.runCall
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

// call runs v.req under ctx for at most timeout and waits for it; finished
// is false when the call was abandoned (see abandonGrace).
func (v *vm) call(ctx context.Context, timeout time.Duration) (finished bool) {
	if v.guard == nil {
		v.guard = newGuard(v)
	}
	v.guard.begin(ctx, timeout)
	v.work <- v.runReq
	select {
	case <-v.done:
		return true
	case <-v.guard.abandon:
		select {
		case <-v.done:
			return true
		default:
			return false
		}
	}
}

// pool hands out vms, creating up to size of them on demand. An abandoned
// vm moves from its slot to one of size zombie slots while its goroutine
// runs on; with those all taken it keeps its slot, so at most 2*size
// goroutines of a job run JavaScript at once.
type pool struct {
	mk      func(context.Context) (*vm, error)
	idle    chan *vm
	sem     chan struct{}
	zombies chan struct{}
}

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

func (p *pool) put(v *vm) { p.idle <- v }

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

// apply runs one document through the transform (see Job.Apply). A call
// that runs out of time is tried again on a fresh runtime, up to
// maxTimeoutRetries times.
func (jr *jobRuntime) apply(ctx context.Context, j *Job, dst []byte, doc bson.Raw, idv bson.RawValue, op Operation, updateDesc bson.Raw, lookups LookupResults, res Result, track bool) (Result, []byte, error) {
	timeout := j.timeout()
	for attempt := 0; ; attempt++ {
		out, b, err, timedOut := jr.attempt(ctx, j, dst, doc, idv, op, updateDesc, lookups, res, track, timeout)
		if !timedOut || attempt == maxTimeoutRetries {
			return out, b, err
		}
		j.log.Debug("a transform call ran out of time; trying it again on a fresh runtime", "attempt", attempt+2, "timeout", timeout)
	}
}

// attempt is one try of apply; timedOut says it ran out of time (err then
// says so).
func (jr *jobRuntime) attempt(ctx context.Context, j *Job, dst []byte, doc bson.Raw, idv bson.RawValue, op Operation, updateDesc bson.Raw, lookups LookupResults, res Result, track bool, timeout time.Duration) (_ Result, _ []byte, _ error, timedOut bool) {
	v, err := jr.pool.get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, dst, err, false
		}
		return Result{}, dst, errs.WithJob(j.Name, err), false
	}
	if v.fn == nil { // an object without transform: identity
		jr.pool.put(v)
		r, b, err := j.identityGuarded(dst, doc, idv, res)
		return r, b, err, false
	}
	v.req = callReq{job: j, doc: doc, idv: idv, op: op, updateDesc: updateDesc, lookups: lookups, track: track, res: res}
	if !v.call(ctx, timeout) {
		jr.pool.abandon(v)
		if ctx.Err() != nil {
			return Result{}, dst, context.Cause(ctx), false
		}
		// Not tried again: a call stuck in a built-in is stuck in it
		// whatever the load of the machine.
		return Result{}, dst, errs.New(errs.TransformFailed, j.Name, "the transform did not finish within %s (it was still in a built-in function %s later, and was abandoned)", timeout, abandonGrace), false
	}
	interrupted := !v.guard.end()
	r := v.req
	v.req = callReq{}
	var reads *Reads
	if v.reads.on {
		reads = v.reads.result(j)
	}
	if crash := v.crash; crash != nil {
		jr.pool.discard(v)
		return Result{}, dst, internalErr(j, crash), false
	}
	// Reuse the runtime only if no interrupt was sent (it may still be
	// pending in it) and no unexpected panic unwound through it; otherwise
	// a fresh one replaces it, so no half-updated module state survives
	// either.
	if interrupted || v.spoiled {
		jr.pool.discard(v)
	} else {
		// The document is in the vm's buffer: copy it out first.
		defer jr.pool.put(v)
	}
	if interrupted {
		if ctx.Err() != nil {
			return Result{}, dst, context.Cause(ctx), false
		}
		// The time limit passed, whether or not the call then returned:
		// a built-in cut short by its own limit (a regular expression's)
		// may have given a wrong answer, so its result is not used.
		return Result{}, dst, errs.New(errs.TransformFailed, j.Name, "the transform did not finish within %s", timeout), true
	}
	if r.err != nil {
		return Result{}, dst, r.err, false
	}
	r.res.Reads = reads
	if r.res.JSON != nil {
		start := len(dst)
		dst = append(dst, r.res.JSON...)
		r.res.JSON = dst[start:len(dst):len(dst)]
	}
	return r.res, dst, nil, false
}
