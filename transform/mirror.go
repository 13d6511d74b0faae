package transform

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// mirrorConv turns a transform's result back into BSON for a replica. It
// walks the result beside the original document: where a value sits at the
// same path as an original value, the original's BSON type is kept when the
// value still fits it (an int64 stays int64, a double stays double, a symbol
// stays a symbol), so a transform that only drops fields writes every other
// field exactly as it was. New values follow the Node.js driver: an integer
// that fits int32 is int32, any other number a double, a BigInt an int64.
type mirrorConv struct {
	v     *vm
	job   *Job
	limit int
	path  []string
	seen  []*goja.Object
}

func (c *mirrorConv) fail(code errs.Code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if len(c.path) > 0 {
		msg = pathText(c.path) + ": " + msg
	}
	return &errs.Error{Code: code, Job: c.job.Name, Msg: msg}
}

// document builds the replica document: _id first, the original _id, and
// ID_MISMATCH if the result changed it.
func (c *mirrorConv) document(o *goja.Object, orig bson.Raw, idv bson.RawValue) (bson.Raw, error) {
	idx, dst := bsoncore.AppendDocumentStart(nil)
	dst = bsoncore.AppendValueElement(dst, "_id", bsoncore.Value{Type: bsoncore.Type(idv.Type), Data: idv.Value})
	hint := bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: orig}
	if jid := o.Get("_id"); jid != nil && !goja.IsUndefined(jid) {
		c.path = append(c.path, "_id")
		got, skip, err := c.value(nil, "_id", jid, bsoncore.Value{Type: bsoncore.Type(idv.Type), Data: idv.Value}, 1)
		if err != nil {
			return nil, err
		}
		c.path = c.path[:0]
		want := bsoncore.AppendValueElement(nil, "_id", bsoncore.Value{Type: bsoncore.Type(idv.Type), Data: idv.Value})
		if skip || !bytes.Equal(got, want) {
			return nil, errs.New(errs.IDMismatch, c.job.Name, "the transform changed _id (a mirror keeps the source _id)")
		}
	}
	dst, err := c.fields(dst, o, hint, 1, true)
	if err != nil {
		return nil, err
	}
	dst, err = bsoncore.AppendDocumentEnd(dst, idx)
	if err != nil {
		return nil, c.fail(errs.NotADocument, "%v", err)
	}
	if len(dst) > c.limit {
		c.path = c.path[:0]
		return nil, c.fail(errs.NotADocument, "the result is %d bytes of BSON, more than the limit of %d a mirror writes (the replica's maxBsonObjectSize)", len(dst), c.limit)
	}
	return dst, nil
}

// fields appends o's enumerable properties as elements.
func (c *mirrorConv) fields(dst []byte, o *goja.Object, hint bsoncore.Value, depth int, top bool) ([]byte, error) {
	if d := asLazy(o); d != nil {
		// Untouched fields are copied byte for byte.
		err := d.each(func(k string, jv goja.Value, el bsoncore.Element, raw bsoncore.Value, touched bool) error {
			if top && k == "_id" {
				return nil
			}
			if !touched {
				dst = append(dst, el...)
				return nil
			}
			c.path = append(c.path, k)
			if strings.IndexByte(k, 0) >= 0 {
				return c.fail(errs.NotADocument, "a key holding a NUL character")
			}
			el2, skip, err := c.value(dst, k, jv, raw, depth)
			if err != nil {
				return err
			}
			if !skip {
				dst = el2
			}
			c.path = c.path[:len(c.path)-1]
			return nil
		})
		if err != nil {
			return nil, errs.WithJob(c.job.Name, err)
		}
		if len(dst) > c.limit {
			c.path = c.path[:0]
			return nil, c.fail(errs.NotADocument, "the result is more than the limit of %d bytes of BSON a mirror writes (the replica's maxBsonObjectSize)", c.limit)
		}
		return dst, nil
	}
	var hdoc bsoncore.Document
	if hint.Type == bsoncore.TypeEmbeddedDocument {
		hdoc = hint.Data
	}
	for _, k := range o.Keys() {
		if top && k == "_id" {
			continue
		}
		if top && hdoc != nil {
			// The source's field of the same name decides the type
			// written (the hint): it is read.
			c.v.reads.field(k)
		}
		c.path = append(c.path, k)
		if strings.IndexByte(k, 0) >= 0 {
			return nil, c.fail(errs.NotADocument, "a key holding a NUL character")
		}
		var h bsoncore.Value
		if hdoc != nil {
			h, _ = hdoc.LookupErr(k)
		}
		var err error
		var skip bool
		var el []byte
		el, skip, err = c.value(dst, k, o.Get(k), h, depth)
		if err != nil {
			return nil, err
		}
		if !skip {
			dst = el
		}
		c.path = c.path[:len(c.path)-1]
		if len(dst) > c.limit {
			c.path = c.path[:0]
			return nil, c.fail(errs.NotADocument, "the result is more than the limit of %d bytes of BSON a mirror writes (the replica's maxBsonObjectSize)", c.limit)
		}
	}
	return dst, nil
}

