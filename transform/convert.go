package transform

import (
	"encoding/base64"
	"encoding/hex"
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
)

// maxDepth bounds nesting both ways (MongoDB itself stops at 100 levels of
// documents; a result may not go deeper than this either).
const maxDepth = 180

// inConv turns BSON into JavaScript values in one walk (STYLE.md "goja":
// never hand driver types to JS). The mapping is documented in doc.go.
type inConv struct {
	v *vm
}

func (c inConv) doc(raw []byte, depth int) (*goja.Object, error) {
	if depth > maxDepth {
		return nil, errs.New(errs.NotADocument, "", "the document is nested more than %d levels deep", maxDepth)
	}
	return c.v.lazy(raw, depth)
}

// eachElement calls fn for every element of a BSON document, in order.
func eachElement(raw []byte, fn func(key string, val bsoncore.Value) error) error {
	length, rem, ok := bsoncore.ReadLength(raw)
	if !ok || int(length) > len(raw) || length < 5 {
		return errs.New(errs.NotADocument, "", "malformed BSON document")
	}
	rem = raw[4 : length-1]
	for len(rem) > 0 {
		el, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			return errs.New(errs.NotADocument, "", "malformed BSON document")
		}
		key, err := el.KeyErr()
		if err != nil {
			return errs.New(errs.NotADocument, "", "malformed BSON document")
		}
		val, err := el.ValueErr()
		if err != nil {
			return errs.New(errs.NotADocument, "", "malformed BSON value at %q", key)
		}
		if err := fn(key, val); err != nil {
			return err
		}
		rem = rest
	}
	return nil
}

// eachValue calls fn for every value of a BSON array, in order.
func eachValue(raw []byte, fn func(i int, val bsoncore.Value) error) error {
	i := 0
	return eachElement(raw, func(_ string, val bsoncore.Value) error {
		err := fn(i, val)
		i++
		return err
	})
}

