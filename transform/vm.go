package transform

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// maxCallStack bounds JavaScript recursion, so runaway recursion is a
// RangeError (TRANSFORM_FAILED) and not a runaway Go stack.
const maxCallStack = 2000

// modulePrefix wraps a file into a CommonJS-style function. It is on the
// same line as the file's first line, so line numbers are the file's own and
// only columns on line 1 shift (fixed up in syntaxErr).
const modulePrefix = "(function (module, exports) {"
const moduleSuffix = "\n})"

// bootstrapSrc defines the classes BSON values become in JavaScript. G
// holds the Go helpers that read and make their instances (host.go); it
// stays in this closure.
const bootstrapSrc = `(function (G) {
"use strict";
function def(p, n, f) { Object.defineProperty(p, n, {value: f, writable: true, configurable: true}); }
function ObjectId(hex) {
	var s = String(hex);
	if (!/^[0-9a-fA-F]{24}$/.test(s)) throw new TypeError("ObjectId needs 24 hex characters");
	return G.newOID(s.toLowerCase());
}
def(ObjectId.prototype, "toHexString", function () { return G.oidHex(this); });
def(ObjectId.prototype, "toString", function () { return G.oidHex(this); });
def(ObjectId.prototype, "toJSON", function () { return G.oidHex(this); });
def(ObjectId.prototype, "equals", function (o) {
	if (o === null || o === undefined) return false;
	return (o instanceof ObjectId ? G.oidHex(o) : String(o).toLowerCase()) === G.oidHex(this);
});
def(ObjectId.prototype, "getTimestamp", function () { return new Date(parseInt(G.oidHex(this).slice(0, 8), 16) * 1000); });
function Decimal128(s) { return G.newDecimal(String(s)); }
def(Decimal128.prototype, "toString", function () { return G.decText(this); });
def(Decimal128.prototype, "toJSON", function () { return G.decText(this); });
def(Decimal128.prototype, "valueOf", function () { return Number(G.decText(this)); });
def(Decimal128.prototype, "toNumber", function () { return Number(G.decText(this)); });
function Binary() { throw new TypeError("Binary values come from documents only"); }
Object.defineProperty(Binary.prototype, "subtype", {get: function () { return G.binSubtype(this); }, configurable: true});
def(Binary.prototype, "toBase64", function () { return G.binBase64(this); });
def(Binary.prototype, "toString", function () { return G.binText(this); });
def(Binary.prototype, "toJSON", function () { return G.binText(this); });
function Timestamp(t, i) {
	if (!(this instanceof Timestamp)) return new Timestamp(t, i);
	this.t = t >>> 0; this.i = i >>> 0;
}
def(Timestamp.prototype, "toString", function () { return "Timestamp(" + this.t + ", " + this.i + ")"; });
function BSONRegExp(pattern, options) {
	if (!(this instanceof BSONRegExp)) return new BSONRegExp(pattern, options);
	this.pattern = String(pattern); this.options = options === undefined ? "" : String(options);
}
def(BSONRegExp.prototype, "toString", function () { return "/" + this.pattern + "/" + this.options; });
def(BSONRegExp.prototype, "toJSON", function () { return "/" + this.pattern + "/" + this.options; });
function BSONValue() { throw new TypeError("BSONValue values come from documents only"); }
def(BSONValue.prototype, "toString", function () { return G.opaqueJSON(this); });
def(BSONValue.prototype, "toJSON", function () { return G.opaqueJSON(this); });
return {ObjectId: ObjectId, Decimal128: Decimal128, Binary: Binary, Timestamp: Timestamp, BSONRegExp: BSONRegExp, BSONValue: BSONValue};
})`

var bootstrapProgram = goja.MustCompile("meilistream:bootstrap", bootstrapSrc, true)

// jobRuntime is what a loaded file needs to run: the compiled program and
// the pool of runtimes.
type jobRuntime struct {
	program *goja.Program
	pool    *pool
	console *consoleLimiter
	mem     *memWatch // nil: no memory bound
	singles sync.Pool // of *single
}

