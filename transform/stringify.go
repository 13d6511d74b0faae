package transform

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// jsonStringify is JSON.stringify (https://tc39.es/ecma262/#sec-json.stringify)
// as goja has it, bounded: at most maxNativeDepth levels of nesting and
// maxNativeString characters of output, and it stops when the call is
// interrupted. goja's own recurses in Go as deep as the value nests (a
// crash of the process), checks for cycles in time quadratic in the depth,
// and writes out a value that shares a sub-array at every level
// (a = [a, a], sixty times) for ever.
func (v *vm) jsonStringify(call goja.FunctionCall) goja.Value {
	s := stringifier{v: v}
	if r, ok := call.Argument(1).(*goja.Object); ok {
		if f, ok := goja.AssertFunction(r); ok {
			s.replacer = f
		} else if v.isArray(r) {
			s.propertyList = v.propertyList(r)
			s.hasList = true
		}
	}
	s.gap = gapOf(call.Argument(2))
	holder := v.rt.NewObject()
	_ = holder.Set("", call.Argument(0))
	if !s.property("", holder) {
		return goja.Undefined()
	}
	return v.rt.ToValue(string(s.buf))
}

// stringifyUpTo is JSON.stringify(val) for Go callers (console), cut
// after limit bytes (marked "…"); ok is false when it gives undefined.
func (v *vm) stringifyUpTo(val goja.Value, limit int) (out string, ok bool) {
	s := stringifier{v: v, limit: limit}
	defer func() {
		if r := recover(); r != nil {
			if r != errStringifyCut {
				panic(r)
			}
			out, ok = clipText(string(s.buf), limit-1), true
		}
	}()
	holder := v.rt.NewObject()
	_ = holder.Set("", val)
	if !s.property("", holder) {
		return "", false
	}
	return string(s.buf), true
}

// errStringifyCut stops a stringifyUpTo that reached its limit.
var errStringifyCut = errors.New("stringify cut")

type stringifier struct {
	v            *vm
	replacer     goja.Callable
	propertyList []string
	hasList      bool
	gap          string
	indent       string
	buf          []byte
	nodes        int
	stack        []*goja.Object // the objects being written, for cycles
	// limit, when set, cuts the output there (stringifyUpTo) instead of
	// refusing it beyond maxNativeString.
	limit int
}

// propertyList reads a replacer array: its strings and numbers (boxed
// too), each once, in order.
func (v *vm) propertyList(r *goja.Object) []string {
	n := lengthOf(r)
	if n > maxNativeLength {
		v.throwRange("JSON.stringify: a replacer array longer than " + strconv.Itoa(maxNativeLength) + " elements")
	}
	seen := map[string]bool{}
	list := []string{}
	for i := 0; i < int(n); i++ {
		el := r.Get(strconv.Itoa(i))
		var name string
		switch {
		case el == nil:
			continue
		case isPrimitiveString(el), isPrimitiveNumber(el):
			name = el.String()
		default:
			o, ok := el.(*goja.Object)
			if !ok || (o.ClassName() != "String" && o.ClassName() != "Number") {
				continue
			}
			name = o.ToString().String()
		}
		if !seen[name] {
			seen[name] = true
			list = append(list, name)
		}
	}
	return list
}

func isPrimitiveString(v goja.Value) bool {
	_, ok := v.(goja.String)
	return ok
}

func isPrimitiveNumber(v goja.Value) bool {
	if _, ok := v.(*goja.Object); ok {
		return false
	}
	switch v.ExportType() {
	case typeInt64, typeFloat:
		return true
	}
	return false
}