// value appends the element key: val to dst; skip is true for undefined in
// an object (left out, as JSON.stringify does).
func (c *mirrorConv) value(dst []byte, key string, val goja.Value, hint bsoncore.Value, depth int) ([]byte, bool, error) {
	if val == nil || goja.IsUndefined(val) {
		if hint.Type == bsoncore.TypeUndefined {
			return bsoncore.AppendUndefinedElement(dst, key), false, nil
		}
		return dst, true, nil
	}
	if goja.IsNull(val) {
		return bsoncore.AppendNullElement(dst, key), false, nil
	}
	o, isObj := val.(*goja.Object)
	if !isObj {
		if _, isSym := val.(*goja.Symbol); isSym {
			return nil, false, c.fail(errs.NotADocument, "a symbol is not a value a document can hold")
		}
		switch p := val.Export().(type) {
		case string:
			switch hint.Type {
			case bsoncore.TypeSymbol:
				if sym, ok := hint.SymbolOK(); ok && sym == p {
					return bsoncore.AppendSymbolElement(dst, key, p), false, nil
				}
			case bsoncore.TypeJavaScript:
				if js, ok := hint.JavaScriptOK(); ok && js == p {
					return bsoncore.AppendJavaScriptElement(dst, key, p), false, nil
				}
			}
			return bsoncore.AppendStringElement(dst, key, p), false, nil
		case bool:
			return bsoncore.AppendBooleanElement(dst, key, p), false, nil
		case int64:
			return c.number(dst, key, float64(p), p, true, hint), false, nil
		case float64:
			return c.number(dst, key, p, 0, false, hint), false, nil
		case *big.Int:
			if !p.IsInt64() {
				return nil, false, c.fail(errs.NotADocument, "a BigInt beyond int64")
			}
			return bsoncore.AppendInt64Element(dst, key, p.Int64()), false, nil
		}
		return nil, false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
	}
	if depth > maxDepth {
		return nil, false, c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
	}
	switch o.ClassName() {
	case "Object":
		if el, handled, err := c.special(dst, key, o); handled {
			return el, false, err
		}
		if b := c.v.builtin(o); b != "" {
			return nil, false, c.fail(errs.NotADocument, "a %s is not a value a document can hold", b)
		}
		if err := c.enter(o); err != nil {
			return nil, false, err
		}
		idx, d := bsoncore.AppendDocumentElementStart(dst, key)
		d, err := c.fields(d, o, hint, depth+1, false)
		if err != nil {
			return nil, false, err
		}
		d, err = bsoncore.AppendDocumentEnd(d, idx)
		c.seen = c.seen[:len(c.seen)-1]
		return d, false, err
	case "Array":
		if err := c.enter(o); err != nil {
			return nil, false, err
		}
		var hvals []bsoncore.Value
		if hint.Type == bsoncore.TypeArray {
			_ = eachValue(hint.Data, func(_ int, v bsoncore.Value) error { hvals = append(hvals, v); return nil })
		}
		idx, d := bsoncore.AppendArrayElementStart(dst, key)
		n := o.Get("length").ToInteger()
		// Every element takes at least three bytes (its type, a one-digit
		// key and its terminator, a null's empty value): a sparse array
		// longer than the limit allows is refused before its holes are
		// walked one by one.
		if n > int64(c.limit-len(d))/3 {
			return nil, false, c.fail(errs.NotADocument, "the result is more than the limit of %d bytes of BSON a mirror writes (the replica's maxBsonObjectSize): an array of %d elements", c.limit, n)
		}
		for i := int64(0); i < n; i++ {
			ik := strconv.FormatInt(i, 10)
			c.path = append(c.path, ik)
			var h bsoncore.Value
			if int(i) < len(hvals) {
				h = hvals[i]
			}
			ev := o.Get(ik)
			var err error
			var skip bool
			var nd []byte
			nd, skip, err = c.value(d, ik, ev, h, depth+1)
			if err != nil {
				return nil, false, err
			}
			if skip { // undefined in an array is null, as in JSON
				nd = bsoncore.AppendNullElement(d, ik)
			}
			d = nd
			c.path = c.path[:len(c.path)-1]
			if len(d) > c.limit {
				return nil, false, c.fail(errs.NotADocument, "the result is more than the limit of %d bytes of BSON a mirror writes (the replica's maxBsonObjectSize)", c.limit)
			}
		}
		d, err := bsoncore.AppendArrayEnd(d, idx)
		c.seen = c.seen[:len(c.seen)-1]
		return d, false, err
	case "Date":
		t, ok := o.Export().(time.Time)
		if !ok {
			if hint.Type == bsoncore.TypeDateTime {
				// A date beyond JavaScript's range came in as an Invalid
				// Date; left alone, it goes back as it was.
				if ms := hint.DateTime(); ms > maxJSTime || ms < -maxJSTime {
					return bsoncore.AppendDateTimeElement(dst, key, ms), false, nil
				}
			}
			return nil, false, c.fail(errs.NotADocument, "an invalid Date")
		}
		return bsoncore.AppendDateTimeElement(dst, key, t.UnixMilli()), false, nil
	case "String":
		return bsoncore.AppendStringElement(dst, key, o.String()), false, nil
	case "Number":
		return c.number(dst, key, o.ToFloat(), 0, false, hint), false, nil
	case "Boolean":
		b, _ := o.Export().(bool)
		return bsoncore.AppendBooleanElement(dst, key, b), false, nil
	}
	return nil, false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
}

