package mongotest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// Values inside the server are plain Go values: bson.D for documents, bson.A
// for arrays, and float64, string, bson.Binary, bson.Undefined, bson.ObjectID,
// bool, bson.DateTime, nil (null), bson.Regex, bson.DBPointer,
// bson.JavaScript, bson.Symbol, bson.CodeWithScope, int32, bson.Timestamp,
// int64, bson.Decimal128, bson.MinKey, bson.MaxKey for the rest. Stored
// documents are raw BSON (immutable byte slices); they are decoded with the
// hand-written decoder below (no reflection) only when a command needs them.

// missingT marks an absent value in expression evaluation ("missing" in
// MongoDB's terms, distinct from null).
type missingT struct{}

var missing any = missingT{}

func isMissing(v any) bool { _, ok := v.(missingT); return ok }

// decodeDoc decodes a raw BSON document into a bson.D.
func decodeDoc(raw []byte) (bson.D, error) {
	if len(raw) < 5 {
		return nil, fmt.Errorf("document too short")
	}
	l := int(binary.LittleEndian.Uint32(raw))
	if l > len(raw) || l < 5 {
		return nil, fmt.Errorf("invalid document length")
	}
	rem := raw[4 : l-1]
	d := make(bson.D, 0, 8)
	for len(rem) > 0 {
		el, r, ok := bsoncore.ReadElement(rem)
		if !ok {
			return nil, fmt.Errorf("malformed BSON element")
		}
		rem = r
		v, err := decodeValue(el.Value())
		if err != nil {
			return nil, err
		}
		d = append(d, bson.E{Key: el.Key(), Value: v})
	}
	return d, nil
}

func mustDecode(raw []byte) bson.D {
	d, err := decodeDoc(raw)
	if err != nil {
		panic(err)
	}
	return d
}

func decodeArray(raw []byte) (bson.A, error) {
	d, err := decodeDoc(raw)
	if err != nil {
		return nil, err
	}
	a := make(bson.A, len(d))
	for i, e := range d {
		a[i] = e.Value
	}
	return a, nil
}

func decodeValue(v bsoncore.Value) (any, error) {
	switch v.Type {
	case bsoncore.TypeDouble:
		return v.Double(), nil
	case bsoncore.TypeString:
		return v.StringValue(), nil
	case bsoncore.TypeEmbeddedDocument:
		return decodeDoc(v.Data)
	case bsoncore.TypeArray:
		return decodeArray(v.Data)
	case bsoncore.TypeBinary:
		st, data := v.Binary()
		return bson.Binary{Subtype: st, Data: append([]byte(nil), data...)}, nil
	case bsoncore.TypeUndefined:
		return bson.Undefined{}, nil
	case bsoncore.TypeObjectID:
		return bson.ObjectID(v.ObjectID()), nil
	case bsoncore.TypeBoolean:
		return v.Boolean(), nil
	case bsoncore.TypeDateTime:
		return bson.DateTime(v.DateTime()), nil
	case bsoncore.TypeNull:
		return nil, nil
	case bsoncore.TypeRegex:
		p, o := v.Regex()
		return bson.Regex{Pattern: p, Options: o}, nil
	case bsoncore.TypeDBPointer:
		ns, oid := v.DBPointer()
		return bson.DBPointer{DB: ns, Pointer: bson.ObjectID(oid)}, nil
	case bsoncore.TypeJavaScript:
		return bson.JavaScript(v.JavaScript()), nil
	case bsoncore.TypeSymbol:
		return bson.Symbol(v.Symbol()), nil
	case bsoncore.TypeCodeWithScope:
		code, scope := v.CodeWithScope()
		sd, err := decodeDoc(scope)
		if err != nil {
			return nil, err
		}
		return bson.CodeWithScope{Code: bson.JavaScript(code), Scope: sd}, nil
	case bsoncore.TypeInt32:
		return v.Int32(), nil
	case bsoncore.TypeTimestamp:
		t, i := v.Timestamp()
		return bson.Timestamp{T: t, I: i}, nil
	case bsoncore.TypeInt64:
		return v.Int64(), nil
	case bsoncore.TypeDecimal128:
		h, l := v.Decimal128()
		return bson.NewDecimal128(h, l), nil
	case bsoncore.TypeMinKey:
		return bson.MinKey{}, nil
	case bsoncore.TypeMaxKey:
		return bson.MaxKey{}, nil
	}
	return nil, fmt.Errorf("unknown BSON type 0x%02x", byte(v.Type))
}