// gapOf is the indentation JSON.stringify's space argument asks for.
func gapOf(space goja.Value) string {
	if o, ok := space.(*goja.Object); ok {
		switch o.ClassName() {
		case "Number":
			space = o.ToNumber()
		case "String":
			space = o.ToString()
		}
	}
	if isPrimitiveNumber(space) {
		n := space.ToFloat()
		if n >= 1 {
			return strings.Repeat(" ", int(math.Min(10, n)))
		}
		return ""
	}
	if isPrimitiveString(space) {
		s := space.(goja.String)
		if s.Length() > 10 {
			s = s.Substring(0, 10)
		}
		return s.String()
	}
	return ""
}

func (s *stringifier) write(p string) {
	s.buf = append(s.buf, p...)
	s.checkSize(0)
}

// checkSize refuses (or cuts) an output that n more bytes would take
// past the limit.
func (s *stringifier) checkSize(n int) {
	if s.limit > 0 {
		if len(s.buf)+n > s.limit {
			panic(errStringifyCut)
		}
		return
	}
	if len(s.buf)+n > maxNativeString {
		s.v.throwRange("JSON.stringify: a string longer than " + strconv.Itoa(maxNativeString) + " characters")
	}
}

// property writes holder[key] (SerializeJSONProperty); false means
// undefined (nothing written).
func (s *stringifier) property(key string, holder *goja.Object) bool {
	v := s.v
	s.nodes++
	if s.nodes&1023 == 0 {
		v.checkStop()
	}
	value := holder.Get(key)
	if value == nil {
		value = goja.Undefined()
	}
	if isObjectOrBigInt(value) {
		if toJSON, ok := goja.AssertFunction(value.ToObject(v.rt).Get("toJSON")); ok {
			var err error
			if value, err = toJSON(value, v.rt.ToValue(key)); err != nil {
				panic(err)
			}
		}
	}
	if s.replacer != nil {
		var err error
		if value, err = s.replacer(holder, v.rt.ToValue(key), value); err != nil {
			panic(err)
		}
	}
	if o, ok := value.(*goja.Object); ok {
		switch o.ClassName() {
		case "Number":
			value = o.ToNumber()
		case "String":
			value = o.ToString()
		case "Boolean":
			if b, ok := o.Export().(bool); ok {
				value = v.rt.ToValue(b)
			}
		case "BigInt":
			panic(v.rt.NewTypeError("Do not know how to serialize a BigInt"))
		}
	}
	switch {
	case value == nil || goja.IsUndefined(value):
		return false
	case goja.IsNull(value):
		s.write("null")
		return true
	}
	if o, ok := value.(*goja.Object); ok {
		if o.ClassName() == "RawJSON" {
			s.write(o.Get("rawJSON").String())
			return true
		}
		if _, callable := goja.AssertFunction(o); callable {
			return false
		}
		s.enter(o)
		defer s.leave()
		if v.isArray(o) {
			s.array(o)
		} else {
			s.object(o)
		}
		return true
	}
	if _, ok := value.(*goja.Symbol); ok {
		return false
	}
	if str, ok := value.(goja.String); ok {
		s.quote(str)
		return true
	}
	switch value.ExportType() {
	case typeBool:
		s.write(strconv.FormatBool(value.ToBoolean()))
	case typeInt64:
		s.write(value.String())
	case typeFloat:
		if f := value.ToFloat(); math.IsNaN(f) || math.IsInf(f, 0) {
			s.write("null")
		} else {
			s.write(value.String())
		}
	case typeBigInt:
		panic(v.rt.NewTypeError("Do not know how to serialize a BigInt"))
	default:
		return false
	}
	return true
}

func isObjectOrBigInt(v goja.Value) bool {
	if _, ok := v.(*goja.Object); ok {
		return true
	}
	_, ok := v.Export().(*big.Int)
	return ok
}

// enter pushes o on the stack of values being written: a cycle is
// goja's TypeError, nesting beyond maxNativeDepth a RangeError.
func (s *stringifier) enter(o *goja.Object) {
	v := s.v
	for _, x := range s.stack {
		if x.SameAs(o) {
			panic(v.rt.NewTypeError("Converting circular structure to JSON"))
		}
	}
	v.enterNative("JSON.stringify: a value nested")
	s.stack = append(s.stack, o)
}

