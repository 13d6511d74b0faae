package transform

import (
	_ "embed"
	"strconv"

	"github.com/dlclark/regexp2/v2"
	"github.com/dop251/goja"
)

// A transform is code of the operator's, but what it works on is not:
// a document can hold a string of millions of '[' for JSON.parse, arrays
// that a transform nests or joins, a string that makes a regular
// expression backtrack for minutes. goja's built-in functions are Go code:
// where they recurse, the Go stack grows with the input until the process
// dies of "fatal error: stack overflow", which no recover catches; where
// they loop or allocate, Interrupt (the time limit) does not reach them,
// and one call can allocate all the memory there is ("fatal error: out of
// memory", from Math.max.apply(null, {length: 2**32-1})). So every
// runtime replaces or guards the built-ins that can be made to do that,
// before the module runs, with these limits:
const (
	// maxNativeDepth bounds the nesting a built-in follows: the text
	// JSON.parse reads, what JSON.stringify, join, toString and flat
	// walk, chains of proxies and bound functions, prototype chains made
	// with Object.create, Object.setPrototypeOf and __proto__. At about
	// 2 KB of Go stack per level, that is a few MB, far from Go's
	// 1 GB default (runtime/debug.SetMaxStack).
	maxNativeDepth = 1000
	// maxNativeLength bounds the length of an array (or array-like) a
	// built-in loops over or copies: a document's arrays are far
	// shorter (16 MB of BSON).
	maxNativeLength = 1 << 22
	// maxNativeString bounds, in UTF-16 units, the string a built-in
	// builds (JSON.stringify, join, repeat, padStart, padEnd) and the
	// text JSON.parse reads.
	maxNativeString = 1 << 25
	// maxNativeBytes bounds the memory of an ArrayBuffer or typed array.
	maxNativeBytes = 64 << 20
	// maxCodeSource bounds the source given to eval and the Function
	// constructors: goja's parser recurses per nesting level, up to
	// about 2 KB of Go stack for each byte of "((((...".
	maxCodeSource = 16 << 10
	// maxFileSource bounds a transform file, for the same reason.
	maxFileSource = 128 << 10
)

func init() {
	// goja runs regular expressions that RE2 cannot (lookaround,
	// backreferences) on regexp2, which backtracks and which goja gives no
	// match timeout: a match can run for minutes on a short string, out
	// of Interrupt's reach. This sets one for every regexp2 expression
	// compiled from now on (only goja uses regexp2 here). goja takes a
	// match that times out for "no match", so the limit must be at least
	// the longest a call may run: a call whose regular expression gave up
	// has then run past its own limit, and its result is not used (see
	// attempt). The abandoned call's goroutine ends by this limit.
	regexp2.DefaultMatchTimeout = MaxTimeout
}

// harden installs the guarded built-ins in v's runtime (before any user
// code runs, so the originals stay out of its reach).
func (v *vm) harden() error {
	rt := v.rt
	v.rangeErrCtor = rt.Get("RangeError")
	isArray, _ := rt.Get("Array").ToObject(rt).Get("isArray").Export().(func(goja.FunctionCall) goja.Value)
	v.isArrayFn = isArray
	limits := rt.NewObject()
	for k, n := range map[string]int{"depth": maxNativeDepth, "length": maxNativeLength, "string": maxNativeString, "bytes": maxNativeBytes, "code": maxCodeSource} {
		_ = limits.Set(k, n)
	}
	fn, err := rt.RunProgram(hardenProgram)
	if err != nil {
		return err
	}
	f, _ := goja.AssertFunction(fn)
	if _, err := f(goja.Undefined(), limits); err != nil {
		return err
	}

	jsonObj := rt.Get("JSON").ToObject(rt)
	parse := native(jsonObj, "parse")
	v.method(jsonObj, "parse", 2, func(call goja.FunctionCall) goja.Value { return v.jsonParse(parse, call) })
	v.method(jsonObj, "stringify", 3, v.jsonStringify)

	array := rt.Get("Array").ToObject(rt)
	arrayProto := array.Get("prototype").ToObject(rt)
	v.method(arrayProto, "join", 1, v.arrayJoin)
	v.method(arrayProto, "toString", 0, v.arrayToString)
	v.method(arrayProto, "toLocaleString", 0, v.arrayToLocaleString)
	typedProto := rt.Get("Uint8Array").ToObject(rt).Prototype().Get("prototype").ToObject(rt)
	v.method(typedProto, "join", 1, v.arrayJoin)
	v.method(typedProto, "toString", 0, v.arrayToString)
	v.method(typedProto, "toLocaleString", 0, v.arrayToLocaleString)
	for _, name := range []string{"copyWithin", "every", "fill", "filter", "forEach", "includes", "indexOf",
		"lastIndexOf", "map", "reduce", "reduceRight", "reverse", "shift", "slice", "some", "sort", "splice",
		"unshift", "with", "toReversed", "toSorted", "toSpliced"} {
		v.guardLength(arrayProto, name, -1)
	}
	v.guardConcat(arrayProto)
	v.guardLength(array, "from", 0)
	v.guardLength(rt.Get("Function").ToObject(rt).Get("prototype").ToObject(rt), "apply", 1)
	reflect := rt.Get("Reflect").ToObject(rt)
	v.guardLength(reflect, "apply", 2)
	v.guardLength(reflect, "construct", 1)

	stringProto := rt.Get("String").ToObject(rt).Get("prototype").ToObject(rt)
	v.guardRepeat(stringProto)
	v.guardPad(stringProto, "padStart")
	v.guardPad(stringProto, "padEnd")
	return nil
}

