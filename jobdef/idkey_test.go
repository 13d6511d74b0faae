package jobdef_test

import (
	"bytes"
	"math"
	"math/big"
	"strconv"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
)

func dec(t testing.TB, s string) bson.Decimal128 {
	t.Helper()
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Each group is one _id to MongoDB; no two groups are.
func idKeyGroups(t testing.TB) [][]any {
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	return [][]any{
		{int32(5), int64(5), 5.0, dec(t, "5"), dec(t, "5.00"), dec(t, "50E-1"), dec(t, "0.5E1")},
		{int32(0), int64(0), 0.0, math.Copysign(0, -1), dec(t, "0"), dec(t, "-0"), dec(t, "0E+100"), dec(t, "-0.000")},
		{math.NaN(), -math.NaN(), dec(t, "NaN"), dec(t, "-NaN")},
		{math.Inf(1), dec(t, "Infinity")},
		{math.Inf(-1), dec(t, "-Infinity")},
		{0.5, dec(t, "0.5"), dec(t, "5E-1")},
		{0.1}, {dec(t, "0.1")}, // the double is not exactly a tenth
		{int64(1 << 53), float64(1 << 53), dec(t, "9007199254740992")},
		{int64(1<<53 + 1), dec(t, "9007199254740993")},
		{int64(math.MaxInt64), dec(t, "9223372036854775807")},
		{float64(1 << 63), dec(t, "9223372036854775808")},
		{-1e300}, {1e-300}, {dec(t, "1E-6000")}, {dec(t, "-1E+6000")},
		{int32(-7), int64(-7), -7.0, dec(t, "-7.0")},
		{"a", bson.Symbol("a")}, {"A"}, {""}, {"5"},
		{oid}, {oid.Hex()},
		{bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "a", Value: int64(1)}}, bson.D{{Key: "a", Value: 1.0}}},
		{bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 2}}},
		{bson.D{{Key: "b", Value: 2}, {Key: "a", Value: 1}}},
		{bson.D{{Key: "b", Value: 1}}},
		{bson.D{}},
		{bson.D{{Key: "x", Value: bson.A{1, "a"}}}, bson.D{{Key: "x", Value: bson.A{1.0, bson.Symbol("a")}}}},
		{bson.D{{Key: "x", Value: bson.D{{Key: "0", Value: 1}}}}},
		{bson.Binary{Subtype: 0, Data: []byte("ab")}}, {bson.Binary{Subtype: 4, Data: []byte("ab")}},
		{true}, {false}, {nil}, {bson.Undefined{}}, {bson.MinKey{}}, {bson.MaxKey{}},
		{bson.DateTime(5)}, {bson.Timestamp{T: 0, I: 5}},
		{bson.Regex{Pattern: "a", Options: "i"}}, {bson.Regex{Pattern: "a"}},
		{bson.JavaScript("a")}, {bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "v", Value: 1}}}},
		{bson.DBPointer{DB: "a", Pointer: oid}},
	}
}

func TestIDKeyIsMongoDBsIdentityOfIDs(t *testing.T) {
	groups := idKeyGroups(t)
	owner := map[string]int{}
	for g, group := range groups {
		for _, v := range group {
			k := jobdef.IDKey(testutil.RawValue(t, v))
			if other, ok := owner[k]; ok && other != g {
				t.Errorf("%#v (group %d) has the key of group %d", v, g, other)
			}
			owner[k] = g
			if k0 := jobdef.IDKey(testutil.RawValue(t, group[0])); k != k0 {
				t.Errorf("%#v and %#v are one _id to MongoDB, keys differ", v, group[0])
			}
		}
	}
}