// rawLookup returns the decoded top-level field key of a raw document.
func rawLookup(raw []byte, key string) (any, bool) {
	v, err := bsoncore.Document(raw).LookupErr(key)
	if err != nil {
		return nil, false
	}
	dv, err := decodeValue(v)
	if err != nil {
		return nil, false
	}
	return dv, true
}

// encodeDoc encodes a document (bson.D, or raw bytes passed through).
func encodeDoc(d bson.D) []byte {
	return appendDoc(make([]byte, 0, 64), d)
}

func appendDoc(dst []byte, d bson.D) []byte {
	idx, dst := bsoncore.ReserveLength(dst)
	for _, e := range d {
		dst = appendElem(dst, e.Key, e.Value)
	}
	dst = append(dst, 0)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}

func appendArr(dst []byte, n int, at func(i int) any) []byte {
	idx, dst := bsoncore.ReserveLength(dst)
	var kb [20]byte
	j := 0
	for i := 0; i < n; i++ {
		v := at(i)
		if isMissing(v) {
			continue
		}
		dst = appendElem(dst, string(strconv.AppendInt(kb[:0], int64(j), 10)), v)
		j++
	}
	dst = append(dst, 0)
	return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:])))
}

func appendElem(dst []byte, key string, v any) []byte {
	switch x := v.(type) {
	case missingT:
		return dst
	case nil:
		return bsoncore.AppendNullElement(dst, key)
	case bson.Null:
		return bsoncore.AppendNullElement(dst, key)
	case float64:
		return bsoncore.AppendDoubleElement(dst, key, x)
	case float32:
		return bsoncore.AppendDoubleElement(dst, key, float64(x))
	case string:
		return bsoncore.AppendStringElement(dst, key, x)
	case bson.D:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeEmbeddedDocument, key)
		return appendDoc(dst, x)
	case bson.M:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := make(bson.D, len(keys))
		for i, k := range keys {
			d[i] = bson.E{Key: k, Value: x[k]}
		}
		return appendElem(dst, key, d)
	case bson.Raw:
		return bsoncore.AppendDocumentElement(dst, key, x)
	case bsoncore.Document:
		return bsoncore.AppendDocumentElement(dst, key, x)
	case rawDoc:
		return bsoncore.AppendDocumentElement(dst, key, x)
	case bson.A:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, key)
		return appendArr(dst, len(x), func(i int) any { return x[i] })
	case []any:
		return appendElem(dst, key, bson.A(x))
	case []bson.D:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, key)
		return appendArr(dst, len(x), func(i int) any { return x[i] })
	case []rawDoc:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, key)
		return appendArr(dst, len(x), func(i int) any { return x[i] })
	case []string:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, key)
		return appendArr(dst, len(x), func(i int) any { return x[i] })
	case []int64:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, key)
		return appendArr(dst, len(x), func(i int) any { return x[i] })
	case bson.Binary:
		return bsoncore.AppendBinaryElement(dst, key, x.Subtype, x.Data)
	case []byte:
		return bsoncore.AppendBinaryElement(dst, key, 0, x)
	case bson.Undefined:
		return bsoncore.AppendUndefinedElement(dst, key)
	case bson.ObjectID:
		return bsoncore.AppendObjectIDElement(dst, key, x)
	case bool:
		return bsoncore.AppendBooleanElement(dst, key, x)
	case bson.DateTime:
		return bsoncore.AppendDateTimeElement(dst, key, int64(x))
	case time.Time:
		return bsoncore.AppendDateTimeElement(dst, key, x.UnixMilli())
	case bson.Regex:
		return bsoncore.AppendRegexElement(dst, key, x.Pattern, sortedOptions(x.Options))
	case bson.DBPointer:
		return bsoncore.AppendDBPointerElement(dst, key, x.DB, x.Pointer)
	case bson.JavaScript:
		return bsoncore.AppendJavaScriptElement(dst, key, string(x))
	case bson.Symbol:
		return bsoncore.AppendSymbolElement(dst, key, string(x))
	case bson.CodeWithScope:
		var scope []byte
		switch s := x.Scope.(type) {
		case bson.D:
			scope = encodeDoc(s)
		case bson.Raw:
			scope = s
		default:
			scope = encodeDoc(nil)
		}
		return bsoncore.AppendCodeWithScopeElement(dst, key, string(x.Code), scope)
	case int32:
		return bsoncore.AppendInt32Element(dst, key, x)
	case int:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return bsoncore.AppendInt32Element(dst, key, int32(x))
		}
		return bsoncore.AppendInt64Element(dst, key, int64(x))
	case int64:
		return bsoncore.AppendInt64Element(dst, key, x)
	case bson.Timestamp:
		return bsoncore.AppendTimestampElement(dst, key, x.T, x.I)
	case bson.Decimal128:
		h, l := x.GetBytes()
		return bsoncore.AppendDecimal128Element(dst, key, h, l)
	case bson.MinKey:
		return bsoncore.AppendMinKeyElement(dst, key)
	case bson.MaxKey:
		return bsoncore.AppendMaxKeyElement(dst, key)
	}
	// Anything else (values handed in through the Go API): let the driver's
	// codec encode it, then decode it into our representation.
	t, data, err := bson.MarshalValue(v)
	if err != nil {
		panic(fmt.Sprintf("mongotest: cannot encode %T: %v", v, err))
	}
	return bsoncore.AppendValueElement(dst, key, bsoncore.Value{Type: bsoncore.Type(t), Data: data})
}

