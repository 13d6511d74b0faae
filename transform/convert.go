package transform

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
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

// eachValue calls fn for every value of a BSON array, in order.
func eachValue(raw []byte, fn func(i int, val bsoncore.Value) error) error {
	i := 0
	return jobdef.EachElement(raw, func(_ string, val bsoncore.Value) error {
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
		return c.v.str(val.Data)
	case bsoncore.TypeEmbeddedDocument:
		return c.doc(val.Data, depth+1)
	case bsoncore.TypeArray:
		if depth+1 > maxDepth {
			return nil, errs.New(errs.NotADocument, "", "the document is nested more than %d levels deep", maxDepth)
		}
		// The elements go on the vm's scratch stack (an element that is an
		// array pushes and pops its own above them), then into the array.
		v := c.v
		base := len(v.items)
		err := eachValue(val.Data, func(_ int, ev bsoncore.Value) error {
			jv, err := c.value(ev, depth+1)
			v.items = append(v.items, jv)
			return err
		})
		if err != nil {
			clear(v.items[base:])
			v.items = v.items[:base]
			return nil, err
		}
		arr := rt.NewArray(v.items[base:]...)
		clear(v.items[base:]) // hold no value of the document
		v.items = v.items[:base]
		return arr, nil
	case bsoncore.TypeBinary:
		sub, data, ok := val.BinaryOK()
		if !ok { // an old binary (subtype 2) whose inner length is wrong
			return nil, errMalformedValue
		}
		return c.v.newBinary(sub, data), nil
	case bsoncore.TypeUndefined:
		return goja.Undefined(), nil
	case bsoncore.TypeObjectID:
		if c.v.bare {
			// monstache hands its scripts ObjectIds as hex strings
			// (convertMapJavascript in rwynn/monstache), and their
			// scripts compare and concatenate them as such.
			return rt.ToValue(bson.ObjectID(val.ObjectID()).Hex()), nil
		}
		return c.v.newOID(bson.ObjectID(val.ObjectID()).Hex()), nil
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
	case bsoncore.TypeJavaScript, bsoncore.TypeSymbol:
		return c.v.str(val.Data)
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
		if n > jobdef.MaxSafeInteger || n < -jobdef.MaxSafeInteger {
			return rt.ToValue(big.NewInt(n)), nil
		}
		return rt.ToValue(n), nil
	case bsoncore.TypeDecimal128:
		h, l := val.Decimal128()
		return c.v.newDecimal(bson.NewDecimal128(h, l), append([]byte(nil), val.Data[:16]...)), nil
	}
	// DBPointer, CodeWithScope, MinKey, MaxKey: opaque, kept as they are.
	return c.v.newOpaque(val), nil
}

// Short strings are kept per runtime, each made into a JavaScript string
// once: field values repeat across documents (a status, tags, a category,
// an author's name) and each new one cost a copy and two boxed values. A
// JavaScript string is an immutable value, so sharing one is invisible to
// the transform. The values that repeat are few; the unique ones (a
// title) fill the map until it is cleared, and what it holds is live heap,
// which the collector's goal multiplies (GOGC=400: by five): 4096 strings
// a runtime were a megabyte and more of a reindex's peak, 512 cost no more
// CPU.
const (
	maxKeptString  = 64
	maxKeptStrings = 512
)

// str makes the JavaScript string of a BSON string value (its bytes, as in
// a bsoncore.Value).
func (v *vm) str(data []byte) (goja.Value, error) {
	n, rem, ok := bsoncore.ReadLength(data)
	if !ok || n < 1 || int(n) > len(rem) || rem[n-1] != 0 {
		return nil, errMalformed
	}
	b := rem[:n-1]
	if len(b) > maxKeptString {
		return v.rt.ToValue(string(b)), nil
	}
	if jv, ok := v.strs[string(b)]; ok {
		return jv, nil
	}
	s := string(b)
	jv := v.rt.ToValue(s)
	if len(v.strs) >= maxKeptStrings {
		clear(v.strs)
	}
	if v.strs == nil {
		v.strs = make(map[string]goja.Value)
	}
	v.strs[s] = jv
	return jv, nil
}

// date makes a JavaScript Date; one beyond JavaScript's range (±8.64e15 ms)
// is an Invalid Date.
func (v *vm) date(ms int64) (goja.Value, error) {
	v.dateArg[0] = v.rt.ToValue(ms)
	d, err := v.rt.New(v.dateCtor, v.dateArg[:]...)
	v.dateArg[0] = nil
	return d, err
}

// nestedDeeper reports whether the BSON document doc nests documents,
// arrays or scopes more than limit levels (or is malformed), reading it
// without recursion.
func nestedDeeper(doc []byte, limit int) bool {
	type level struct {
		doc   []byte
		depth int
	}
	stack := []level{{doc, 0}}
	for len(stack) > 0 {
		l := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if l.depth > limit {
			return true
		}
		err := jobdef.EachElement(l.doc, func(_ string, v bsoncore.Value) error {
			switch v.Type {
			case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
				stack = append(stack, level{v.Data, l.depth + 1})
			case bsoncore.TypeCodeWithScope:
				if _, scope, ok := v.CodeWithScopeOK(); ok {
					stack = append(stack, level{scope, l.depth + 1})
				}
			}
			return nil
		})
		if err != nil {
			return true
		}
	}
	return false
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
	if val.Type == bsoncore.TypeCodeWithScope {
		// The driver writes the scope recursively: a scope nested
		// deeper than documents may be is not written out.
		if _, scope, ok := val.CodeWithScopeOK(); !ok || nestedDeeper(scope, maxDepth) {
			return val.Type.String()
		}
	}
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

// outConv writes a transform's result (or a BSON document, for the
// identity) as the JSON document Meilisearch receives, checking what it
// holds. It writes straight from the JavaScript (or BSON) values: building
// a Go map first and encoding it after cost a map, a boxed value per field
// and a second walk per document.
type outConv struct {
	job   *Job
	v     *vm // nil when converting BSON
	epoch bool
	limit int
	buf   []byte // the output; the document starts at start
	start int
	path  []string
	seen  []*goja.Object
	level int // objects and arrays open

	// The top-level object's primary key: pk (none when empty) is set to
	// id, derived from idv, the source _id.
	pk    string
	id    any
	idv   bson.RawValue
	pkSet bool
	// fromSource says the member being written comes untouched from the
	// source document (the identity, or a field the transform left as it
	// was): then an ID_MISMATCH is the document's doing, not the
	// transform's.
	fromSource bool
}

// newOutConv starts a search document at the end of dst (v: the runtime
// the result comes from, nil for BSON).
func (j *Job) newOutConv(v *vm, dst []byte, idv bson.RawValue, id any) outConv {
	pk := j.PrimaryKey
	if pk == "" {
		pk = jobdef.DefaultPrimaryKey
	}
	c := outConv{job: j, v: v, epoch: j.Dates == "epoch", limit: j.maxResult(), buf: dst, start: len(dst), pk: pk, id: id, idv: idv}
	if v != nil {
		c.path, c.seen = v.path[:0], v.seen[:0]
	}
	return c
}

// result is res with the document written, and the buffer it is in.
func (c *outConv) result(res Result) (Result, []byte, error) {
	if c.v != nil {
		c.v.path, c.v.seen = c.path[:0], c.seen[:0]
	}
	res.JSON = c.buf[c.start:len(c.buf):len(c.buf)]
	return res, c.buf, nil
}

func (c *outConv) fail(code errs.Code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if len(c.path) > 0 {
		msg = pathText(c.path) + ": " + msg
	}
	return &errs.Error{Code: code, Job: c.job.Name, Msg: msg}
}

// room fails when n more bytes would take the document over the limit.
func (c *outConv) room(n int) error {
	if len(c.buf)-c.start+n > c.limit {
		c.path = c.path[:0]
		return c.fail(errs.NotADocument, "the result is larger than the limit of %d bytes of JSON", c.limit)
	}
	return nil
}

// document writes o, the top-level result, with the primary key set.
func (c *outConv) document(o *goja.Object) error {
	if err := c.object(o); err != nil {
		return err
	}
	return c.room(0)
}

// open and close bracket an object or array, with the depth checks.
func (c *outConv) open(b byte) error {
	if c.level >= maxDepth {
		return c.fail(errs.NotADocument, "nested more than %d levels deep", maxDepth)
	}
	c.level++
	c.buf = append(c.buf, b)
	return c.room(0)
}

func (c *outConv) close(b byte) {
	c.level--
	c.buf = append(c.buf, b)
}

// member writes one key of an object and its value (write), or nothing
// when write reports undefined; n counts the keys written.
func (c *outConv) member(n *int, k string, write func() (bool, error)) error {
	if testPanic != nil {
		testPanic(k)
	}
	mark := len(c.buf)
	if *n > 0 {
		c.buf = append(c.buf, ',')
	}
	c.buf = jobdef.AppendJSONString(c.buf, k)
	c.buf = append(c.buf, ':')
	at := len(c.buf)
	c.path = append(c.path, k)
	ok, err := write()
	if err != nil {
		return err
	}
	c.path = c.path[:len(c.path)-1]
	if !ok {
		c.buf = c.buf[:mark]
		return nil
	}
	if c.level == 1 && k == c.pk && !c.pkSet {
		if err := c.primaryKey(at); err != nil {
			return err
		}
	}
	*n++
	return c.room(0)
}

// endObject closes an object, adding the primary key to the top-level one
// when the transform left it out.
func (c *outConv) endObject(n int) error {
	if c.level == 1 && c.pk != "" && !c.pkSet {
		c.pkSet = true
		if err := c.member(&n, c.pk, func() (bool, error) { return true, c.writeID() }); err != nil {
			return err
		}
	}
	c.close('}')
	return nil
}

func (c *outConv) writeID() (err error) {
	c.buf, err = jobdef.AppendJSON(c.buf, c.id)
	return err
}

// primaryKey checks the value the result holds under the primary key
// (written from at) against the id derived from _id, ID_MISMATCH when it
// differs, and writes the id in its place. The transform may keep the
// document's own _id value under the primary key (as a monstache script
// returning the document with primaryKey "_id" does).
func (c *outConv) primaryKey(at int) error {
	got, err := decodeJSON(c.buf[at:])
	if err != nil || !sameID(got, c.id) {
		oc := outConv{job: c.job, epoch: c.epoch, limit: math.MaxInt}
		_, err := oc.bsonValue(bsoncore.Value{Type: bsoncore.Type(c.idv.Type), Data: c.idv.Value})
		var orig any
		if err == nil {
			orig, err = decodeJSON(oc.buf)
		}
		if err != nil || !sameJSON(got, orig) {
			if c.fromSource {
				return errs.New(errs.IDMismatch, c.job.Name, "the document has its own field %q, the index's primary key, holding %s and not the id %s derived from _id: the index id is always derived from _id; drop or rename that field in a transform, or set primaryKey to a field name the documents do not use", c.pk, kindOf(got), describeID(c.id))
			}
			return errs.New(errs.IDMismatch, c.job.Name, "the transform set the primary key %q to %s, not the id %s derived from _id (leave it out: it is added)", c.pk, kindOf(got), describeID(c.id))
		}
	}
	c.buf = c.buf[:at]
	c.pkSet = true
	return c.writeID()
}

func (c *outConv) object(o *goja.Object) error {
	for _, s := range c.seen {
		if s == o {
			return c.fail(errs.NotADocument, "a cyclic object (it contains itself)")
		}
	}
	if err := c.open('{'); err != nil {
		return err
	}
	c.seen = append(c.seen, o)
	n := 0
	if d := asLazy(o); d != nil {
		// Untouched fields go straight from BSON.
		err := d.each(func(k string, jv goja.Value, _ bsoncore.Element, raw bsoncore.Value, touched bool) error {
			c.fromSource = !touched
			return c.member(&n, k, func() (bool, error) {
				if touched {
					return c.value(jv)
				}
				return c.bsonValue(raw)
			})
		})
		c.fromSource = false
		if err != nil {
			return errs.WithJob(c.job.Name, err)
		}
	} else {
		// goja's Keys: the enumerable own string keys in order, as
		// Object.keys and JSON.stringify see them (it panics as goja does
		// when a proxy's trap throws). Calling Object.keys instead made
		// fewer allocations (18 against 26 for seven keys) but more bytes,
		// and the transform took 1.000 to 1.008 of the time against 0.979
		// to 0.993 with Keys, in alternating blocks of 1000 articles.
		for _, k := range o.Keys() {
			if err := c.member(&n, k, func() (bool, error) { return c.value(o.Get(k)) }); err != nil {
				return err
			}
		}
	}
	c.seen = c.seen[:len(c.seen)-1]
	return c.endObject(n)
}

func (c *outConv) array(o *goja.Object) error {
	for _, s := range c.seen {
		if s == o {
			return c.fail(errs.NotADocument, "a cyclic array (it contains itself)")
		}
	}
	n := o.Get("length").ToInteger()
	if err := c.room(2 + int(n)); err != nil { // at least a byte an element
		return err
	}
	if err := c.open('['); err != nil {
		return err
	}
	c.seen = append(c.seen, o)
	for i := int64(0); i < n; i++ {
		if i > 0 {
			c.buf = append(c.buf, ',')
		}
		k := strconv.FormatInt(i, 10)
		c.path = append(c.path, k)
		ok, err := c.value(o.Get(k))
		if err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		if !ok {
			c.buf = append(c.buf, "null"...)
		}
		if err := c.room(0); err != nil {
			return err
		}
	}
	c.seen = c.seen[:len(c.seen)-1]
	c.close(']')
	return nil
}

var (
	typeString = reflect.TypeOf("")
	typeInt64  = reflect.TypeOf(int64(0))
	typeFloat  = reflect.TypeOf(float64(0))
	typeBool   = reflect.TypeOf(false)
	typeBigInt = reflect.TypeOf((*big.Int)(nil))
)

// value writes one JavaScript value; ok is false for undefined (a key
// holding it is left out, as JSON.stringify does; in an array it is null).
func (c *outConv) value(val goja.Value) (ok bool, err error) {
	if val == nil || goja.IsUndefined(val) {
		return false, nil
	}
	if goja.IsNull(val) {
		c.buf = append(c.buf, "null"...)
		return true, nil
	}
	o, isObj := val.(*goja.Object)
	if !isObj {
		if _, isSym := val.(*goja.Symbol); isSym { // its ExportType is string's
			return false, c.fail(errs.NotADocument, "a symbol is not a value a document can hold")
		}
		// A primitive, read by its type (Export would box it).
		switch val.ExportType() {
		case typeString:
			c.buf = jobdef.AppendJSONString(c.buf, val.String())
		case typeInt64:
			c.buf = strconv.AppendInt(c.buf, val.ToInteger(), 10)
		case typeFloat:
			return true, c.number(val.ToFloat())
		case typeBool:
			c.buf = strconv.AppendBool(c.buf, val.ToBoolean())
		case typeBigInt:
			p, _ := val.Export().(*big.Int)
			switch {
			case p == nil:
				return false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
			case p.IsInt64():
				c.buf = strconv.AppendInt(c.buf, p.Int64(), 10)
			case p.IsUint64():
				c.buf = strconv.AppendUint(c.buf, p.Uint64(), 10)
			default:
				return false, c.fail(errs.NotADocument, "a BigInt beyond 64 bits")
			}
		default:
			return false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
		}
		return true, nil
	}
	switch o.ClassName() {
	case "Object":
		if c.v != nil {
			if handled, err := c.special(o); handled {
				return true, err
			}
			if b := c.v.builtin(o); b != "" {
				return false, c.fail(errs.NotADocument, "a %s is not a value a document can hold", b)
			}
		}
		return true, c.object(o)
	case "Array":
		return true, c.array(o)
	case "Date":
		t, ok := o.Export().(time.Time)
		if !ok {
			return false, c.fail(errs.NotADocument, "an invalid Date")
		}
		c.date(t.UnixMilli())
		return true, nil
	case "String":
		c.buf = jobdef.AppendJSONString(c.buf, o.String())
		return true, nil
	case "Number":
		return true, c.number(o.ToFloat())
	case "Boolean":
		b, _ := o.Export().(bool)
		c.buf = strconv.AppendBool(c.buf, b)
		return true, nil
	}
	return false, c.fail(errs.NotADocument, "%s is not a value a document can hold", typeName(val))
}

// number writes an integral value as an integer (also turning -0 into 0)
// and refuses what JSON cannot hold.
func (c *outConv) number(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		what := "NaN"
		if math.IsInf(f, 0) {
			what = "Infinity"
		}
		return c.fail(errs.NotADocument, "a number that is %s", what)
	}
	if f == math.Trunc(f) && math.Abs(f) <= jobdef.MaxSafeInteger {
		c.buf = strconv.AppendInt(c.buf, int64(f), 10)
		return nil
	}
	var err error
	c.buf, err = jobdef.AppendJSONFloat(c.buf, f)
	return err
}

// decimal writes a Decimal128 as a number when a float64 holds its very
// value (its shortest decimal form is the decimal's value: 0.1, 2.50),
// else as its exact decimal text ("1E-6000", "1E+6000",
// "12345678901234567890123456789", "NaN", "Infinity"): writing 1E-6000 as
// 0 would lose the value without a word.
func (c *outConv) decimal(d bson.Decimal128) {
	if f, ok := decimalNumber(d); ok {
		_ = c.number(f)
		return
	}
	c.buf = jobdef.AppendJSONString(c.buf, d.String())
}

// decimalNumber is the float64 of d and whether it is d's exact value as
// a decimal (see outConv.decimal).
func decimalNumber(d bson.Decimal128) (float64, bool) {
	if d.IsNaN() || d.IsInf() != 0 {
		return 0, false
	}
	f, err := strconv.ParseFloat(d.String(), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	back, err := bson.ParseDecimal128(strconv.FormatFloat(f, 'g', -1, 64))
	if err != nil {
		return 0, false
	}
	return f, jobdef.DecimalText(back) == jobdef.DecimalText(d)
}

func (c *outConv) date(ms int64) {
	if c.epoch {
		c.buf = strconv.AppendInt(c.buf, ms, 10)
		return
	}
	c.buf = jobdef.AppendJSONString(c.buf, isoDate(ms))
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

// timestamp writes a BSON Timestamp as {t, i}.
func (c *outConv) timestamp(t, i int64) {
	c.buf = append(c.buf, `{"t":`...)
	c.buf = strconv.AppendInt(c.buf, t, 10)
	c.buf = append(c.buf, `,"i":`...)
	c.buf = strconv.AppendInt(c.buf, i, 10)
	c.buf = append(c.buf, '}')
}

// special writes the BSON classes of doc.go; handled is false for any
// other object.
func (c *outConv) special(o *goja.Object) (handled bool, err error) {
	v := c.v
	switch o.Prototype() {
	case v.protos.oid:
		p, ok := payload(o).(*oidValue)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed ObjectId")
		}
		c.buf = jobdef.AppendJSONString(c.buf, p.hex)
	case v.protos.dec:
		p, ok := payload(o).(*decValue)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		d, err := bson.ParseDecimal128(p.text)
		if p.bits != nil {
			d, err = bson.NewDecimal128(binary.LittleEndian.Uint64(p.bits[8:]), binary.LittleEndian.Uint64(p.bits[:8])), nil
		}
		if err != nil {
			return true, c.fail(errs.NotADocument, "a malformed Decimal128")
		}
		c.decimal(d)
	case v.protos.bin:
		p, ok := payload(o).(*binValue)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed Binary")
		}
		s := p.uuid
		if s == "" {
			s = p.b64
		}
		c.buf = jobdef.AppendJSONString(c.buf, s)
	case v.protos.ts:
		t, i, ok := timestampFields(o)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed Timestamp")
		}
		c.timestamp(t, i)
	case v.protos.re:
		pat, opts, ok := regexFields(o)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed BSONRegExp")
		}
		c.buf = jobdef.AppendJSONString(c.buf, "/"+pat+"/"+opts)
	case v.protos.opaque:
		p, ok := payload(o).(*opaqueValue)
		if !ok {
			return true, c.fail(errs.NotADocument, "a malformed BSON value")
		}
		c.buf = jobdef.AppendJSONString(c.buf, p.json)
	default:
		return false, nil
	}
	return true, nil
}