// native is the Go function behind o[name], a built-in.
func native(o *goja.Object, name string) func(goja.FunctionCall) goja.Value {
	f, _ := o.Get(name).Export().(func(goja.FunctionCall) goja.Value)
	return f
}

// method sets o[name] to fn as built-ins are: writable, configurable, not
// enumerable, with the name and length JavaScript shows.
func (v *vm) method(o *goja.Object, name string, length int, fn func(goja.FunctionCall) goja.Value) {
	f := v.rt.ToValue(fn).(*goja.Object)
	_ = f.DefineDataProperty("name", v.rt.ToValue(name), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	_ = f.DefineDataProperty("length", v.rt.ToValue(length), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE)
	_ = o.DefineDataProperty(name, f, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE)
}

// throwRange throws a RangeError with msg.
func (v *vm) throwRange(msg string) {
	e, err := v.rt.New(v.rangeErrCtor, v.rt.ToValue(msg))
	if err != nil {
		panic(err)
	}
	panic(e)
}

// enterNative counts one level of a built-in's recursion (JSON.stringify,
// join, a reviver's walk), across all of them: they can call each other
// through toJSON, toString and revivers, so only their sum bounds the Go
// stack. Each enterNative is paired with a deferred leaveNative.
func (v *vm) enterNative(what string) {
	if v.nativeDepth >= maxNativeDepth {
		v.throwRange(what + " more than " + strconv.Itoa(maxNativeDepth) + " levels deep")
	}
	v.nativeDepth++
	v.checkStop()
}

func (v *vm) leaveNative() { v.nativeDepth-- }

// checkStop throws once the call was interrupted: a built-in's loop
// checks it, since Interrupt itself only acts between two instructions.
func (v *vm) checkStop() {
	if v.stop.Load() {
		v.throwRange("interrupted (the time limit passed)")
	}
}

// lengthOf is ToLength(o.length), as a float (it may exceed int64).
func lengthOf(o *goja.Object) float64 {
	l := o.Get("length")
	if l == nil {
		return 0
	}
	f := l.ToFloat()
	if !(f > 0) {
		return 0
	}
	return f
}

func (v *vm) isArray(val goja.Value) bool {
	return v.isArrayFn(goja.FunctionCall{Arguments: []goja.Value{val}}).ToBoolean()
}

// guardLength makes o[name] refuse to work on an array-like longer than
// maxNativeLength: the argument at arg, or `this` when arg is -1.
func (v *vm) guardLength(o *goja.Object, name string, arg int) {
	orig := native(o, name)
	if orig == nil {
		return
	}
	length := int(o.Get(name).ToObject(v.rt).Get("length").ToInteger())
	v.method(o, name, length, func(call goja.FunctionCall) goja.Value {
		target := call.This
		if arg >= 0 {
			target = call.Argument(arg)
		}
		if t, ok := target.(*goja.Object); ok {
			if arg == 0 { // Array.from: an iterable is read through its iterator
				if it := t.GetSymbol(goja.SymIterator); it != nil && !goja.IsUndefined(it) && !goja.IsNull(it) {
					return orig(call)
				}
			}
			if lengthOf(t) > maxNativeLength {
				v.throwRange(name + ": an array-like longer than " + strconv.Itoa(maxNativeLength) + " elements")
			}
		}
		return orig(call)
	})
}

// guardConcat is guardLength for concat: `this` and every argument that
// concat spreads.
func (v *vm) guardConcat(proto *goja.Object) {
	orig := native(proto, "concat")
	v.method(proto, "concat", 1, func(call goja.FunctionCall) goja.Value {
		total := 0.0
		add := func(val goja.Value) {
			o, ok := val.(*goja.Object)
			if !ok {
				return
			}
			spread := v.isArray(o)
			if s := o.GetSymbol(goja.SymIsConcatSpreadable); s != nil && !goja.IsUndefined(s) {
				spread = s.ToBoolean()
			}
			if spread {
				total += lengthOf(o)
			}
		}
		add(call.This)
		for _, a := range call.Arguments {
			add(a)
		}
		if total > maxNativeLength {
			v.throwRange("concat: a result longer than " + strconv.Itoa(maxNativeLength) + " elements")
		}
		return orig(call)
	})
}

// stringLength is the length in UTF-16 units of a string value.
func stringLength(s goja.Value) int {
	if gs, ok := s.(goja.String); ok {
		return gs.Length()
	}
	return len(s.String())
}

func (v *vm) guardRepeat(proto *goja.Object) {
	orig := native(proto, "repeat")
	v.method(proto, "repeat", 1, func(call goja.FunctionCall) goja.Value {
		if goja.IsUndefined(call.This) || goja.IsNull(call.This) {
			return orig(call)
		}
		s := call.This.ToString()
		n := call.Argument(0).ToFloat()
		if n > 0 && float64(stringLength(s))*n > maxNativeString {
			v.throwRange("repeat: a string longer than " + strconv.Itoa(maxNativeString) + " characters")
		}
		return orig(goja.FunctionCall{This: s, Arguments: call.Arguments})
	})
}

func (v *vm) guardPad(proto *goja.Object, name string) {
	orig := native(proto, name)
	v.method(proto, name, 1, func(call goja.FunctionCall) goja.Value {
		if n := call.Argument(0).ToFloat(); n > maxNativeString {
			v.throwRange(name + ": a string longer than " + strconv.Itoa(maxNativeString) + " characters")
		}
		return orig(call)
	})
}

// hardenSrc guards the built-ins best guarded in JavaScript: constructors
// (a Proxy keeps their prototype, name and instanceof), and flat. It
// captures every built-in it uses before the module can change them.
//
// harden.js is one function expression: harden calls the program's value
// with the limits (L: depth, length, string, bytes, code).
//
//go:embed harden.js
var hardenSrc string

var hardenProgram = goja.MustCompile("meilistream:harden", hardenSrc, true)

// ---- JSON.parse ----

func (v *vm) jsonParse(parse func(goja.FunctionCall) goja.Value, call goja.FunctionCall) goja.Value {
	text := call.Argument(0).ToString()
	if stringLength(text) > maxNativeString {
		v.throwRange("JSON.parse: a text longer than " + strconv.Itoa(maxNativeString) + " characters")
	}
	if jsonTooDeep(text.String(), maxNativeDepth) {
		v.throwRange("JSON.parse: the text nests arrays and objects more than " + strconv.Itoa(maxNativeDepth) + " levels deep")
	}
	value := parse(goja.FunctionCall{This: call.This, Arguments: []goja.Value{text}})
	reviver, ok := goja.AssertFunction(call.Argument(1))
	if !ok {
		return value
	}
	root := v.rt.NewObject()
	_ = root.Set("", value)
	return v.revive(reviver, root, "")
}

// jsonTooDeep reports whether the JSON text s nests arrays and objects
// more than limit levels (strings skipped); it reads s once, without
// recursion.
func jsonTooDeep(s string, limit int) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '{':
			depth++
			if depth > limit {
				return true
			}
		case ']', '}':
			depth--
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		}
	}
	return false
}