// An id read back from the index is the collection's _id under IDKey,
// whatever type ParseIndexID rebuilt it as.
func TestIDKeyRoundTripsThroughTheIndexID(t *testing.T) {
	for _, group := range idKeyGroups(t) {
		for _, v := range group {
			id := testutil.RawValue(t, v)
			x, err := jobdef.IndexID(id)
			if err != nil {
				continue // not an indexable _id
			}
			back, err := jobdef.ParseIndexID(x)
			if err != nil {
				t.Fatalf("%v -> %#v: %v", id, x, err)
			}
			if jobdef.IDKey(back) != jobdef.IDKey(id) {
				t.Errorf("%v -> %#v -> %v: keys differ", id, x, back)
			}
		}
	}
}

// mongoEqual is an independent account of when MongoDB holds two values
// as one _id, for the fuzz target: numbers by exact value, strings and
// symbols by bytes, documents field by field, everything else by type and
// bytes.
func mongoEqual(a, b bsoncore.Value) bool {
	na, aNum := exactNumber(a)
	nb, bNum := exactNumber(b)
	if aNum || bNum {
		return aNum && bNum && na == nb
	}
	if sa, ok := stringLike(a); ok {
		sb, ok := stringLike(b)
		return ok && sa == sb
	}
	if a.Type != b.Type {
		return false
	}
	switch a.Type {
	case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
		ea, errA := bsoncore.Document(a.Data).Elements()
		eb, errB := bsoncore.Document(b.Data).Elements()
		if errA != nil || errB != nil || len(ea) != len(eb) {
			return errA != nil && errB != nil && bytes.Equal(a.Data, b.Data)
		}
		for i := range ea {
			if a.Type == bsoncore.TypeEmbeddedDocument && ea[i].Key() != eb[i].Key() {
				return false
			}
			if !mongoEqual(ea[i].Value(), eb[i].Value()) {
				return false
			}
		}
		return true
	case bsoncore.TypeBoolean:
		return len(a.Data) == 1 && len(b.Data) == 1 && (a.Data[0] != 0) == (b.Data[0] != 0)
	case bsoncore.TypeCodeWithScope:
		ca, sa, okA := a.CodeWithScopeOK()
		cb, sb, okB := b.CodeWithScopeOK()
		if !okA || !okB {
			return bytes.Equal(a.Data, b.Data)
		}
		return ca == cb && mongoEqual(bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: sa}, bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: sb})
	}
	return bytes.Equal(a.Data, b.Data)
}

func stringLike(v bsoncore.Value) (string, bool) {
	if v.Type != bsoncore.TypeString && v.Type != bsoncore.TypeSymbol {
		return "", false
	}
	s, rest, ok := bsoncore.ReadString(v.Data)
	return s, ok && len(rest) == 0
}