// vm is one goja runtime with the file's module evaluated in it. It is used
// by one goroutine at a time (the pool hands it out).
type vm struct {
	rt       *goja.Runtime
	exports  goja.Value
	fn       goja.Callable // the transform; nil for an object without one
	this     goja.Value    // `this` of the transform (the exports object)
	bare     bool          // monstache-style function
	ns       goja.Value    // "db.collection" for bare functions
	dateCtor goja.Value
	dateArg  [1]goja.Value // date's argument, reused (no slice per Date)
	protos   struct{ oid, dec, bin, ts, re, opaque *goja.Object }
	ctxs     map[Operation]*goja.Object
	// bareSeesUpdate: the monstache-style function can see its updateDesc
	// argument (seesArgument), so a tracked call counts as reading it.
	bareSeesUpdate bool
	// reads tracks what the running call reads (reads.go); det and log
	// are the job's, for a call asking the clock or chance.
	reads  callReads
	det    *determinism
	log    hclog.Logger
	vTrue  goja.Value
	vFalse goja.Value
	// guard interrupts a call that runs past its limit or whose context
	// ends; made at the first call.
	guard *guard
	// work hands the vm's goroutine what to run; done says it ran it;
	// closing work ends the goroutine, which then gives slot back (its
	// pool's) and closes exited.
	work   chan func()
	idleAt time.Time // put back into its pool (pool.trimIdle)
	done   chan struct{}
	exited chan struct{}
	slot   chan struct{}
	runReq func()
	// runEach runs eachRun as hand-off eachGen (hand sets them): one
	// function for every hand-off, not one made for each.
	runEach func()
	eachRun *run
	eachGen int
	req     callReq
	out     []byte // the document a call wrote
	// crash is a panic that escaped what the goroutine ran (a bug).
	crash any
	// stop is set with every interrupt: built-ins that loop check it.
	stop atomic.Bool
	// The guarded built-ins' state (harden.go): RangeError, the original
	// Array.isArray, the arrays being joined (for cycles), the nesting of
	// the built-ins' recursion.
	rangeErrCtor goja.Value
	isArrayFn    func(goja.FunctionCall) goja.Value
	joining      []*goja.Object
	nativeDepth  int
	// readFail is a failure of MongoDB under a read global, or a read of
	// one of the sidecar's own collections refused (monstache.go,
	// private.go): it fails the call whatever the script did with what
	// was thrown.
	readFail error
	// spoiled: a panic no case expects unwound through the runtime; it is
	// discarded rather than reused.
	spoiled bool
	// path and seen are scratch for the output walk, reused across calls.
	path []string
	seen []*goja.Object
	// items is scratch for the elements of arrays being converted.
	items []any
	// strs holds the JavaScript strings of short string values seen (str).
	strs map[string]goja.Value
	// objectProto is Object.prototype; builtinProtos are the prototypes
	// of built-in objects that are not documents (Map, Set, iterators...).
	objectProto   *goja.Object
	builtinProtos []builtinProto
}

type builtinProto struct {
	name  string
	proto *goja.Object
}

// builtinsSrc lists the prototypes of built-in objects whose class is
// "Object" in goja but which are not plain data (JSON.stringify would write
// them as {} and lose what they hold).
const builtinsSrc = `(function () {
	var it = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));
	var o = {Map: Map.prototype, Set: Set.prototype, WeakMap: WeakMap.prototype, WeakSet: WeakSet.prototype,
		Promise: Promise.prototype, ArrayBuffer: ArrayBuffer.prototype, DataView: DataView.prototype,
		TypedArray: Object.getPrototypeOf(Uint8Array.prototype), Iterator: it};
	if (typeof WeakRef === "function") o.WeakRef = WeakRef.prototype;
	if (typeof FinalizationRegistry === "function") o.FinalizationRegistry = FinalizationRegistry.prototype;
	return o;
})()`