// timestampFields reads a Timestamp's t and i (a transform may have
// deleted or replaced them); ok is false when either is missing or not
// a number.
func timestampFields(o *goja.Object) (t, i int64, ok bool) {
	tv, iv := o.Get("t"), o.Get("i")
	if !isPrimitiveNumber(orUndefined(tv)) || !isPrimitiveNumber(orUndefined(iv)) {
		return 0, 0, false
	}
	return tv.ToInteger(), iv.ToInteger(), true
}

// regexFields reads a BSONRegExp's pattern and options, which must be
// strings.
func regexFields(o *goja.Object) (pattern, options string, ok bool) {
	pv, ov := o.Get("pattern"), o.Get("options")
	if !isPrimitiveString(orUndefined(pv)) || !isPrimitiveString(orUndefined(ov)) {
		return "", "", false
	}
	return pv.String(), ov.String(), true
}

func orUndefined(v goja.Value) goja.Value {
	if v == nil {
		return goja.Undefined()
	}
	return v
}

// docFromBSON writes a BSON document straight as JSON, with the same rules
// a document going through JavaScript gets (the top-level one: the
// identity, with its primary key set).
func (c *outConv) docFromBSON(raw []byte) error {
	if err := c.open('{'); err != nil {
		return err
	}
	n := 0
	err := jobdef.EachElement(raw, func(key string, val bsoncore.Value) error {
		return c.member(&n, key, func() (bool, error) { return c.bsonValue(val) })
	})
	if err != nil {
		return errs.WithJob(c.job.Name, err)
	}
	if err := c.endObject(n); err != nil {
		return err
	}
	return c.room(0)
}