func (c *mirrorConv) enter(o *goja.Object) error {
	for _, s := range c.seen {
		if s == o {
			return c.fail(errs.NotADocument, "a cyclic object (it contains itself)")
		}
	}
	c.seen = append(c.seen, o)
	return nil
}

// number picks the BSON number type: the original's when the value fits
// it, else int32 for an integer that fits, else double.
func (c *mirrorConv) number(dst []byte, key string, f float64, n int64, isInt bool, hint bsoncore.Value) []byte {
	integral := isInt || (f == math.Trunc(f) && !math.IsInf(f, 0))
	if !isInt && integral && math.Abs(f) <= jobdef.MaxSafeInteger {
		n = int64(f)
	}
	switch hint.Type {
	case bsoncore.TypeDouble:
		if isInt {
			return bsoncore.AppendDoubleElement(dst, key, float64(n))
		}
		return bsoncore.AppendDoubleElement(dst, key, f)
	case bsoncore.TypeInt64:
		if integral && (isInt || math.Abs(f) <= jobdef.MaxSafeInteger) {
			return bsoncore.AppendInt64Element(dst, key, n)
		}
	case bsoncore.TypeInt32:
		if integral && (isInt || math.Abs(f) <= jobdef.MaxSafeInteger) && n >= math.MinInt32 && n <= math.MaxInt32 {
			return bsoncore.AppendInt32Element(dst, key, int32(n))
		}
	}
	if integral && (isInt || math.Abs(f) <= jobdef.MaxSafeInteger) && n >= math.MinInt32 && n <= math.MaxInt32 && !(f == 0 && math.Signbit(f)) {
		return bsoncore.AppendInt32Element(dst, key, int32(n))
	}
	if isInt {
		return bsoncore.AppendDoubleElement(dst, key, float64(n))
	}
	return bsoncore.AppendDoubleElement(dst, key, f)
}