func sortedOptions(o string) string {
	b := []byte(o)
	sort.Slice(b, func(i, j int) bool { return b[i] < b[j] })
	return string(b)
}

// sizeHint estimates the encoded size of a reply: exact for raw documents,
// a guess for the rest. It only sizes buffers.
func sizeHint(v any) int {
	switch x := v.(type) {
	case rawDoc:
		return len(x) + 8
	case bson.Raw:
		return len(x) + 8
	case bson.D:
		n := 5
		for _, e := range x {
			n += len(e.Key) + 2 + sizeHint(e.Value)
		}
		return n
	case bson.A:
		n := 5
		for _, e := range x {
			n += 8 + sizeHint(e)
		}
		return n
	case string:
		return len(x) + 5
	}
	return 16
}

// rawDoc is a stored raw document that is embedded as is when encoding.
type rawDoc []byte

// normalize converts an arbitrary Go value (from the Go API) into the
// server's representation by a BSON round trip.
func normalize(v any) any {
	b := appendElem(nil, "v", v)
	doc := bsoncore.BuildDocument(nil, b)
	d, err := decodeDoc(doc)
	if err != nil || len(d) != 1 {
		return nil
	}
	return d[0].Value
}

// canonical type order, from canonicalizeBSONType (src/mongo/bson/bsontypes.cpp).
func canonType(v any) int {
	switch x := v.(type) {
	case bson.MinKey:
		return -1
	case missingT, bson.Undefined:
		return 0
	case nil, bson.Null:
		return 5
	case int32, int64, float64, bson.Decimal128, int:
		return 10
	case string, bson.Symbol:
		return 15
	case bson.D, rawDoc, bson.Raw:
		return 20
	case bson.A:
		return 25
	case bson.Binary:
		return 30
	case bson.ObjectID:
		return 35
	case bool:
		return 40
	case bson.DateTime:
		return 45
	case bson.Timestamp:
		return 47
	case bson.Regex:
		return 50
	case bson.DBPointer:
		return 55
	case bson.JavaScript:
		return 60
	case bson.CodeWithScope:
		return 65
	case bson.MaxKey:
		return 127
	default:
		_ = x
		return 100
	}
}

func isNumber(v any) bool {
	switch v.(type) {
	case int32, int64, float64, bson.Decimal128, int:
		return true
	}
	return false
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case float64:
		return x
	case bson.Decimal128:
		f, err := strconv.ParseFloat(x.String(), 64)
		if err != nil {
			if x.IsNaN() {
				return math.NaN()
			}
			if s := x.IsInf(); s != 0 {
				return math.Inf(s)
			}
		}
		return f
	}
	return 0
}

// 2^63 as a double: the first double above every int64.
const twoTo63 = 0x1p63

// floatInInt64 says whether the integral double f is an int64.
func floatInInt64(f float64) bool { return f >= -twoTo63 && f < twoTo63 }

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && floatInInt64(x) {
			return int64(x), true
		}
	case bson.Decimal128:
		if r := decimalRat(x); r != nil && r.IsInt() && r.Num().IsInt64() {
			return r.Num().Int64(), true
		}
	}
	return 0, false
}