func (s *stringifier) leave() {
	s.stack = s.stack[:len(s.stack)-1]
	s.v.leaveNative()
}

func (s *stringifier) open(b string) (stepback, sep string) {
	s.write(b)
	if s.gap == "" {
		return "", ","
	}
	stepback = s.indent
	s.indent += s.gap
	return stepback, ",\n" + s.indent
}

func (s *stringifier) array(o *goja.Object) {
	n := lengthOf(o)
	if n > maxNativeLength {
		s.v.throwRange("JSON.stringify: an array longer than " + strconv.Itoa(maxNativeLength) + " elements")
	}
	if n == 0 {
		s.write("[]")
		return
	}
	stepback, sep := s.open("[")
	if s.gap != "" {
		s.write("\n" + s.indent)
	}
	for i := 0; i < int(n); i++ {
		if i > 0 {
			s.write(sep)
		}
		if !s.property(strconv.Itoa(i), o) {
			s.write("null")
		}
	}
	if s.gap != "" {
		s.write("\n" + stepback)
		s.indent = stepback
	}
	s.write("]")
}

func (s *stringifier) object(o *goja.Object) {
	keys := s.propertyList
	if !s.hasList {
		keys = o.Keys()
	}
	stepback, sep := s.open("{")
	mark := len(s.buf)
	empty := true
	for _, k := range keys {
		at := len(s.buf)
		if !empty {
			s.write(sep)
		} else if s.gap != "" {
			s.write("\n" + s.indent)
		}
		s.quote(s.v.rt.ToValue(k).(goja.String))
		if s.gap != "" {
			s.write(": ")
		} else {
			s.write(":")
		}
		if s.property(k, o) {
			empty = false
		} else {
			s.buf = s.buf[:at]
		}
	}
	if empty {
		s.buf = s.buf[:mark]
	} else if s.gap != "" {
		s.write("\n" + stepback)
	}
	s.indent = stepback
	s.write("}")
}

// quote writes str as a JSON string (QuoteJSONString): lone surrogates
// escaped, as the "well-formed JSON.stringify" of ES2019 does.
func (s *stringifier) quote(str goja.String) {
	n := str.Length()
	if s.limit > 0 && n > s.limit {
		n = s.limit // the rest would be cut anyway
	}
	s.checkSize(n)
	s.buf = append(s.buf, '"')
	for i := 0; i < n; i++ {
		c := str.CharAt(i)
		switch {
		case c == '"' || c == '\\':
			s.buf = append(s.buf, '\\', byte(c))
		case c == '\b':
			s.buf = append(s.buf, '\\', 'b')
		case c == '\t':
			s.buf = append(s.buf, '\\', 't')
		case c == '\n':
			s.buf = append(s.buf, '\\', 'n')
		case c == '\f':
			s.buf = append(s.buf, '\\', 'f')
		case c == '\r':
			s.buf = append(s.buf, '\\', 'r')
		case c < 0x20:
			s.buf = append(s.buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		case c < utf8.RuneSelf:
			s.buf = append(s.buf, byte(c))
		case utf16.IsSurrogate(rune(c)):
			if c < 0xDC00 && i+1 < n {
				if d := str.CharAt(i + 1); d >= 0xDC00 && d <= 0xDFFF {
					s.buf = utf8.AppendRune(s.buf, utf16.DecodeRune(rune(c), rune(d)))
					i++
					continue
				}
			}
			s.buf = append(s.buf, '\\', 'u', hexDigits[c>>12], hexDigits[(c>>8)&0xF], hexDigits[(c>>4)&0xF], hexDigits[c&0xF])
		default:
			s.buf = utf8.AppendRune(s.buf, rune(c))
		}
	}
	s.buf = append(s.buf, '"')
	s.checkSize(0)
}