var builtinsProgram = goja.MustCompile("meilistream:builtins", builtinsSrc, true)

// builtin names the built-in kind of o (a Map, a Set...) when o is not
// plain data, "" when it is. Plain objects have Object.prototype (or null,
// or a class's prototype) in their chain and none of the built-ins'.
func (v *vm) builtin(o *goja.Object) string {
	p := o.Prototype()
	for i := 0; p != nil && p != v.objectProto && i < 32; i++ {
		for _, b := range v.builtinProtos {
			if p == b.proto {
				return b.name
			}
		}
		p = p.Prototype()
	}
	return ""
}

// install sets up the sandbox in v's runtime and evaluates the module in
// it (on v's goroutine).
func (v *vm) install(j *Job, prog *goja.Program, con *consoleLimiter) error {
	rt := v.rt
	rt.SetMaxCallStackSize(maxCallStack)
	// eval and Function parse too: no source map may make them read a file.
	rt.SetParserOptions(parser.WithDisableSourceMaps)
	boot, err := rt.RunProgram(bootstrapProgram)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	bf, _ := goja.AssertFunction(boot)
	classes, err := bf(goja.Undefined(), v.classHelpers())
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	co := classes.ToObject(rt)
	proto := func(name string) *goja.Object {
		c := co.Get(name).ToObject(rt)
		return c.Get("prototype").ToObject(rt)
	}
	v.protos.oid = proto("ObjectId")
	v.protos.dec = proto("Decimal128")
	v.protos.bin = proto("Binary")
	v.protos.ts = proto("Timestamp")
	v.protos.re = proto("BSONRegExp")
	v.protos.opaque = proto("BSONValue")
	for _, name := range []string{"ObjectId", "Decimal128", "Timestamp", "BSONRegExp"} {
		if err := rt.Set(name, co.Get(name)); err != nil {
			return err
		}
	}
	v.dateCtor = rt.Get("Date")
	objectCtor := rt.Get("Object").ToObject(rt)
	v.objectProto = objectCtor.Get("prototype").ToObject(rt)
	builtins, err := rt.RunProgram(builtinsProgram)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	bo := builtins.ToObject(rt)
	for _, name := range bo.Keys() {
		if p, ok := bo.Get(name).(*goja.Object); ok {
			v.builtinProtos = append(v.builtinProtos, builtinProto{name, p})
		}
	}
	if err := v.harden(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	v.det, v.log = j.det, j.log
	if err := v.watchChance(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := rt.Set("console", con.object(v)); err != nil {
		return err
	}
	if err := v.installUnderscore(j.underscore); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	mod := rt.NewObject()
	exp := rt.NewObject()
	_ = mod.Set("exports", exp)
	wrapper, err := rt.RunProgram(prog)
	if err != nil {
		return runErr(j, "load", err)
	}
	wf, ok := goja.AssertFunction(wrapper)
	if !ok {
		return errs.New(errs.TransformFailed, j.Name, "%s: not a module", j.file())
	}
	// `this` at the top of a file is module.exports, as in Node.
	if _, err := wf(exp, mod, exp); err != nil {
		return runErr(j, "load", err)
	}
	v.exports = mod.Get("exports")
	if e, ok := v.exports.(*goja.Object); ok && e.SameAs(exp) && len(exp.GetOwnPropertyNames()) == 0 && len(exp.Symbols()) == 0 {
		// A file that exports nothing is no job: an empty file, or one
		// read while it was being written (cut after a statement), must
		// not become the identity, which would make every field
		// searchable.
		return errs.New(errs.ConfigInvalid, j.Name, "%s: the file sets no module.exports (is it empty, or was it read while being written?); a job without a transform is module.exports = {}", j.file())
	}
	if f, ok := goja.AssertFunction(v.exports); ok {
		v.fn, v.bare, v.this = f, true, goja.Undefined()
		v.bareSeesUpdate = seesArgument(v.exports, 2) // (doc, ns, updateDesc)
		if err := v.installReaders(); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		ns := j.Collection
		if j.Database != "" {
			ns = j.Database + "." + j.Collection
		}
		v.ns = rt.ToValue(ns)
	} else if o, ok := v.exports.(*goja.Object); ok {
		if f, ok := goja.AssertFunction(o.Get("transform")); ok {
			v.fn, v.this = f, o
		}
	}
	if err := v.makeCtxs(j); err != nil {
		return err
	}
	return nil
}

// makeCtxs prepares one frozen ctx object per operation, so a call without
// an updateDescription allocates none.
func (v *vm) makeCtxs(j *Job) error {
	v.ctxs = make(map[Operation]*goja.Object, 4)
	for _, op := range []Operation{OpInsert, OpUpdate, OpReplace, OpReindex} {
		if _, err := v.ctx(j, op); err != nil {
			return err
		}
	}
	return nil
}

// ctx is the frozen ctx of op, made on first use.
func (v *vm) ctx(j *Job, op Operation) (*goja.Object, error) {
	if c := v.ctxs[op]; c != nil {
		return c, nil
	}
	freeze, _ := goja.AssertFunction(v.rt.Get("Object").ToObject(v.rt).Get("freeze"))
	c := v.rt.NewObject()
	_ = c.Set("job", j.Name)
	_ = c.Set("collection", j.Collection)
	_ = c.Set("operation", string(op))
	if _, err := freeze(goja.Undefined(), c); err != nil {
		return nil, err
	}
	v.ctxs[op] = c
	return c, nil
}

// updateCtx is the ctx of a call with an updateDescription (most of
// follow's calls): a new object for each such call, since a transform may
// keep its ctx. It is a host object because a plain one with its four
// properties costs several times as much to make, and follow makes one per
// change (BenchmarkArticlesUpdate measures it). Like the frozen
// ctx of other calls it refuses writes (a TypeError in strict code);
// unlike them it cannot be passed to Object.freeze (a TypeError too). Its
// other fields are read from the frozen ctx of the same operation.
//
// A call whose reads are tracked always gets one, so that reading the
// operation or the updateDescription, or enumerating ctx, is seen
// (reads); without an updateDescription (check's reads of a sample) it
// has no such key, as the frozen ctx.
type updateCtx struct {
	base    *goja.Object
	ud      goja.Value // nil: none
	lookups goja.Value // nil for a job without lookups
	reads   *callReads // nil: not tracked
}

var updateCtxKeys = []string{"job", "collection", "operation", "updateDescription"}

// context notes that the call looked at what differs between calls on
// the same document (the operation, the update description) or at its
// lookups' matches.
func (c *updateCtx) context(key string) {
	if c.reads == nil {
		return
	}
	switch key {
	case "operation", "updateDescription":
		c.reads.context = true
	case "lookups":
		c.reads.lookups = true
	case "": // enumerated
		c.reads.context, c.reads.lookups = true, true
	}
}

func (c *updateCtx) Get(key string) goja.Value {
	c.context(key)
	switch key {
	case "updateDescription":
		return c.ud
	case "job", "collection", "operation":
		return c.base.Get(key)
	case "lookups":
		return c.lookups
	}
	return nil
}

func (c *updateCtx) Has(key string) bool {
	c.context(key)
	switch key {
	case "updateDescription":
		return c.ud != nil
	case "lookups":
		return c.lookups != nil
	}
	return slices.Contains(updateCtxKeys, key)
}

func (c *updateCtx) Set(string, goja.Value) bool { return false }
func (c *updateCtx) Delete(string) bool          { return false }
func (c *updateCtx) Keys() []string {
	c.context("")
	keys := slices.Clone(updateCtxKeys[:3])
	if c.ud != nil {
		keys = append(keys, "updateDescription")
	}
	if c.lookups != nil {
		keys = append(keys, "lookups")
	}
	return keys
}

// lookupsObject is ctx.lookups: each lookup's matches by name, as the
// transform's documents are (an array with many, else the match or null),
// frozen.
func (v *vm) lookupsObject(j *Job, res jobdef.LookupResults) (goja.Value, error) {
	in := inConv{v: v}
	o := v.rt.NewObject()
	for i, l := range j.Lookups {
		var matches []bson.Raw
		if i < len(res) {
			matches = res[i]
		}
		var val goja.Value
		switch {
		case l.Many:
			a := make([]any, 0, len(matches))
			for _, m := range matches {
				d, err := in.doc(m, 0)
				if err != nil {
					return nil, err
				}
				a = append(a, d)
			}
			val = v.rt.NewArray(a...)
		case len(matches) == 0:
			val = goja.Null()
		default:
			d, err := in.doc(matches[0], 0)
			if err != nil {
				return nil, err
			}
			val = d
		}
		if err := o.Set(l.Name, val); err != nil {
			return nil, err
		}
	}
	freeze, _ := goja.AssertFunction(v.rt.Get("Object").ToObject(v.rt).Get("freeze"))
	if _, err := freeze(goja.Undefined(), o); err != nil {
		return nil, err
	}
	return o, nil
}

// identityGuarded is identity with internalErr for a panic.
func (j *Job) identityGuarded(dst []byte, doc bson.Raw, idv bson.RawValue, res Result) (_ Result, out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = dst, internalErr(j, r) // the Result stays zero
		}
	}()
	return j.identity(dst, doc, idv, res)
}