func (c inConv) value(val bsoncore.Value, depth int) (goja.Value, error) {
	rt := c.v.rt
	switch val.Type {
	case bsoncore.TypeDouble:
		return rt.ToValue(val.Double()), nil
	case bsoncore.TypeString:
		return rt.ToValue(val.StringValue()), nil
	case bsoncore.TypeEmbeddedDocument:
		return c.doc(val.Data, depth+1)
	case bsoncore.TypeArray:
		if depth+1 > maxDepth {
			return nil, errs.New(errs.NotADocument, "", "the document is nested more than %d levels deep", maxDepth)
		}
		n := 0
		_ = eachValue(val.Data, func(int, bsoncore.Value) error { n++; return nil })
		items := make([]any, 0, n)
		err := eachValue(val.Data, func(_ int, ev bsoncore.Value) error {
			jv, err := c.value(ev, depth+1)
			items = append(items, jv)
			return err
		})
		if err != nil {
			return nil, err
		}
		return rt.NewArray(items...), nil
	case bsoncore.TypeBinary:
		sub, data := val.Binary()
		o := rt.CreateObject(c.v.protos.bin)
		p := rt.NewObject()
		_ = p.Set("s", int64(sub))
		_ = p.Set("d", base64.StdEncoding.EncodeToString(data))
		if u := uuidString(sub, data); u != "" {
			_ = p.Set("u", u)
		}
		_ = o.SetSymbol(c.v.hid, p)
		return o, nil
	case bsoncore.TypeUndefined:
		return goja.Undefined(), nil
	case bsoncore.TypeObjectID:
		if c.v.bare {
			// monstache hands its scripts ObjectIds as hex strings
			// (convertMapJavascript in rwynn/monstache), and their
			// scripts compare and concatenate them as such.
			return rt.ToValue(bson.ObjectID(val.ObjectID()).Hex()), nil
		}
		o := rt.CreateObject(c.v.protos.oid)
		_ = o.SetSymbol(c.v.hid, bson.ObjectID(val.ObjectID()).Hex())
		return o, nil
	case bsoncore.TypeBoolean:
		if val.Boolean() {
			return c.v.vTrue, nil
		}
		return c.v.vFalse, nil
	case bsoncore.TypeDateTime:
		return c.v.date(val.DateTime())
	case bsoncore.TypeNull:
		return goja.Null(), nil
	case bsoncore.TypeRegex:
		pat, opts := val.Regex()
		o := rt.CreateObject(c.v.protos.re)
		_ = o.Set("pattern", pat)
		_ = o.Set("options", opts)
		return o, nil
	case bsoncore.TypeJavaScript:
		return rt.ToValue(val.JavaScript()), nil
	case bsoncore.TypeSymbol:
		return rt.ToValue(val.Symbol()), nil
	case bsoncore.TypeInt32:
		return rt.ToValue(int64(val.Int32())), nil
	case bsoncore.TypeTimestamp:
		t, i := val.Timestamp()
		o := rt.CreateObject(c.v.protos.ts)
		_ = o.Set("t", int64(t))
		_ = o.Set("i", int64(i))
		return o, nil
	case bsoncore.TypeInt64:
		n := val.Int64()
		if n > maxSafe || n < -maxSafe {
			return rt.ToValue(big.NewInt(n)), nil
		}
		return rt.ToValue(n), nil
	case bsoncore.TypeDecimal128:
		h, l := val.Decimal128()
		o := rt.CreateObject(c.v.protos.dec)
		_ = o.SetSymbol(c.v.hid, bson.NewDecimal128(h, l).String())
		_ = o.SetSymbol(c.v.hidBits, hex.EncodeToString(val.Data))
		return o, nil
	}
	// DBPointer, CodeWithScope, MinKey, MaxKey: opaque, kept as they are.
	o := rt.CreateObject(c.v.protos.opaque)
	p := rt.NewObject()
	_ = p.Set("t", int64(val.Type))
	_ = p.Set("d", base64.StdEncoding.EncodeToString(val.Data))
	_ = p.Set("j", opaqueJSON(val))
	_ = o.SetSymbol(c.v.hid, p)
	return o, nil
}

// date makes a JavaScript Date; one beyond JavaScript's range (±8.64e15 ms)
// is an Invalid Date.
func (v *vm) date(ms int64) (goja.Value, error) {
	v.dateArg[0] = v.rt.ToValue(ms)
	d, err := v.rt.New(v.dateCtor, v.dateArg[:]...)
	v.dateArg[0] = nil
	return d, err
}

