package transform

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Reads is what one call of a transform read of its input, so that the
// engine can tell an update that cannot change the result (UnchangedBy):
// a transform is a function of what it reads, so a call on the document
// before an update that touched none of it takes the same path, reads the
// same values and returns the same thing. Apply sets it on Result for an
// update (OpUpdate) with its updateDescription, of a job with
// skipUnchanged on; it is nil otherwise (nothing known: every change
// counts).
type Reads struct {
	// Fields are the top-level fields of the document the call asked for:
	// read, tested (`in`, hasOwnProperty) or written, whether the document
	// has them or not (an update that adds one changes what the call saw).
	Fields []string
	// All says the result may depend on every field: the call enumerated
	// the document (Object.keys, spread, for...in, JSON.stringify,
	// Object.assign) or returned it, whole or inside its result.
	All bool
	// Except are, with All, the fields the call deleted before anything
	// saw them: never read, tested or written, and deleted before the
	// document was first enumerated. Whatever they hold, or whether they
	// are there at all, reached nothing. A field deleted after an
	// enumeration is read: its presence (or absence) reached the call.
	Except []string
	// Context says the call read ctx.operation or ctx.updateDescription
	// (a monstache function that can see its updateDesc argument always
	// does): the destination's document was made by a call that saw other
	// values there.
	Context bool
	// Unknown says the result may depend on what no update shows: the
	// call, or any call of the job since it was loaded, asked the clock
	// (Date.now(), Date(), new Date() without arguments) or for chance
	// (Math.random()).
	Unknown bool
}

// UnchangedBy says whether an update whose updateDescription is
// updateDesc cannot change what the call returned: the call depends on
// neither the context nor anything unknown, and no path of updatedFields,
// removedFields or truncatedArrays touches a field it read. A nil Reads, a
// nil or unreadable updateDesc: false.
func (r *Reads) UnchangedBy(updateDesc bson.Raw) bool {
	if r == nil || r.Context || r.Unknown || len(updateDesc) == 0 {
		return false
	}
	touched := false
	ok := eachUpdatedPath(updateDesc, func(path string) bool {
		touched = r.touches(path)
		return !touched
	})
	return ok && !touched
}

// eachUpdatedPath calls fn with every path of an updateDescription
// (updatedFields' keys, removedFields, truncatedArrays' field) until fn
// returns false; false when updateDesc is not one MongoDB writes.
func eachUpdatedPath(updateDesc bson.Raw, fn func(path string) bool) bool {
	v, err := updateDesc.LookupErr("updatedFields")
	if err != nil {
		return false // every update event has it, even empty
	}
	d, ok := v.DocumentOK()
	if !ok {
		return false
	}
	els, err := d.Elements()
	if err != nil {
		return false
	}
	for _, el := range els {
		if !fn(el.Key()) {
			return true
		}
	}
	for _, key := range []string{"removedFields", "truncatedArrays"} {
		v, err := updateDesc.LookupErr(key)
		if err != nil {
			continue
		}
		a, ok := v.ArrayOK()
		if !ok {
			return false
		}
		vals, err := a.Values()
		if err != nil {
			return false
		}
		for _, x := range vals {
			var p string
			if key == "removedFields" {
				p, ok = x.StringValueOK()
			} else {
				var f bson.RawValue
				if f, err = x.Document().LookupErr("field"); err == nil {
					p, ok = f.StringValueOK()
				} else {
					ok = false
				}
			}
			if !ok {
				return false
			}
			if !fn(p) {
				return true
			}
		}
	}
	return true
}

// touches says whether a change at path may change the result. A path
// of updateDescription is dotted ("a.b.0"); a top-level field may itself
// hold a dot (MongoDB 5.0 allows it), and the path does not say which
// (only disambiguatedPaths, with showExpandedEvents, would): so every
// dotted prefix ("a", "a.b", "a.b.0") may be the top-level field it
// changed, and each is checked.
func (r *Reads) touches(path string) bool {
	for i := 0; ; {
		j := strings.IndexByte(path[i:], '.')
		top := path
		if j >= 0 {
			top = path[:i+j]
		}
		if r.read(top) {
			return true
		}
		if j < 0 {
			return false
		}
		i += j + 1
	}
}