// decimalRat is the exact value of a finite decimal, nil for NaN and the
// infinities.
func decimalRat(d bson.Decimal128) *big.Rat {
	bi, exp, err := d.BigInt()
	if err != nil {
		return nil
	}
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
	if exp >= 0 {
		return new(big.Rat).SetInt(bi.Mul(bi, p))
	}
	return new(big.Rat).SetFrac(bi, p)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// compareNumbers orders two numbers of any BSON numeric types by their exact
// values, as mongod does (src/mongo/base/compare_numbers.h): an int64
// beyond 2^53 is not rounded to a double, so NumberLong(9007199254740993)
// is above 9007199254740992.0; a decimal is compared with a double
// exactly (decimal 0.1 is below double 0.1); NaN of either type equals NaN
// and is below every other number, -Infinity next; -0 equals 0.
func compareNumbers(a, b any) int {
	ai, aInt := intOf(a)
	bi, bInt := intOf(b)
	af, aFloat := a.(float64)
	bf, bFloat := b.(float64)
	switch {
	case aInt && bInt:
		return cmp3(ai, bi)
	case aFloat && bFloat:
		return compareDoubles(af, bf)
	case aInt && bFloat:
		return compareLongToDouble(ai, bf)
	case aFloat && bInt:
		return -compareLongToDouble(bi, af)
	}
	return compareExact(a, b)
}

func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

// compareDoubles is mongod's: NaN equals NaN and is below every number.
func compareDoubles(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	case math.IsNaN(a):
		if math.IsNaN(b) {
			return 0
		}
		return -1
	}
	return 1
}

// compareLongToDouble is mongod's: an int64 of magnitude up to 2^53 is
// exact as a double; above, a double is an integer, compared as an int64
// unless it lies outside the int64 range.
func compareLongToDouble(l int64, d float64) int {
	if math.IsNaN(d) {
		return 1
	}
	if l <= 1<<53 && l >= -(1<<53) {
		return compareDoubles(float64(l), d)
	}
	if d >= twoTo63 {
		return -1
	}
	if d < -twoTo63 {
		return 1
	}
	return cmp3(l, int64(d))
}

// exactNum is a number's exact value: a class (NaN below -Infinity below
// the finite values below +Infinity) and, for a finite value, a rational.
type exactNum struct {
	class int // 0 NaN, 1 -Inf, 2 finite, 3 +Inf
	r     *big.Rat
}

func exactOf(v any) exactNum {
	switch x := v.(type) {
	case bson.Decimal128:
		if x.IsNaN() {
			return exactNum{class: 0}
		}
		if s := x.IsInf(); s != 0 {
			return exactNum{class: 2 + s}
		}
		return exactNum{class: 2, r: decimalRat(x)}
	case float64:
		switch {
		case math.IsNaN(x):
			return exactNum{class: 0}
		case math.IsInf(x, -1):
			return exactNum{class: 1}
		case math.IsInf(x, 1):
			return exactNum{class: 3}
		}
		return exactNum{class: 2, r: new(big.Rat).SetFloat64(x)}
	}
	i, _ := intOf(v)
	return exactNum{class: 2, r: new(big.Rat).SetInt64(i)}
}

// compareExact compares any two numbers by their exact values; mongod's
// decimal comparisons (compareDecimals, compareDecimalToDouble) give the
// same order.
func compareExact(a, b any) int {
	x, y := exactOf(a), exactOf(b)
	if x.class != y.class || x.class != 2 {
		return cmp3(x.class, y.class)
	}
	return x.r.Cmp(y.r)
}