// exactNumber is a number's exact value as text ("NaN", "+Inf", "-Inf" or
// a big.Rat's).
func exactNumber(v bsoncore.Value) (string, bool) {
	var r big.Rat
	switch v.Type {
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		if !ok {
			return "", false
		}
		r.SetInt64(int64(n))
	case bsoncore.TypeInt64:
		n, ok := v.Int64OK()
		if !ok {
			return "", false
		}
		r.SetInt64(n)
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		switch {
		case !ok:
			return "", false
		case math.IsNaN(f):
			return "NaN", true
		case math.IsInf(f, 0):
			return map[bool]string{true: "+Inf", false: "-Inf"}[f > 0], true
		}
		r.SetFloat64(f)
	case bsoncore.TypeDecimal128:
		h, l, ok := v.Decimal128OK()
		if !ok {
			return "", false
		}
		d := bson.NewDecimal128(h, l)
		if d.IsNaN() {
			return "NaN", true
		}
		if i := d.IsInf(); i != 0 {
			return map[bool]string{true: "+Inf", false: "-Inf"}[i > 0], true
		}
		c, exp, err := d.BigInt()
		if err != nil {
			return "", false
		}
		if new(big.Int).Abs(c).Cmp(new(big.Int).Exp(big.NewInt(10), big.NewInt(34), nil)) >= 0 {
			c = new(big.Int) // not canonical: zero
		}
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
		if exp >= 0 {
			r.SetInt(new(big.Int).Mul(c, p))
		} else {
			r.SetFrac(c, p)
		}
	default:
		return "", false
	}
	return r.RatString(), true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// FuzzIDKey: two BSON values have one IDKey exactly when MongoDB holds
// them as one _id (mongoEqual), and an id through IndexID and
// ParseIndexID keeps its key.
func FuzzIDKey(f *testing.F) {
	var vals []bson.RawValue
	for _, group := range idKeyGroups(f) {
		for _, v := range group {
			vals = append(vals, testutil.RawValue(f, v))
		}
	}
	for i := 0; i+1 < len(vals); i++ {
		f.Add(byte(vals[i].Type), vals[i].Value, byte(vals[i+1].Type), vals[i+1].Value)
	}
	f.Fuzz(func(t *testing.T, ta byte, da []byte, tb byte, db []byte) {
		a, okA := validValue(ta, da)
		b, okB := validValue(tb, db)
		if !okA || !okB {
			return
		}
		ka := jobdef.IDKey(bson.RawValue{Type: bson.Type(ta), Value: da})
		kb := jobdef.IDKey(bson.RawValue{Type: bson.Type(tb), Value: db})
		if (ka == kb) != mongoEqual(a, b) {
			t.Fatalf("%v and %v: same key %v, MongoDB equal %v", a, b, ka == kb, mongoEqual(a, b))
		}
		id := bson.RawValue{Type: bson.Type(ta), Value: da}
		if x, err := jobdef.IndexID(id); err == nil {
			back, err := jobdef.ParseIndexID(x)
			if err != nil {
				t.Fatalf("%v -> %#v: %v", id, x, err)
			}
			if jobdef.IDKey(back) != ka {
				t.Fatalf("%v -> %#v -> %v: key changed", id, x, back)
			}
		}
	})
}

// validValue reads one whole, valid BSON value.
func validValue(t byte, data []byte) (bsoncore.Value, bool) {
	v, rest, ok := bsoncore.ReadValue(data, bsoncore.Type(t))
	if !ok || len(rest) != 0 || v.Validate() != nil {
		return v, false
	}
	if v.Type == bsoncore.TypeEmbeddedDocument || v.Type == bsoncore.TypeArray {
		if !testutil.WellFormedBSON(v.Data) {
			return v, false
		}
	}
	return v, true
}

// An integer's key, made without strings for int32, int64 and integral
// doubles, is the one its Decimal128 gets from the exact decimal text,
// and a key appended after other bytes is IDKey's.
func TestIntegerKeysAreTheirExactValuesKeys(t *testing.T) {
	ns := []int64{1, -1, 7, 10, -10, 100, 120, 1200, 123456789, -5000000, 1 << 53, -(1 << 53), math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32}
	for p := int64(1); p < math.MaxInt64/10; p *= 10 {
		ns = append(ns, p, -p, 3*p, p+1)
	}
	for _, n := range ns {
		want := jobdef.IDKey(testutil.RawValue(t, dec(t, strconv.FormatInt(n, 10))))
		vals := []any{n}
		if n == int64(int32(n)) {
			vals = append(vals, int32(n))
		}
		if f := float64(n); f == math.Trunc(f) && math.Abs(f) < 1<<63 && int64(f) == n {
			vals = append(vals, f)
		}
		for _, v := range vals {
			if got := jobdef.IDKey(testutil.RawValue(t, v)); got != want {
				t.Errorf("IDKey(%T %v) = %q, want %q (Decimal128's)", v, v, got, want)
			}
			if got := jobdef.AppendIDKey([]byte("pre"), testutil.RawValue(t, v)); string(got) != "pre"+want {
				t.Errorf("AppendIDKey(pre, %T %v) = %q, want pre%q", v, v, got, want)
			}
		}
	}
}