// revive is JSON.parse's InternalizeJSONProperty
// (https://tc39.es/ecma262/#sec-internalizejsonproperty), bounded: the
// reviver may hang deeper values on what it is given.
func (v *vm) revive(reviver goja.Callable, holder *goja.Object, key string) goja.Value {
	v.enterNative("JSON.parse: a reviver made values nest")
	defer v.leaveNative()
	val := holder.Get(key)
	if val == nil {
		val = goja.Undefined()
	}
	if o, ok := val.(*goja.Object); ok {
		var keys []string
		if v.isArray(o) {
			n := lengthOf(o)
			if n > maxNativeLength {
				v.throwRange("JSON.parse: a reviver made an array longer than " + strconv.Itoa(maxNativeLength) + " elements")
			}
			keys = make([]string, int(n))
			for i := range keys {
				keys[i] = strconv.Itoa(i)
			}
		} else {
			keys = o.Keys()
		}
		for _, k := range keys {
			nv := v.revive(reviver, o, k)
			if goja.IsUndefined(nv) {
				_ = o.Delete(k)
			} else {
				_ = o.DefineDataProperty(k, nv, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
			}
		}
	}
	ret, err := reviver(holder, v.rt.ToValue(key), val)
	if err != nil {
		panic(err)
	}
	return ret
}

// ---- Array.prototype.join, toString, toLocaleString ----

// enterJoin starts a join of o: false for a cycle (which joins as "", as
// in goja and the browsers); a RangeError beyond maxNativeDepth.
func (v *vm) enterJoin(o *goja.Object) bool {
	for _, s := range v.joining {
		if s.SameAs(o) {
			return false
		}
	}
	v.enterNative("join: arrays nested")
	v.joining = append(v.joining, o)
	return true
}

func (v *vm) leaveJoin() {
	v.joining = v.joining[:len(v.joining)-1]
	v.leaveNative()
}

// joinLength is the length of o to join, refused beyond maxNativeLength.
func (v *vm) joinLength(o *goja.Object, what string) int {
	n := lengthOf(o)
	if n > maxNativeLength {
		v.throwRange(what + ": an array-like longer than " + strconv.Itoa(maxNativeLength) + " elements")
	}
	return int(n)
}

func (v *vm) arrayJoin(call goja.FunctionCall) goja.Value {
	o := call.This.ToObject(v.rt)
	if !v.enterJoin(o) {
		return v.rt.ToValue("")
	}
	defer v.leaveJoin()
	n := v.joinLength(o, "join")
	var sep goja.Value = v.rt.ToValue(",")
	if s := call.Argument(0); !goja.IsUndefined(s) {
		sep = s.ToString()
	}
	sepLen := stringLength(sep)
	sepStr, _ := sep.(goja.String)
	var b goja.StringBuilder
	size := 0
	for i := 0; i < n; i++ {
		if i > 0 {
			if sepStr != nil {
				b.WriteString(sepStr)
			} else {
				b.WriteUTF8String(sep.String())
			}
			size += sepLen
		}
		el := o.Get(strconv.Itoa(i))
		if el != nil && !goja.IsUndefined(el) && !goja.IsNull(el) {
			size += v.writeString(&b, el.ToString())
		}
		if size > maxNativeString {
			v.throwRange("join: a string longer than " + strconv.Itoa(maxNativeString) + " characters")
		}
		if i&1023 == 1023 {
			v.checkStop()
		}
	}
	return b.String()
}

// writeString appends s to b and returns its length.
func (v *vm) writeString(b *goja.StringBuilder, s goja.Value) int {
	if gs, ok := s.(goja.String); ok {
		b.WriteString(gs)
		return gs.Length()
	}
	str := s.String()
	b.WriteUTF8String(str)
	return len(str)
}

func (v *vm) arrayToString(call goja.FunctionCall) goja.Value {
	o := call.This.ToObject(v.rt)
	if join, ok := goja.AssertFunction(o.Get("join")); ok {
		ret, err := join(o)
		if err != nil {
			panic(err)
		}
		return ret
	}
	ts, _ := goja.AssertFunction(v.objectProto.Get("toString"))
	ret, err := ts(o)
	if err != nil {
		panic(err)
	}
	return ret
}

func (v *vm) arrayToLocaleString(call goja.FunctionCall) goja.Value {
	o := call.This.ToObject(v.rt)
	if !v.enterJoin(o) {
		return v.rt.ToValue("")
	}
	defer v.leaveJoin()
	n := v.joinLength(o, "toLocaleString")
	var b goja.StringBuilder
	size := 0
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteUTF8String(",")
			size++
		}
		el := o.Get(strconv.Itoa(i))
		if el != nil && !goja.IsUndefined(el) && !goja.IsNull(el) {
			eo := el.ToObject(v.rt)
			f, ok := goja.AssertFunction(eo.Get("toLocaleString"))
			if !ok {
				panic(v.rt.NewTypeError("toLocaleString: an element's toLocaleString is not a function"))
			}
			s, err := f(el)
			if err != nil {
				panic(err)
			}
			size += v.writeString(&b, s.ToString())
		}
		if size > maxNativeString {
			v.throwRange("toLocaleString: a string longer than " + strconv.Itoa(maxNativeString) + " characters")
		}
	}
	return b.String()
}