func cmp3[T int64 | uint32 | int | float64 | string](a, b T) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// compareValues orders any two values the way MongoDB does
// (Value::compare / BSONElement::woCompare): canonical type first, then value.
func compareValues(a, b any) int {
	ta, tb := canonType(a), canonType(b)
	if ta != tb {
		return cmp3(ta, tb)
	}
	switch x := a.(type) {
	case int32, int64, float64, bson.Decimal128, int:
		return compareNumbers(a, b)
	case string:
		return strings.Compare(x, stringOf(b))
	case bson.Symbol:
		return strings.Compare(string(x), stringOf(b))
	case bson.D:
		return compareDocs(x, asDoc(b))
	case rawDoc:
		return compareDocs(mustDecode(x), asDoc(b))
	case bson.A:
		y := b.(bson.A)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compareValues(x[i], y[i]); c != 0 {
				return c
			}
		}
		return cmp3(len(x), len(y))
	case bson.Binary:
		y := b.(bson.Binary)
		if c := cmp3(len(x.Data), len(y.Data)); c != 0 {
			return c
		}
		if c := cmp3(int(x.Subtype), int(y.Subtype)); c != 0 {
			return c
		}
		return bytes.Compare(x.Data, y.Data)
	case bson.ObjectID:
		y := b.(bson.ObjectID)
		return bytes.Compare(x[:], y[:])
	case bool:
		y := b.(bool)
		if x == y {
			return 0
		}
		if !x {
			return -1
		}
		return 1
	case bson.DateTime:
		return cmp3(int64(x), int64(b.(bson.DateTime)))
	case bson.Timestamp:
		y := b.(bson.Timestamp)
		if c := cmp3(x.T, y.T); c != 0 {
			return c
		}
		return cmp3(x.I, y.I)
	case bson.Regex:
		y := b.(bson.Regex)
		if c := strings.Compare(x.Pattern, y.Pattern); c != 0 {
			return c
		}
		return strings.Compare(x.Options, y.Options)
	case bson.DBPointer:
		y := b.(bson.DBPointer)
		if c := cmp3(len(x.DB), len(y.DB)); c != 0 {
			return c
		}
		if c := strings.Compare(x.DB, y.DB); c != 0 {
			return c
		}
		return bytes.Compare(x.Pointer[:], y.Pointer[:])
	case bson.JavaScript:
		return strings.Compare(string(x), string(b.(bson.JavaScript)))
	case bson.CodeWithScope:
		y := b.(bson.CodeWithScope)
		if c := strings.Compare(string(x.Code), string(y.Code)); c != 0 {
			return c
		}
		sx, _ := x.Scope.(bson.D)
		sy, _ := y.Scope.(bson.D)
		return compareDocs(sx, sy)
	}
	return 0
}

func stringOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bson.Symbol:
		return string(x)
	}
	return ""
}

func asDoc(v any) bson.D {
	switch x := v.(type) {
	case bson.D:
		return x
	case rawDoc:
		return mustDecode(x)
	case bson.Raw:
		return mustDecode(x)
	}
	return nil
}

// compareDocs compares element by element: canonical type, field name, value
// (BSONObj::woCompare).
func compareDocs(x, y bson.D) int {
	for i := 0; i < len(x) && i < len(y); i++ {
		if c := cmp3(canonType(x[i].Value), canonType(y[i].Value)); c != 0 {
			return c
		}
		if c := strings.Compare(x[i].Key, y[i].Key); c != 0 {
			return c
		}
		if c := compareValues(x[i].Value, y[i].Value); c != 0 {
			return c
		}
	}
	return cmp3(len(x), len(y))
}

// typeName is the $type name of a value (typeName() in bsontypes.cpp).
func typeName(v any) string {
	switch v.(type) {
	case missingT:
		return "missing"
	case float64:
		return "double"
	case string:
		return "string"
	case bson.D, rawDoc, bson.Raw:
		return "object"
	case bson.A:
		return "array"
	case bson.Binary:
		return "binData"
	case bson.Undefined:
		return "undefined"
	case bson.ObjectID:
		return "objectId"
	case bool:
		return "bool"
	case bson.DateTime:
		return "date"
	case nil, bson.Null:
		return "null"
	case bson.Regex:
		return "regex"
	case bson.DBPointer:
		return "dbPointer"
	case bson.JavaScript:
		return "javascript"
	case bson.Symbol:
		return "symbol"
	case bson.CodeWithScope:
		return "javascriptWithScope"
	case int32, int:
		return "int"
	case bson.Timestamp:
		return "timestamp"
	case int64:
		return "long"
	case bson.Decimal128:
		return "decimal"
	case bson.MinKey:
		return "minKey"
	case bson.MaxKey:
		return "maxKey"
	}
	return "unknown"
}

// typeNumber is the BSON type number of a value (for $type queries).
func typeNumber(v any) int {
	switch v.(type) {
	case float64:
		return 1
	case string:
		return 2
	case bson.D, rawDoc, bson.Raw:
		return 3
	case bson.A:
		return 4
	case bson.Binary:
		return 5
	case bson.Undefined:
		return 6
	case bson.ObjectID:
		return 7
	case bool:
		return 8
	case bson.DateTime:
		return 9
	case nil:
		return 10
	case bson.Regex:
		return 11
	case bson.DBPointer:
		return 12
	case bson.JavaScript:
		return 13
	case bson.Symbol:
		return 14
	case bson.CodeWithScope:
		return 15
	case int32, int:
		return 16
	case bson.Timestamp:
		return 17
	case int64:
		return 18
	case bson.Decimal128:
		return 19
	case bson.MinKey:
		return -1
	case bson.MaxKey:
		return 127
	}
	return 0
}