// uuidString is the canonical text of a UUID (binary subtype 4, 16 bytes),
// "" for any other binary.
func uuidString(sub byte, b []byte) string {
	if sub != bson.TypeBinaryUUID || len(b) != 16 {
		return ""
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// opaqueJSON is the canonical Extended JSON of a value no JavaScript type
// fits (DBPointer, CodeWithScope, MinKey, MaxKey).
func opaqueJSON(val bsoncore.Value) string {
	d := bsoncore.NewDocumentBuilder().AppendValue("v", val).Build()
	b, err := bson.MarshalExtJSON(bson.Raw(d), true, false)
	if err != nil {
		return val.Type.String()
	}
	s := string(b)
	s = strings.TrimPrefix(s, `{"v":`)
	return strings.TrimSuffix(s, "}")
}

// ---- search output ----

// outConv turns a transform's result (or a BSON document, for the identity)
// into a JSON-ready document for Meilisearch, checking what it holds.
type outConv struct {
	job   *Job
	v     *vm // nil when converting BSON
	epoch bool
	limit int
	size  int
	path  []string
	seen  []*goja.Object
}

func (c *outConv) fail(code errs.Code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if len(c.path) > 0 {
		msg = strings.Join(c.path, ".") + ": " + msg
	}
	return &errs.Error{Code: code, Job: c.job.Name, Msg: msg}
}

func (c *outConv) grow(n int) error {
	c.size += n
	if c.size > c.limit {
		c.path = c.path[:0]
		return c.fail(errs.NotADocument, "the result is larger than the limit of %d bytes of JSON", c.limit)
	}
	return nil
}

func (c *outConv) object(o *goja.Object, _ string) (map[string]any, error) {
	for _, s := range c.seen {
		if s == o {
			return nil, c.fail(errs.NotADocument, "a cyclic object (it contains itself)")
		}
	}
	if len(c.seen) >= maxDepth {
		return nil, c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
	}
	c.seen = append(c.seen, o)
	if err := c.grow(2); err != nil {
		return nil, err
	}
	if d := asLazy(o); d != nil {
		// Untouched fields go straight from BSON.
		m := make(map[string]any, 16)
		err := d.each(func(k string, jv goja.Value, _ bsoncore.Element, raw bsoncore.Value, touched bool) error {
			c.path = append(c.path, k)
			var x any
			var ok bool
			var err error
			if touched {
				x, ok, err = c.value(jv)
			} else {
				x, ok, err = c.bsonValue(raw)
			}
			if err != nil {
				return err
			}
			c.path = c.path[:len(c.path)-1]
			if ok {
				m[k] = x
				return c.grow(len(k) + 4)
			}
			return nil
		})
		if err != nil {
			return nil, errs.WithJob(c.job.Name, err)
		}
		c.seen = c.seen[:len(c.seen)-1]
		return m, nil
	}
	keys := c.keys(o)
	m := make(map[string]any, len(keys))
	for _, k := range keys {
		c.path = append(c.path, k)
		x, ok, err := c.value(o.Get(k))
		if err != nil {
			return nil, err
		}
		c.path = c.path[:len(c.path)-1]
		if ok {
			if err := c.grow(len(k) + 4); err != nil {
				return nil, err
			}
			m[k] = x
		}
	}
	c.seen = c.seen[:len(c.seen)-1]
	return m, nil
}

// keys lists o's keys through the vm when there is one (fewer
// allocations than goja's Keys).
func (c *outConv) keys(o *goja.Object) []string {
	if c.v != nil {
		return c.v.keys(o)
	}
	return o.Keys()
}

func (c *outConv) array(o *goja.Object) ([]any, error) {
	for _, s := range c.seen {
		if s == o {
			return nil, c.fail(errs.NotADocument, "a cyclic array (it contains itself)")
		}
	}
	if len(c.seen) >= maxDepth {
		return nil, c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
	}
	c.seen = append(c.seen, o)
	n := o.Get("length").ToInteger()
	if err := c.grow(2 + int(n)); err != nil {
		return nil, err
	}
	a := make([]any, n)
	for i := int64(0); i < n; i++ {
		c.path = append(c.path, strconv.FormatInt(i, 10))
		x, _, err := c.value(o.Get(strconv.FormatInt(i, 10)))
		if err != nil {
			return nil, err
		}
		c.path = c.path[:len(c.path)-1]
		a[i] = x
	}
	c.seen = c.seen[:len(c.seen)-1]
	return a, nil
}

// value converts one JavaScript value; ok is false for undefined (a key
// holding it is left out, as JSON.stringify does; in an array it is null).
func (c *outConv) value(val goja.Value) (x any, ok bool, err error) {
	if val == nil || goja.IsUndefined(val) {
		return nil, false, nil
	}
	if goja.IsNull(val) {
		return nil, true, c.grow(4)
	}
	o, isObj := val.(*goja.Object)
	if !isObj {
		if _, isSym := val.(*goja.Symbol); isSym { // its Export is its description
			return nil, false, c.fail(errs.NotADocument, "a symbol is not a value a document can hold")
		}
		x := val.Export() // returned as it is: re-boxing p would allocate
		switch p := x.(type) {
		case string:
			return x, true, c.grow(len(p) + 2)
		case bool:
			return x, true, c.grow(5)
		case int64:
			return x, true, c.grow(20)
		case float64:
			f, err := c.number(p)
			return f, true, err
		case *big.Int:
			if p.IsInt64() {
				return p.Int64(), true, c.grow(20)
			}
			if p.IsUint64() {
				return p.Uint64(), true, c.grow(20)
			}
			return nil, false, c.fail(errs.NotADocument, "a BigInt beyond 64 bits")
		}
		return nil, false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
	}
	switch o.ClassName() {
	case "Object":
		if c.v != nil {
			if x, handled, err := c.special(o); handled {
				return x, true, err
			}
			if b := c.v.builtin(o); b != "" {
				return nil, false, c.fail(errs.NotADocument, "a %s is not a value a document can hold", b)
			}
		}
		m, err := c.object(o, "")
		return m, true, err
	case "Array":
		a, err := c.array(o)
		return a, true, err
	case "Date":
		t, ok := o.Export().(time.Time)
		if !ok {
			return nil, false, c.fail(errs.NotADocument, "an invalid Date")
		}
		x, err := c.date(t.UnixMilli())
		return x, true, err
	case "String":
		s := o.String()
		return s, true, c.grow(len(s) + 2)
	case "Number":
		f, err := c.number(o.ToFloat())
		return f, true, err
	case "Boolean":
		b, _ := o.Export().(bool)
		return b, true, c.grow(5)
	}
	return nil, false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
}

// number writes an integral value as int64 (JSON prints both alike) and
// refuses what JSON cannot hold.
func (c *outConv) number(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		what := "NaN"
		if math.IsInf(f, 0) {
			what = "Infinity"
		}
		return nil, c.fail(errs.NotADocument, "a number that is %s", what)
	}
	if err := c.grow(24); err != nil {
		return nil, err
	}
	if f == math.Trunc(f) && math.Abs(f) <= maxSafe {
		return int64(f), nil // also turns -0 into 0
	}
	return f, nil
}

func (c *outConv) date(ms int64) (any, error) {
	if c.epoch {
		return ms, c.grow(20)
	}
	s := isoDate(ms)
	return s, c.grow(len(s) + 2)
}

// isoDate formats like JavaScript's Date.prototype.toISOString, including
// the six-digit signed years outside 0000-9999.
func isoDate(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	y := t.Year()
	if y >= 0 && y <= 9999 {
		return t.Format("2006-01-02T15:04:05.000Z")
	}
	sign := "+"
	if y < 0 {
		sign = "-"
		y = -y
	}
	return fmt.Sprintf("%s%06d%s", sign, y, t.Format("-01-02T15:04:05.000Z"))
}

// special converts the BSON classes of doc.go; handled is false for any
// other object.
func (c *outConv) special(o *goja.Object) (x any, handled bool, err error) {
	v := c.v
	switch o.Prototype() {
	case v.protos.oid:
		h := o.GetSymbol(v.hid)
		if h == nil || !isOIDHex(h.String()) {
			return nil, true, c.fail(errs.NotADocument, "a malformed ObjectId")
		}
		return h.String(), true, c.grow(26)
	case v.protos.dec:
		h := o.GetSymbol(v.hid)
		if h == nil {
			return nil, true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		f, perr := strconv.ParseFloat(h.String(), 64)
		if perr != nil && !math.IsInf(f, 0) {
			return nil, true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		x, err := c.number(f)
		return x, true, err
	case v.protos.bin:
		p, ok := o.GetSymbol(v.hid).(*goja.Object)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed Binary")
		}
		s := p.Get("u")
		if s == nil || goja.IsUndefined(s) {
			s = p.Get("d")
		}
		return s.String(), true, c.grow(len(s.String()) + 2)
	case v.protos.ts:
		t, i := o.Get("t").ToInteger(), o.Get("i").ToInteger()
		return map[string]any{"t": t, "i": i}, true, c.grow(30)
	case v.protos.re:
		s := "/" + o.Get("pattern").String() + "/" + o.Get("options").String()
		return s, true, c.grow(len(s) + 2)
	case v.protos.opaque:
		p, ok := o.GetSymbol(v.hid).(*goja.Object)
		if !ok {
			return nil, true, c.fail(errs.NotADocument, "a malformed BSON value")
		}
		s := p.Get("j").String()
		return s, true, c.grow(len(s) + 2)
	}
	return nil, false, nil
}

// docFromBSON converts a BSON document straight to the JSON-ready form, with
// the same rules a document going through JavaScript gets.
func (c *outConv) docFromBSON(raw []byte) (map[string]any, error) {
	if len(c.path) >= maxDepth {
		return nil, c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
	}
	m := make(map[string]any)
	if err := c.grow(2); err != nil {
		return nil, err
	}
	err := eachElement(raw, func(key string, val bsoncore.Value) error {
		c.path = append(c.path, key)
		x, ok, err := c.bsonValue(val)
		if err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if ok {
			m[key] = x
			return c.grow(len(key) + 4)
		}
		return nil
	})
	if err != nil {
		return nil, errs.WithJob(c.job.Name, err)
	}
	return m, nil
}

func (c *outConv) bsonValue(val bsoncore.Value) (any, bool, error) {
	switch val.Type {
	case bsoncore.TypeDouble:
		x, err := c.number(val.Double())
		return x, true, err
	case bsoncore.TypeString:
		s := val.StringValue()
		return s, true, c.grow(len(s) + 2)
	case bsoncore.TypeEmbeddedDocument:
		m, err := c.docFromBSON(val.Data)
		return m, true, err
	case bsoncore.TypeArray:
		if len(c.path) >= maxDepth {
			return nil, false, c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
		}
		a := []any{}
		err := eachValue(val.Data, func(i int, ev bsoncore.Value) error {
			c.path = append(c.path, strconv.Itoa(i))
			x, _, err := c.bsonValue(ev)
			if err != nil {
				return err
			}
			c.path = c.path[:len(c.path)-1]
			a = append(a, x)
			return c.grow(1)
		})
		return a, true, err
	case bsoncore.TypeBinary:
		sub, data := val.Binary()
		s := uuidString(sub, data)
		if s == "" {
			s = base64.StdEncoding.EncodeToString(data)
		}
		return s, true, c.grow(len(s) + 2)
	case bsoncore.TypeUndefined:
		return nil, false, nil
	case bsoncore.TypeObjectID:
		return bson.ObjectID(val.ObjectID()).Hex(), true, c.grow(26)
	case bsoncore.TypeBoolean:
		return val.Boolean(), true, c.grow(5)
	case bsoncore.TypeDateTime:
		ms := val.DateTime()
		if ms > maxJSTime || ms < -maxJSTime {
			return nil, false, c.fail(errs.NotADocument, "a date outside the range JavaScript dates can hold")
		}
		x, err := c.date(ms)
		return x, true, err
	case bsoncore.TypeNull:
		return nil, true, c.grow(4)
	case bsoncore.TypeRegex:
		p, o := val.Regex()
		s := "/" + p + "/" + o
		return s, true, c.grow(len(s) + 2)
	case bsoncore.TypeJavaScript:
		s := val.JavaScript()
		return s, true, c.grow(len(s) + 2)
	case bsoncore.TypeSymbol:
		s := val.Symbol()
		return s, true, c.grow(len(s) + 2)
	case bsoncore.TypeInt32:
		return int64(val.Int32()), true, c.grow(11)
	case bsoncore.TypeTimestamp:
		t, i := val.Timestamp()
		return map[string]any{"t": int64(t), "i": int64(i)}, true, c.grow(30)
	case bsoncore.TypeInt64:
		return val.Int64(), true, c.grow(20)
	case bsoncore.TypeDecimal128:
		h, l := val.Decimal128()
		f, err := strconv.ParseFloat(bson.NewDecimal128(h, l).String(), 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil, false, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		x, err := c.number(f)
		return x, true, err
	}
	s := opaqueJSON(val)
	return s, true, c.grow(len(s) + 2)
}

// maxJSTime is the largest magnitude of a JavaScript Date, in milliseconds.
const maxJSTime = 8.64e15

// typeName names a JavaScript value's type for an error message, never its
// value.
func typeName(val goja.Value) string {
	if val == nil || goja.IsUndefined(val) {
		return "undefined"
	}
	if goja.IsNull(val) {
		return "null"
	}
	if o, ok := val.(*goja.Object); ok {
		switch cn := o.ClassName(); cn {
		case "Function":
			return "a function"
		case "Array":
			return "an array"
		case "Object":
			return "an object"
		default:
			return "a " + cn
		}
	}
	if _, ok := val.(*goja.Symbol); ok {
		return "a symbol"
	}
	switch p := val.Export().(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "a number"
	case float64:
		if math.IsNaN(p) {
			return "NaN"
		}
		if math.IsInf(p, 0) {
			return "Infinity"
		}
		return "a number"
	case *big.Int:
		return "a BigInt"
	}
	if _, ok := val.(*goja.Symbol); ok {
		return "a symbol"
	}
	return "a " + val.ExportType().String()
}

// typeName on a vm also knows the BSON classes.
func (v *vm) typeName(val goja.Value) string {
	if o, ok := val.(*goja.Object); ok {
		switch o.Prototype() {
		case v.protos.oid:
			return "an ObjectId"
		case v.protos.dec:
			return "a Decimal128"
		case v.protos.bin:
			return "a Binary"
		case v.protos.ts:
			return "a Timestamp"
		case v.protos.re:
			return "a BSONRegExp"
		case v.protos.opaque:
			return "a BSONValue"
		}
		if o.ClassName() == "Object" {
			if b := v.builtin(o); b != "" {
				return "a " + b
			}
		}
	}
	return typeName(val)
}

// special reports whether o is one of the BSON classes (not a document).
func (v *vm) special(o *goja.Object) bool {
	switch o.Prototype() {
	case v.protos.oid, v.protos.dec, v.protos.bin, v.protos.ts, v.protos.re, v.protos.opaque:
		return true
	}
	return false
}

// setPrimaryKey checks the result's primary key against the id derived from
// _id (ID_MISMATCH when it differs) and sets it. The transform may keep the
// document's own _id value under the primary key (as a monstache script
// returning the document with primaryKey "_id" does).
func (j *Job) setPrimaryKey(m map[string]any, idv bson.RawValue, id any) error {
	pk := j.PrimaryKey
	if pk == "" {
		pk = DefaultPrimaryKey
	}
	if got, ok := m[pk]; ok && !sameID(got, id) {
		c := outConv{job: j, limit: math.MaxInt}
		orig, _, err := c.bsonValue(bsoncore.Value{Type: bsoncore.Type(idv.Type), Data: idv.Value})
		if err != nil || !sameJSON(got, orig) {
			return errs.New(errs.IDMismatch, j.Name, "the transform set the primary key %q to %s, not the id %s derived from _id", pk, describeID(got), describeID(id))
		}
	}
	m[pk] = id
	return nil
}

// describeID shows an id in an ID_MISMATCH message: its kind, and the value
// only when it is an id (a string or integer Meilisearch could hold), which
// is no more than the document's _id already says.
func describeID(x any) string {
	switch v := x.(type) {
	case string:
		if inAlphabet(v) && len(v) <= MaxIndexIDLen {
			return strconv.Quote(v)
		}
		return "a string"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return "a number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("a %T", x)
}

func sameID(got, id any) bool {
	switch w := id.(type) {
	case string:
		s, ok := got.(string)
		return ok && s == w
	case int64:
		switch g := got.(type) {
		case int64:
			return g == w
		case float64:
			return g == float64(w)
		case uint64:
			return w >= 0 && g == uint64(w)
		}
	}
	return false
}

// sameJSON compares two JSON-ready values.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