// bsonValue writes one BSON value; ok is false for undefined.
func (c *outConv) bsonValue(val bsoncore.Value) (ok bool, err error) {
	switch val.Type {
	case bsoncore.TypeDouble:
		return true, c.number(val.Double())
	case bsoncore.TypeString:
		c.buf = jobdef.AppendJSONString(c.buf, val.StringValue())
	case bsoncore.TypeEmbeddedDocument:
		return true, c.docFromBSON(val.Data)
	case bsoncore.TypeArray:
		if err := c.open('['); err != nil {
			return false, err
		}
		err := eachValue(val.Data, func(i int, ev bsoncore.Value) error {
			if i > 0 {
				c.buf = append(c.buf, ',')
			}
			c.path = append(c.path, strconv.Itoa(i))
			ok, err := c.bsonValue(ev)
			if err != nil {
				return err
			}
			c.path = c.path[:len(c.path)-1]
			if !ok {
				c.buf = append(c.buf, "null"...)
			}
			return c.room(0)
		})
		if err != nil {
			return false, err
		}
		c.close(']')
	case bsoncore.TypeBinary:
		sub, data, ok := val.BinaryOK()
		if !ok {
			return false, c.fail(errs.NotADocument, "a malformed BSON binary value")
		}
		s := uuidString(sub, data)
		if s == "" {
			s = base64.StdEncoding.EncodeToString(data)
		}
		c.buf = jobdef.AppendJSONString(c.buf, s)
	case bsoncore.TypeUndefined:
		return false, nil
	case bsoncore.TypeObjectID:
		c.buf = append(c.buf, '"')
		c.buf = hex.AppendEncode(c.buf, val.Data[:12])
		c.buf = append(c.buf, '"')
	case bsoncore.TypeBoolean:
		c.buf = strconv.AppendBool(c.buf, val.Boolean())
	case bsoncore.TypeDateTime:
		ms := val.DateTime()
		if ms > maxJSTime || ms < -maxJSTime {
			return false, c.fail(errs.NotADocument, "a date outside the range JavaScript dates can hold")
		}
		c.date(ms)
	case bsoncore.TypeNull:
		c.buf = append(c.buf, "null"...)
	case bsoncore.TypeRegex:
		p, o := val.Regex()
		c.buf = jobdef.AppendJSONString(c.buf, "/"+p+"/"+o)
	case bsoncore.TypeJavaScript, bsoncore.TypeSymbol:
		s, _, ok := bsoncore.ReadString(val.Data)
		if !ok {
			return false, c.fail(errs.NotADocument, "a malformed BSON string")
		}
		c.buf = jobdef.AppendJSONString(c.buf, s)
	case bsoncore.TypeInt32:
		c.buf = strconv.AppendInt(c.buf, int64(val.Int32()), 10)
	case bsoncore.TypeTimestamp:
		t, i := val.Timestamp()
		c.timestamp(int64(t), int64(i))
	case bsoncore.TypeInt64:
		c.buf = strconv.AppendInt(c.buf, val.Int64(), 10)
	case bsoncore.TypeDecimal128:
		h, l := val.Decimal128()
		c.decimal(bson.NewDecimal128(h, l))
	default:
		c.buf = jobdef.AppendJSONString(c.buf, opaqueJSON(val))
	}
	return true, nil
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

// describeID shows an id in an ID_MISMATCH message: its kind, and the value
// only when it is an id (a string or integer Meilisearch could hold), which
// is no more than the document's _id already says.
func describeID(x any) string {
	switch v := x.(type) {
	case string:
		if jobdef.InIDAlphabet(v) && len(v) <= jobdef.MaxIndexIDLen {
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

// kindOf names the kind of a JSON-ready value for an error, never the
// value: what a transform or a document put under the primary key is
// theirs, not an id.
func kindOf(x any) string {
	switch x.(type) {
	case string:
		return "a string"
	case int64, uint64, float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a value"
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
