package jobdef

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// IDKey returns a key for a source _id that is equal for two _ids exactly
// when MongoDB holds them as one _id: its unique _id index compares values,
// not BSON types and bytes. So int32 5, int64 5, double 5.0 and
// Decimal128 5.00 have one key (numbers compare by value, NaNs are all
// equal, -0 is 0), a Symbol has the key of the string it holds, and two
// documents have one key when their fields, in order, have the same names
// and keys. Every other type is its own kind of value: a date is never a
// timestamp, null is not undefined. These are the rules of the server's
// index keys (KeyString: the "canonical types" of
// src/mongo/db/storage/key_string/key_string.cpp in mongodb/mongo, where
// all numbers are kNumeric with one kNumericNaN and String and Symbol are
// both kStringLike) and of its comparison order
// (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/:
// "all numeric types are considered equivalent in comparisons"). Strings
// compare by their bytes: a collection with a non-simple default collation
// (where "a" and "A" may be one _id) is not taken into account.
//
// Compare _ids from different sources with it (say, ids read back from a
// destination, rebuilt by ParseIndexID, against the collection's own):
// IDKey(ParseIndexID(IndexID(id))) == IDKey(id) for every id IndexID
// accepts. The key is binary, not for display.
func IDKey(id bson.RawValue) string {
	return string(AppendIDKey(make([]byte, 0, 2+len(id.Value)), id))
}

// AppendIDKey appends IDKey(id) to b: for a key looked up in a map
// (m[string(key)] makes no string) where IDKey would allocate one per _id.
func AppendIDKey(b []byte, id bson.RawValue) []byte {
	return appendIDKey(b, bsoncore.Type(id.Type), id.Value, 0)
}

// maxIDKeyDepth bounds the recursion into an _id made of documents
// (MongoDB stores at most 100 levels); deeper, the rest is keyed by its
// bytes.
const maxIDKeyDepth = 200

// The canonical kinds, one byte each; 0 ends a document or an array.
const (
	keyMinKey    = 'm'
	keyUndefined = 'u'
	keyNull      = 'z'
	keyNumber    = 'n'
	keyString    = 's'
	keyObject    = 'o'
	keyArray     = 'a'
	keyBinary    = 'B'
	keyObjectID  = 'O'
	keyFalse     = 'f'
	keyTrue      = 't'
	keyDate      = 'D'
	keyTimestamp = 'T'
	keyRegex     = 'R'
	keyDBPointer = 'P'
	keyCode      = 'J'
	keyCodeScope = 'W'
	keyMaxKey    = 'M'
	keyRaw       = 'x' // malformed, or nested too deep: type and bytes
)

func appendIDKey(b []byte, t bsoncore.Type, data []byte, depth int) []byte {
	raw := func() []byte {
		b = append(b, keyRaw, byte(t))
		return appendLenBytes(b, data)
	}
	v := bsoncore.Value{Type: t, Data: data}
	switch t {
	case bsoncore.TypeMinKey:
		return append(b, keyMinKey)
	case bsoncore.TypeMaxKey:
		return append(b, keyMaxKey)
	case bsoncore.TypeNull:
		return append(b, keyNull)
	case bsoncore.TypeUndefined:
		return append(b, keyUndefined)
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		if !ok {
			return raw()
		}
		return appendIntKey(b, int64(n))
	case bsoncore.TypeInt64:
		n, ok := v.Int64OK()
		if !ok {
			return raw()
		}
		return appendIntKey(b, n)
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if !ok {
			return raw()
		}
		if f != 0 && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return appendIntKey(b, int64(f))
		}
		return appendNumberKey(b, doubleText(f))
	case bsoncore.TypeDecimal128:
		h, l, ok := v.Decimal128OK()
		if !ok {
			return raw()
		}
		return appendNumberKey(b, DecimalText(bson.NewDecimal128(h, l)))
	case bsoncore.TypeString, bsoncore.TypeSymbol:
		s, rest, ok := bsoncore.ReadString(data)
		if !ok || len(rest) != 0 {
			return raw()
		}
		b = append(b, keyString)
		return appendLenBytes(b, []byte(s))
	case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
		if depth >= maxIDKeyDepth {
			return raw()
		}
		kind, withKeys := byte(keyObject), true
		if t == bsoncore.TypeArray {
			kind, withKeys = keyArray, false
		}
		out := append(b, kind)
		err := EachElement(data, func(key string, ev bsoncore.Value) error {
			if withKeys {
				out = appendLenBytes(out, []byte(key))
			}
			out = appendIDKey(out, ev.Type, ev.Data, depth+1)
			return nil
		})
		if err != nil {
			return raw()
		}
		return append(out, 0)
	case bsoncore.TypeBinary:
		// Length, subtype and bytes all count (and an old binary's inner
		// length with them): the whole value.
		if _, _, ok := v.BinaryOK(); !ok {
			return raw()
		}
		b = append(b, keyBinary)
		return appendLenBytes(b, data)
	case bsoncore.TypeObjectID:
		if len(data) != 12 {
			return raw()
		}
		b = append(b, keyObjectID)
		return append(b, data...)
	case bsoncore.TypeBoolean:
		if len(data) != 1 {
			return raw()
		}
		if data[0] != 0 {
			return append(b, keyTrue)
		}
		return append(b, keyFalse)
	case bsoncore.TypeDateTime:
		ms, ok := v.DateTimeOK()
		if !ok {
			return raw()
		}
		b = append(b, keyDate)
		return binary.BigEndian.AppendUint64(b, uint64(ms))
	case bsoncore.TypeTimestamp:
		ts, inc, ok := v.TimestampOK()
		if !ok {
			return raw()
		}
		b = append(b, keyTimestamp)
		return binary.BigEndian.AppendUint64(b, uint64(ts)<<32|uint64(inc))
	case bsoncore.TypeRegex:
		p, o, ok := v.RegexOK()
		if !ok {
			return raw()
		}
		b = append(b, keyRegex)
		b = appendLenBytes(b, []byte(p))
		return appendLenBytes(b, []byte(o))
	case bsoncore.TypeDBPointer:
		ns, oid, ok := v.DBPointerOK()
		if !ok {
			return raw()
		}
		b = append(b, keyDBPointer)
		b = appendLenBytes(b, []byte(ns))
		return append(b, oid[:]...)
	case bsoncore.TypeJavaScript:
		code, ok := v.JavaScriptOK()
		if !ok {
			return raw()
		}
		b = append(b, keyCode)
		return appendLenBytes(b, []byte(code))
	case bsoncore.TypeCodeWithScope:
		code, scope, ok := v.CodeWithScopeOK()
		if !ok || depth >= maxIDKeyDepth {
			return raw()
		}
		b = append(b, keyCodeScope)
		b = appendLenBytes(b, []byte(code))
		return appendIDKey(b, bsoncore.TypeEmbeddedDocument, scope, depth+1)
	}
	return raw()
}

func appendLenBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendNumberKey(b []byte, text string) []byte {
	b = append(b, keyNumber)
	return appendLenBytes(b, []byte(text))
}

// appendIntKey is appendNumberKey(b, intText(n)) without making its
// strings: integer _ids are the common ones, and a walk of a destination's
// ids keys every one of them.
func appendIntKey(b []byte, n int64) []byte {
	if n == 0 {
		return appendNumberKey(b, "0")
	}
	var d, t [48]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	text := t[:0]
	if digits[0] == '-' {
		text, digits = append(text, '-'), digits[1:]
	}
	trimmed := bytes.TrimRight(digits, "0")
	text = append(text, trimmed...)
	text = append(text, 'e')
	text = strconv.AppendInt(text, int64(len(digits)-len(trimmed)), 10)
	b = append(b, keyNumber)
	return appendLenBytes(b, text)
}

// A number's key text is its exact value: "NaN", "+Inf", "-Inf", "0", or
// a sign, the significant digits without leading or trailing zeros, 'e'
// and the power of ten ("-12e3" is -12000, "5e-1" is 0.5).

func intText(n int64) string {
	if n == 0 {
		return "0"
	}
	return normalizeDigits(strconv.FormatInt(n, 10), 0)
}

func doubleText(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case f == 0:
		return "0"
	case f == math.Trunc(f) && math.Abs(f) < 1<<63:
		return intText(int64(f))
	}
	// f is m * 2^e exactly, with m an integer: for e < 0 that is
	// m * 5^-e * 10^e.
	frac, exp := math.Frexp(f) // f = frac * 2^exp, 0.5 <= |frac| < 1
	m := int64(frac * (1 << 53))
	e := exp - 53
	c := big.NewInt(m)
	if e >= 0 {
		c.Lsh(c, uint(e))
		return normalizeDigits(c.String(), 0)
	}
	c.Mul(c, new(big.Int).Exp(big.NewInt(5), big.NewInt(int64(-e)), nil))
	return normalizeDigits(c.String(), e)
}

// maxDecimalCoefficient is 10^34: a Decimal128 significand at or above it
// is not canonical and, as IEEE 754-2008 says, is zero.
var maxDecimalCoefficient = new(big.Int).Exp(big.NewInt(10), big.NewInt(34), nil)

// DecimalText is the exact decimal text of d, one text for one number
// (so two Decimal128 values are equal exactly when their texts are).
func DecimalText(d bson.Decimal128) string {
	if d.IsNaN() {
		return "NaN"
	}
	switch d.IsInf() {
	case 1:
		return "+Inf"
	case -1:
		return "-Inf"
	}
	c, exp, err := d.BigInt()
	if err != nil || c.Sign() == 0 || new(big.Int).Abs(c).Cmp(maxDecimalCoefficient) >= 0 {
		return "0"
	}
	return normalizeDigits(c.String(), exp)
}

// normalizeDigits writes the integer in digits (maybe signed) times 10^exp
// as the key text: trailing zeros move into the exponent.
func normalizeDigits(digits string, exp int) string {
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	return sign + trimmed + "e" + strconv.Itoa(exp)
}
