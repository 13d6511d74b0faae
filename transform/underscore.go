package transform

import (
	_ "embed"
	"errors"
	"regexp"
	"sort"
	"strings"

	"github.com/dop251/goja"
)

// underscoreSrc is Underscore.js 1.4.4, byte for byte the underscore.js of
// its npm package (MIT, LICENSE.underscore beside it): the version
// monstache's JavaScript runtime bundles (github.com/robertkrimen/otto's
// underscore package at the commit rwynn/monstache's go.mod pins), so a
// monstache script's `_` calls behave as they did there.
//
//go:embed underscore.js
var underscoreSrc string

// underscorePrefix and underscoreSuffix make the library a function of an
// exports object: Underscore then takes its CommonJS path (exports._ = _)
// and never writes the global object, and `this`, its `root`, is an object
// of its own (so _.noConflict touches nothing else). The prefix is on the
// library's first line, so its line numbers stay its own.
//
// The functions that need a timer are replaced by ones that say so: a
// transform has no setTimeout, and _.delay, _.defer, _.throttle and
// _.debounce would otherwise fail later with "setTimeout is not defined",
// or, for _.throttle's first call, seem to work. 1.4.4 has no _.now.
const (
	underscorePrefix = "(function (exports) {"
	underscoreSuffix = `
;(function (_) {
	function noTimer(name) {
		return function () {
			throw new Error("_." + name + " needs a timer (setTimeout), and a transform has none: it is a pure function of one document");
		};
	}
	_.delay = noTimer("delay");
	_.defer = noTimer("defer");
	_.throttle = noTimer("throttle");
	_.debounce = noTimer("debounce");
})(exports._);
})`
)

// underscoreProgram is compiled once per process; each runtime that reads
// `_` runs it once (see vm.underscore).
var underscoreProgram = goja.MustCompile(underscoreFile, underscorePrefix+underscoreSrc+underscoreSuffix, false)

// underscoreFile is the file name the library's frames carry in a stack:
// no transform file has it (they all end in .js), so a job named
// underscore is still its own file.
const underscoreFile = "underscore.js (bundled)"

// underscoreDef matches a line of the library that defines one of its
// functions at the top of its module (`  _.reduce = _.foldl = function`,
// `  var each = _.each = _.forEach = function`): the first name is the
// one its documentation uses.
var underscoreDef = regexp.MustCompile(`^  (?:var \w+ = )?_\.(\w+) *=`)

// underscoreDefs are the lines (1-based, as a stack's positions) where
// the library defines each function, in order; underscoreLines is how
// many lines the library has.
var underscoreDefs, underscoreLines = func() (defs []underscoreFunc, n int) {
	lines := strings.Split(underscoreSrc, "\n")
	for i, l := range lines {
		if m := underscoreDef.FindStringSubmatch(l); m != nil {
			defs = append(defs, underscoreFunc{line: i + 1, name: m[1]})
		}
	}
	return defs, len(lines)
}()

type underscoreFunc struct {
	line int
	name string
}

// underscoreFuncAt names the library's function holding line ("_.reduce"),
// or "" outside them. Each of its functions and the helpers they use
// follow their definition line, so the nearest definition at or above the
// line is the function (or the one a helper serves).
func underscoreFuncAt(line int) string {
	if line > underscoreLines {
		return ""
	}
	i := sort.Search(len(underscoreDefs), func(i int) bool { return underscoreDefs[i].line > line })
	if i == 0 {
		return ""
	}
	return "_." + underscoreDefs[i-1].name
}

// installUnderscore defines the global `_` of v's runtime as an accessor
// that loads Underscore the first time it is read: most transforms never
// use it, and a runtime is made for each worker and again after every
// interrupt, so loading it up front would cost every runtime what only a
// few need. Reading it replaces the accessor with a plain global holding
// the library; assigning to `_` (a script with an Underscore of its own)
// does the same with the value assigned.
//
// With now (the file names `_`), it is loaded at once, while the runtime
// is made and under the load's time limit: not in the first call, whose
// time limit (a few milliseconds, for some jobs) would then also pay for
// it. A file reaching `_` without naming it (globalThis["_"]) still gets
// it when it first reads it.
func (v *vm) installUnderscore(now bool) error {
	rt := v.rt
	global := rt.GlobalObject()
	get := rt.ToValue(func(goja.FunctionCall) goja.Value { return v.underscore() })
	set := rt.ToValue(func(c goja.FunctionCall) goja.Value {
		v.defineUnderscore(c.Argument(0))
		return goja.Undefined()
	})
	if err := global.DefineAccessorProperty("_", get, set, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
		return err
	}
	if now {
		v.underscore()
	}
	return nil
}

// underscoreName matches `_` as a word of a source: an identifier made of
// that one character. It may also match inside a string or a comment,
// which only loads Underscore for nothing.
var underscoreName = regexp.MustCompile(`(^|[^\w$\x{80}-\x{10FFFF}])_($|[^\w$\x{80}-\x{10FFFF}])`)

// namesUnderscore says whether a transform file names `_`.
func namesUnderscore(src []byte) bool { return underscoreName.Match(src) }

// underscore loads Underscore into v's runtime (on first use) and returns
// it. A throw or an interrupt while it loads goes on to the caller's
// JavaScript.
func (v *vm) underscore() goja.Value {
	rt := v.rt
	wrapper, err := rt.RunProgram(underscoreProgram)
	if err != nil {
		panic(err)
	}
	fn, ok := goja.AssertFunction(wrapper)
	if !ok {
		panic(rt.NewTypeError("underscore.js: not a function"))
	}
	exports := rt.NewObject()
	if _, err := fn(rt.NewObject(), exports); err != nil {
		var ie *goja.InterruptedError
		var ex *goja.Exception
		switch {
		case errors.As(err, &ie):
			panic(ie)
		case errors.As(err, &ex):
			panic(ex)
		}
		panic(rt.NewGoError(err))
	}
	us := exports.Get("_")
	v.defineUnderscore(us)
	return us
}

// defineUnderscore makes `_` a plain global holding val, as a script's
// own `_ = ...` would.
func (v *vm) defineUnderscore(val goja.Value) {
	if err := v.rt.GlobalObject().DefineDataProperty("_", val, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
		panic(err)
	}
}