// read says whether the call's result may depend on top-level field f.
func (r *Reads) read(f string) bool {
	if r.All {
		return !slices.Contains(r.Except, f)
	}
	return slices.Contains(r.Fields, f)
}

// callReads is what the call running on a vm reads of its document and
// ctx, while on (Job.tracks). The top-level lazyDoc of the call and the
// call's ctx report to it; it lives on the vm and is reused, call after
// call.
type callReads struct {
	on      bool
	all     bool
	context bool
	unknown bool
	lookups bool // read ctx.lookups
	fields  []string
	doc     *lazyDoc
}

// begin starts tracking a call whose document is doc (nil: stop).
func (r *callReads) begin(doc *lazyDoc) {
	r.on, r.all, r.context, r.unknown, r.lookups = doc != nil, false, false, false, false
	r.fields, r.doc = r.fields[:0], doc
	if doc != nil {
		doc.reads = r
	}
}

// field notes that the call asked for top-level field k.
func (r *callReads) field(k string) {
	if !r.on {
		return
	}
	if !slices.Contains(r.fields, k) {
		r.fields = append(r.fields, k)
	}
}

// everything notes that the result may depend on every field.
func (r *callReads) everything() {
	if r.on {
		r.all = true
	}
}

// result is what the call read, for Result.Reads; the job's own flag
// (any call's clock or chance) counts too. A lookup's matches depend on
// the document's localField: a call that read them (ctx.lookups, or the
// field the matches are set to) read that field too.
func (r *callReads) result(j *Job) *Reads {
	// The Reads and its fields in one allocation, for the few fields a
	// transform reads.
	var out *Reads
	if len(r.fields) <= len(readsWithFields{}.fields) {
		rf := &readsWithFields{}
		out = &rf.Reads
		out.Fields = append(rf.fields[:0:len(rf.fields)], r.fields...)
	} else {
		out = &Reads{Fields: slices.Clone(r.fields)}
	}
	out.All, out.Context, out.Unknown = r.all, r.context, r.unknown || j.det.seen()
	var keys []string // the localFields of the lookups read
	for _, l := range j.Lookups {
		if r.lookups || r.all || l.As != "" && slices.Contains(r.fields, l.As) {
			top, _, _ := strings.Cut(l.LocalField, ".")
			keys = append(keys, top)
			if !slices.Contains(out.Fields, top) {
				out.Fields = append(out.Fields, top)
			}
		}
	}
	if r.all && r.doc != nil {
		for _, e := range r.doc.entries {
			if e.deleted && !slices.Contains(r.fields, e.key) && !slices.Contains(keys, e.key) {
				out.Except = append(out.Except, e.key)
			}
		}
	}
	r.on, r.doc = false, nil
	return out
}

// readsWithFields holds a Reads and room for its fields.
type readsWithFields struct {
	Reads
	fields [10]string
}

// determinism is a job's memory of its transform asking for the clock or
// chance: once any call (or the module's own top-level code) has, none of
// the job's updates is judged unchanged again, for as long as the job is
// loaded. A single call that did not ask would be safe to judge on its
// own (the same reads take the same path), but a transform that has asked
// once may keep what it got in module state and put it in later results
// (a cache filled on the first call, a counter), which no read shows; and
// such a transform has shown that its output is not a function of the
// document. The job keeps its flag through a reload that changes only
// comments (the same Job runs on); a changed transform is a new Job, which
// a reindex rebuilds everything with anyway.
type determinism struct {
	asked atomic.Bool
}

func (d *determinism) seen() bool { return d != nil && d.asked.Load() }

// nondeterministic is called by the wrapped Date and Math.random (on the
// vm's goroutine): the running call, and the job from now on, depend on
// what no update shows.
func (v *vm) nondeterministic(what string) {
	v.reads.unknown = true
	if v.det != nil && v.det.asked.CompareAndSwap(false, true) && v.log != nil {
		v.log.Info("the transform asked for "+what+": its results are not a function of the document, so every update is sent (skipUnchanged has no effect on this job until its file changes)", "call", what)
	}
}