// run calls the transform and converts its result; panics from goja while
// reading the result (a throwing getter, an interrupt) become errors, and
// so does any other panic (internalErr, the runtime then spoiled).
func (v *vm) run(j *Job, dst []byte, doc bson.Raw, idv bson.RawValue, op Operation, updateDesc bson.Raw, lookups jobdef.LookupResults, res Result) (_ Result, out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			switch x := r.(type) {
			case *goja.InterruptedError:
				err = x
			case *goja.Exception:
				err = runErr(j, "transform", x)
			case *goja.StackOverflowError:
				err = runErr(j, "transform", x)
			case goja.Value: // thrown from Go code (a DynamicObject) outside JavaScript
				err = errs.New(errs.TransformFailed, j.Name, "transform: %s: %s", j.file(), x.String())
			default:
				// Unwound through goja from the middle of a call: its
				// state is not to be trusted again.
				v.spoiled = true
				err = internalErr(j, r)
			}
			out = dst
		}
	}()
	in := inConv{v: v}
	jsDoc, lazyTop, err := v.lazyDoc(doc, 0)
	if err != nil {
		return Result{}, dst, errs.WithJob(j.Name, err)
	}
	// An update's reads are tracked, for the engine to tell one that
	// cannot change the result (Result.Reads).
	var tracked *callReads
	if v.req.track {
		tracked = &v.reads
		v.reads.begin(lazyTop)
		v.reads.context = v.bare && v.bareSeesUpdate
	} else {
		v.reads.begin(nil)
	}
	var ret goja.Value
	if v.bare {
		ud := goja.Undefined()
		if updateDesc != nil {
			if ud, err = in.doc(updateDesc, 0); err != nil {
				return Result{}, dst, errs.WithJob(j.Name, err)
			}
		}
		ret, err = v.fn(jsDoc, jsDoc, v.ns, ud)
	} else {
		c, cerr := v.ctx(j, op)
		if cerr != nil {
			return Result{}, dst, runErr(j, "transform", cerr)
		}
		if updateDesc != nil || tracked != nil || len(j.Lookups) > 0 {
			cc := &updateCtx{base: c, reads: tracked}
			if updateDesc != nil {
				if cc.ud, err = in.doc(updateDesc, 0); err != nil {
					return Result{}, dst, errs.WithJob(j.Name, err)
				}
			}
			if len(j.Lookups) > 0 {
				lk, err := v.lookupsObject(j, lookups)
				if err != nil {
					return Result{}, dst, errs.WithJob(j.Name, err)
				}
				cc.lookups = lk
			}
			c = v.rt.NewDynamicObject(cc)
		}
		ret, err = v.fn(v.this, jsDoc, c)
	}
	if err != nil {
		var ie *goja.InterruptedError
		if errors.As(err, &ie) {
			return Result{}, dst, ie
		}
		return Result{}, dst, runErr(j, "transform", err)
	}
	// What the transform returned decides: null/undefined/false keep the
	// document out, true keeps it as it is, an object is the document.
	switch {
	case ret == nil || goja.IsUndefined(ret) || goja.IsNull(ret):
		res.Skip = true
		return res, dst, nil
	}
	if ret.StrictEquals(v.vFalse) {
		res.Skip = true
		return res, dst, nil
	}
	if ret.StrictEquals(v.vTrue) {
		// The document as the transform left it (monstache scripts may
		// change `this` and return true); untouched, it is the source.
		ret = jsDoc
	}
	obj, ok := ret.(*goja.Object)
	if !ok || obj.ClassName() != "Object" || v.special(obj) || v.builtin(obj) != "" {
		return Result{}, dst, errs.New(errs.NotADocument, j.Name, "the transform returned %s, not a document, null or a boolean", v.typeName(ret))
	}
	if err := v.refuseMeta(j, obj); err != nil {
		return Result{}, dst, err
	}
	if j.Kind == jobdef.Mirror {
		oc := mirrorConv{v: v, job: j, limit: j.maxResult()}
		raw, err := oc.document(obj, doc, idv)
		if err != nil {
			return Result{}, dst, err
		}
		res.Raw = raw
		return res, dst, nil
	}
	oc := j.newOutConv(v, dst, idv, res.ID)
	if err := oc.document(obj); err != nil {
		return Result{}, dst, err
	}
	return oc.result(res)
}