// special writes the BSON classes back as their BSON types.
func (c *mirrorConv) special(dst []byte, key string, o *goja.Object) ([]byte, bool, error) {
	v := c.v
	switch o.Prototype() {
	case v.protos.oid:
		p, ok := payload(o).(*oidValue)
		var oid bson.ObjectID
		var err error
		if ok {
			oid, err = bson.ObjectIDFromHex(p.hex)
		}
		if !ok || err != nil {
			return nil, true, c.fail(errs.NotADocument, "a malformed ObjectId")
		}
		return bsoncore.AppendObjectIDElement(dst, key, oid), true, nil
	case v.protos.dec:
		p, ok := payload(o).(*decValue)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		// The exact bits when the value came from a document: a decimal's
		// text does not always parse back to the same bits (0E-5544).
		if p.bits != nil {
			return bsoncore.AppendValueElement(dst, key, bsoncore.Value{Type: bsoncore.TypeDecimal128, Data: p.bits}), true, nil
		}
		d, err := bson.ParseDecimal128(p.text)
		if err != nil {
			return nil, true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		h, l := d.GetBytes()
		return bsoncore.AppendDecimal128Element(dst, key, h, l), true, nil
	case v.protos.bin:
		p, ok := payload(o).(*binValue)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed Binary")
		}
		data, err := base64.StdEncoding.DecodeString(p.b64)
		if err != nil {
			return nil, true, c.fail(errs.NotADocument, "a malformed Binary")
		}
		return bsoncore.AppendBinaryElement(dst, key, p.sub, data), true, nil
	case v.protos.ts:
		t, i, ok := timestampFields(o)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed Timestamp")
		}
		if t < 0 || t > math.MaxUint32 || i < 0 || i > math.MaxUint32 {
			return nil, true, c.fail(errs.NotADocument, "a Timestamp out of range")
		}
		return bsoncore.AppendTimestampElement(dst, key, uint32(t), uint32(i)), true, nil
	case v.protos.re:
		pat, opts, ok := regexFields(o)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed BSONRegExp")
		}
		if strings.IndexByte(pat, 0) >= 0 || strings.IndexByte(opts, 0) >= 0 {
			return nil, true, c.fail(errs.NotADocument, "a BSONRegExp holding a NUL character")
		}
		return bsoncore.AppendRegexElement(dst, key, pat, sortedOptions(opts)), true, nil
	case v.protos.opaque:
		p, ok := payload(o).(*opaqueValue)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed BSON value")
		}
		return bsoncore.AppendValueElement(dst, key, bsoncore.Value{Type: p.t, Data: p.data}), true, nil
	}
	return nil, false, nil
}

// sortedOptions orders regex options alphabetically, as BSON requires.
func sortedOptions(s string) string {
	b := []byte(s)
	for i := 1; i < len(b); i++ {
		for k := i; k > 0 && b[k] < b[k-1]; k-- {
			b[k], b[k-1] = b[k-1], b[k]
		}
	}
	return string(b)
}

func valueString(v goja.Value) string {
	if v == nil {
		return ""
	}
	return v.String()
}