// chanceSrc wraps the built-ins whose answers no document holds (the
// clock, Math.random) so that a call of one is seen (mark). Date stays
// the same class for everything else: the same prototype (instanceof,
// constructor), statics, name and length; new Date(x), Date.UTC and
// Date.parse are functions of their arguments and are not marked.
// performance.now and crypto.getRandomValues do not exist in the
// runtime.
const chanceSrc = `(function (mark) {
"use strict";
var D = Date, clock = D.now, chance = Math.random, construct = Reflect.construct;
var W = function Date() {
	if (new.target === undefined) { mark("Date()"); return D(); }
	if (arguments.length === 0) mark("new Date()");
	return construct(D, arguments, new.target);
};
Object.defineProperty(W, "length", {value: 7});
Object.defineProperty(W, "prototype", {value: D.prototype, writable: false, enumerable: false, configurable: false});
Object.defineProperty(D.prototype, "constructor", {value: W, writable: true, enumerable: false, configurable: true});
Object.defineProperty(W, "now", {value: function now() { mark("Date.now()"); return clock(); }, writable: true, enumerable: false, configurable: true});
Object.defineProperty(W, "parse", {value: D.parse, writable: true, enumerable: false, configurable: true});
Object.defineProperty(W, "UTC", {value: D.UTC, writable: true, enumerable: false, configurable: true});
Object.defineProperty(Math, "random", {value: function random() { mark("Math.random()"); return chance(); }, writable: true, enumerable: false, configurable: true});
Object.defineProperty(globalThis, "Date", {value: W, writable: true, enumerable: false, configurable: true});
})`

var chanceProgram = goja.MustCompile("meilistream:chance", chanceSrc, true)

// watchChance installs chanceSrc in v's runtime (before the module runs:
// its top-level code asking the clock counts too).
func (v *vm) watchChance() error {
	fn, err := v.rt.RunProgram(chanceProgram)
	if err != nil {
		return err
	}
	f, _ := goja.AssertFunction(fn)
	mark := func(call goja.FunctionCall) goja.Value {
		v.nondeterministic(call.Argument(0).String())
		return goja.Undefined()
	}
	_, err = f(goja.Undefined(), v.rt.ToValue(mark))
	return err
}

// seesArgument says whether the function fn (a monstache-style transform)
// can see its argument number n (from 0): it declares that many
// parameters or a rest parameter, or may reach `arguments` (or eval,
// which can). What cannot be told (a bound or native function, a source
// that does not parse on its own) can.
func seesArgument(fn goja.Value, n int) bool {
	o, ok := fn.(*goja.Object)
	if !ok {
		return true
	}
	src := o.String()
	if strings.Contains(src, "[native code]") || strings.Contains(src, "arguments") || strings.Contains(src, "eval") {
		return true
	}
	params, ok := parameters(src)
	if !ok {
		// goja cuts the source it keeps of an arrow function with a
		// parenthesised body short of its last ')': its parameters are
		// read from what comes before the first "=>".
		if i := strings.Index(src, "=>"); i >= 0 {
			params, ok = parameters(src[:i] + "=> 0")
		}
	}
	return !ok || params.Rest != nil || len(params.List) > n
}

// parameters parses src, a function's source, for its parameters.
func parameters(src string) (*ast.ParameterList, bool) {
	prog, err := parser.ParseFile(nil, "", "("+src+")", 0, parser.WithDisableSourceMaps)
	if err != nil || len(prog.Body) != 1 {
		return nil, false
	}
	st, ok := prog.Body[0].(*ast.ExpressionStatement)
	if !ok {
		return nil, false
	}
	var params *ast.ParameterList
	switch f := st.Expression.(type) {
	case *ast.FunctionLiteral:
		params = f.ParameterList
	case *ast.ArrowFunctionLiteral:
		params = f.ParameterList
	}
	return params, params != nil
}