// consoleLimiter sends console output to the job's logger, at most burst
// lines at once and rate lines a second after that; what it drops is
// counted and reported with the next line that passes.
type consoleLimiter struct {
	log     hclog.Logger
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int
	rate    float64
	burst   float64
	now     func() time.Time
}

func newConsoleLimiter(log hclog.Logger) *consoleLimiter {
	return &consoleLimiter{log: log, rate: 10, burst: 20, tokens: 20, now: time.Now}
}

func (c *consoleLimiter) allow() (ok bool, dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.last.IsZero() {
		c.tokens += now.Sub(c.last).Seconds() * c.rate
		if c.tokens > c.burst {
			c.tokens = c.burst
		}
	}
	c.last = now
	if c.tokens < 1 {
		c.dropped++
		return false, 0
	}
	c.tokens--
	d := c.dropped
	c.dropped = 0
	return true, d
}

// maxConsoleLine caps one console line, so a transform cannot flood the log
// with one call either.
const maxConsoleLine = 4096

func (c *consoleLimiter) object(v *vm) *goja.Object {
	o := v.rt.NewObject()
	mk := func(level hclog.Level) func(goja.FunctionCall) goja.Value {
		return func(call goja.FunctionCall) goja.Value {
			ok, dropped := c.allow()
			if !ok {
				return goja.Undefined()
			}
			var b strings.Builder
			for i, a := range call.Arguments {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(v.consoleString(a))
				if b.Len() > maxConsoleLine {
					break
				}
			}
			msg := clipText(b.String(), maxConsoleLine)
			args := []any{"source", "console"}
			if dropped > 0 {
				args = append(args, "dropped", dropped)
			}
			c.log.Log(level, msg, args...)
			return goja.Undefined()
		}
	}
	_ = o.Set("log", mk(hclog.Info))
	_ = o.Set("info", mk(hclog.Info))
	_ = o.Set("debug", mk(hclog.Debug))
	_ = o.Set("warn", mk(hclog.Warn))
	_ = o.Set("error", mk(hclog.Error))
	return o
}