var typeAliases = map[string]int{
	"double": 1, "string": 2, "object": 3, "array": 4, "binData": 5, "undefined": 6,
	"objectId": 7, "bool": 8, "date": 9, "null": 10, "regex": 11, "dbPointer": 12,
	"javascript": 13, "symbol": 14, "javascriptWithScope": 15, "int": 16,
	"timestamp": 17, "long": 18, "decimal": 19, "minKey": -1, "maxKey": 127,
}

// appendKey appends a canonical byte key for v such that two values get the
// same key exactly when MongoDB's index considers them equal (1 == 1.0 ==
// NumberLong(1)). Used for unique index enforcement.
func appendKey(dst []byte, v any) []byte {
	dst = append(dst, byte(canonType(v)+1))
	switch x := v.(type) {
	case missingT, nil, bson.Null, bson.Undefined, bson.MinKey, bson.MaxKey:
		return dst
	case int32, int64, float64, bson.Decimal128, int:
		return appendNumberKey(dst, x)
	case string:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(x)))
		return append(dst, x...)
	case bson.Symbol:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(x)))
		return append(dst, x...)
	case bson.D:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(x)))
		for _, e := range x {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Key)))
			dst = append(dst, e.Key...)
			dst = appendKey(dst, e.Value)
		}
		return dst
	case rawDoc:
		return appendKey(dst[:len(dst)-1], mustDecode(x))
	case bson.A:
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(x)))
		for _, e := range x {
			dst = appendKey(dst, e)
		}
		return dst
	case bson.ObjectID:
		return append(dst, x[:]...)
	case bool:
		if x {
			return append(dst, 1)
		}
		return append(dst, 0)
	case bson.DateTime:
		return binary.BigEndian.AppendUint64(dst, uint64(x))
	case bson.Timestamp:
		dst = binary.BigEndian.AppendUint32(dst, x.T)
		return binary.BigEndian.AppendUint32(dst, x.I)
	}
	// Remaining rare types: their encoding is canonical enough.
	return appendElem(dst, "", v)
}

// appendNumberKey appends a key equal for two numbers exactly when
// compareNumbers finds them equal: an integral value within the int64 range
// by its integer, any other value a double can hold by that double, NaN and
// the infinities by themselves, and a decimal no double holds by its exact
// fraction.
func appendNumberKey(dst []byte, v any) []byte {
	if i, ok := toInt64(v); ok {
		dst = append(dst, 'i')
		return strconv.AppendInt(dst, i, 10)
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case bson.Decimal128:
		e := exactOf(x)
		switch e.class {
		case 0:
			f = math.NaN()
		case 1, 3:
			f = math.Inf(e.class - 2)
		default:
			var exact bool
			if f, exact = e.r.Float64(); !exact {
				dst = append(dst, 'r')
				return append(dst, e.r.String()...)
			}
		}
	}
	if math.IsNaN(f) {
		return append(dst, 'n')
	}
	dst = append(dst, 'f')
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// deepCopy copies documents and arrays so that a value taken from a command
// can be placed into a document that is later modified.
func deepCopy(v any) any {
	switch x := v.(type) {
	case bson.D:
		out := make(bson.D, len(x))
		for i, e := range x {
			out[i] = bson.E{Key: e.Key, Value: deepCopy(e.Value)}
		}
		return out
	case bson.A:
		out := make(bson.A, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// docGet returns the value of key in d.
func docGet(d bson.D, key string) (any, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// formatValue renders a value the way the shell-ish text in server messages
// does ({ _id: "a" }, 1, ObjectId('...')).
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case bson.D:
		if len(x) == 0 {
			return "{}"
		}
		var sb strings.Builder
		sb.WriteString("{ ")
		for i, e := range x {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(e.Key)
			sb.WriteString(": ")
			sb.WriteString(formatValue(e.Value))
		}
		sb.WriteString(" }")
		return sb.String()
	case bson.A:
		var sb strings.Builder
		sb.WriteString("[ ")
		for i, e := range x {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(formatValue(e))
		}
		sb.WriteString(" ]")
		return sb.String()
	case bson.ObjectID:
		return "ObjectId('" + x.Hex() + "')"
	case bson.DateTime:
		return "new Date(" + strconv.FormatInt(int64(x), 10) + ")"
	case nil:
		return "null"
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
