package transform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// exprJob returns a search job whose result is {r: expr}, where expr sees
// the value v (doc.v) and doc.
func exprJob(t *testing.T, expr string, opts ...transform.Options) *transform.Job {
	t.Helper()
	return loadJob(t, `module.exports = { transform(doc) { return { r: (function (v, doc) { return `+expr+`; })(doc.v, doc) }; } };`, opts...)
}

func TestBSONValuesReachJavaScriptAsDocumented(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	dec, _ := bson.ParseDecimal128("1234.5678901234567890123")
	uuid := bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}}
	cases := []struct {
		name string
		v    any
		expr string
		want any
	}{
		{"a double is a number", 1.5, "typeof v + ' ' + v", "number 1.5"},
		{"a negative zero double stays negative zero", math.Copysign(0, -1), "Object.is(v, -0)", true},
		{"NaN stays NaN", math.NaN(), "Number.isNaN(v)", true},
		{"Infinity stays Infinity", math.Inf(-1), "v === -Infinity", true},
		{"an int32 is a number", int32(-7), "typeof v + ' ' + v", "number -7"},
		{"an int64 within 2^53 is a number", int64(1) << 53, "typeof v + ' ' + v", "number 9007199254740992"},
		{"an int64 beyond 2^53 is a BigInt without loss", int64(math.MaxInt64), "typeof v + ' ' + v.toString()", "bigint 9223372036854775807"},
		{"the smallest int64 is a BigInt", int64(math.MinInt64), "v.toString()", "-9223372036854775808"},
		{"a string is a string", "héllo wörld ✓", "typeof v + ' ' + v.length", "string 13"},
		{"a boolean is a boolean", true, "v === true", true},
		{"null is null", nil, "v === null", true},
		{"a date is a Date", bson.DateTime(1714557600000), "v instanceof Date && v.toISOString()", "2024-05-01T10:00:00.000Z"},
		{"a date before 1970 is a Date", bson.DateTime(-1234567890123), "v.toISOString()", "1930-11-18T00:28:29.877Z"},
		{"a date beyond JavaScript's range is an Invalid Date", bson.DateTime(math.MaxInt64), "isNaN(v.getTime())", true},
		{"an ObjectId has toHexString", oid, "v.toHexString()", "65f1c0a2b3c4d5e6f7a8b9c0"},
		{"an ObjectId concatenates as its hex", oid, "'id:' + v", "id:65f1c0a2b3c4d5e6f7a8b9c0"},
		{"an ObjectId equals its hex and a copy", oid, "v.equals('65F1C0A2B3C4D5E6F7A8B9C0') && v.equals(ObjectId(v.toHexString())) && !v.equals(null)", true},
		{"an ObjectId has getTimestamp", oid, "v.getTimestamp().toISOString()", "2024-03-13T15:05:06.000Z"},
		{"an ObjectId is JSON as its hex", oid, "JSON.stringify({a: v})", `{"a":"65f1c0a2b3c4d5e6f7a8b9c0"}`},
		{"a Decimal128 keeps its digits in toString", dec, "v.toString()", "1234.5678901234567890123"},
		{"a Decimal128 does arithmetic as a number", dec, "Math.round(v * 2)", int64(2469)},
		{"a UUID reads as its canonical text", uuid, "v.toString() + ' ' + v.subtype", "12345678-9abc-def0-1234-56789abcdef0 4"},
		{"a binary reads as base64", bson.Binary{Subtype: 0x80, Data: []byte("hi")}, "v.toBase64() + ' ' + v.subtype", "aGk= 128"},
		{"a timestamp has t and i", bson.Timestamp{T: 1700000000, I: 3}, "v.t + '/' + v.i", "1700000000/3"},
		{"a regex is pattern and options", bson.Regex{Pattern: "^a.c$", Options: "i"}, "v.pattern + ' ' + v.options + ' ' + v", "^a.c$ i /^a.c$/i"},
		{"a symbol is a string", bson.Symbol("sym"), "v", "sym"},
		{"JavaScript code is a string", bson.JavaScript("x + 1"), "v", "x + 1"},
		{"MinKey is an opaque value", bson.MinKey{}, "JSON.stringify(v)", `"{\"$minKey\":1}"`},
		{"undefined is undefined", bson.Undefined{}, "v === undefined && ('v' in doc)", true},
		{"an empty array is an array", bson.A{}, "Array.isArray(v) && v.length", int64(0)},
		{"an empty document is an object", bson.D{}, "Object.keys(v).length", int64(0)},
		{"a document keeps key order", bson.D{{Key: "z", Value: 1}, {Key: "a", Value: 2}, {Key: "m", Value: 3}}, "Object.keys(v).join()", "z,a,m"},
		{"nested documents and arrays are walkable", bson.D{{Key: "a", Value: bson.A{bson.D{{Key: "b", Value: bson.A{int32(1), "x"}}}}}}, "v.a[0].b[1]", "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := exprJob(t, tc.expr)
			res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: tc.v}})
			if got := res.Doc["r"]; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestDeepNestingReachesJavaScript(t *testing.T) {
	var d any = "bottom"
	for i := 0; i < 90; i++ {
		d = bson.D{{Key: "n", Value: d}}
	}
	j := exprJob(t, "(function () { let x = v, n = 0; while (typeof x === 'object') { x = x.n; n++; } return n + ' ' + x; })()")
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: d}})
	if res.Doc["r"] != "90 bottom" {
		t.Fatalf("got %v", res.Doc["r"])
	}
}

func TestJavaScriptValuesBecomeJSONReadyValues(t *testing.T) {
	cases := []struct {
		name  string
		expr  string
		dates string
		want  any
	}{
		{"an integer is an int64", "42", "", int64(42)},
		{"a fraction is a float64", "0.25", "", 0.25},
		{"negative zero is 0", "-0", "", int64(0)},
		{"a large number stays a float64", "1e300", "", 1e300},
		{"a BigInt in int64 is an int64", "9223372036854775807n", "", int64(math.MaxInt64)},
		{"a BigInt in uint64 is a uint64", "18446744073709551615n", "", uint64(math.MaxUint64)},
		{"an int64 beyond 2^53 comes back exactly", "doc.big", "", int64(math.MaxInt64)},
		{"a string is a string", "'ok'", "", "ok"},
		{"a Date is an ISO string by default", "new Date(Date.UTC(2024, 4, 1, 10))", "", "2024-05-01T10:00:00.000Z"},
		{"a Date before 1970 is an ISO string", "new Date(-1)", "", "1969-12-31T23:59:59.999Z"},
		{"a Date far out has a six-digit year as toISOString", "new Date(8.64e15)", "", "+275760-09-13T00:00:00.000Z"},
		{"a Date is epoch milliseconds with dates: epoch", "new Date(Date.UTC(2024, 4, 1, 10))", "epoch", int64(1714557600000)},
		{"a Date before 1970 is negative epoch milliseconds", "new Date(-1234)", "epoch", int64(-1234)},
		{"a source date is converted the same way", "doc.at", "epoch", int64(1714557600000)},
		{"an ObjectId is its hex", "ObjectId('65F1C0A2B3C4D5E6F7A8B9C0')", "", "65f1c0a2b3c4d5e6f7a8b9c0"},
		{"a Decimal128 is a number", "Decimal128('2.5')", "", 2.5},
		{"a Timestamp is {t, i}", "Timestamp(5, 6)", "", map[string]any{"t": int64(5), "i": int64(6)}},
		{"a BSONRegExp is its text", "BSONRegExp('a+', 'i')", "", "/a+/i"},
		{"an empty array is an empty array", "[]", "", []any{}},
		{"undefined in an array is null", "[1, undefined, null]", "", []any{int64(1), nil, nil}},
		{"a key holding undefined is left out", "({a: 1, b: undefined})", "", map[string]any{"a": int64(1)}},
		{"boxed primitives are unboxed", "[new String('s'), new Number(2), new Boolean(false)]", "", []any{"s", int64(2), false}},
		{"a class instance is its fields", "new (class P { constructor() { this.x = 1; } })()", "", map[string]any{"x": int64(1)}},
		{"a shared (not cyclic) object is written twice", "(function () { const s = {k: 1}; return [s, s]; })()", "", []any{map[string]any{"k": int64(1)}, map[string]any{"k": int64(1)}}},
		{"a nested source document is a map", "doc.sub", "", map[string]any{"x": "y", "n": []any{int64(1), 2.5}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := exprJob(t, tc.expr)
			if tc.dates != "" {
				j = loadJob(t, `module.exports = { dates: "`+tc.dates+`", transform(doc) { return { r: `+tc.expr+` }; } };`)
			}
			res := mustApply(t, j, bson.D{
				{Key: "_id", Value: 1}, {Key: "big", Value: int64(math.MaxInt64)},
				{Key: "at", Value: bson.DateTime(1714557600000)},
				{Key: "sub", Value: bson.D{{Key: "x", Value: "y"}, {Key: "n", Value: bson.A{int32(1), 2.5}}}},
			})
			got, ok := res.Doc["r"]
			if !ok && tc.want != nil {
				t.Fatalf("no r in %v", res.Doc)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v (%T), want %#v (%T)", got, got, tc.want, tc.want)
			}
		})
	}
}

func TestWhatADocumentCannotHoldIsNotADocument(t *testing.T) {
	cases := []struct {
		name, expr string
		says       []string
	}{
		{"NaN", "({a: {b: NaN}})", []string{"r.a.b", "NaN"}},
		{"Infinity", "[1, Infinity]", []string{"r.1", "Infinity"}},
		{"a function", "({f: function secret() { return 'hidden'; }})", []string{"r.f", "a function"}},
		{"a symbol", "Symbol('secret')", []string{"r", "a symbol"}},
		{"a cyclic object", "(function () { const o = {}; o.self = o; return o; })()", []string{"r.self", "cyclic"}},
		{"a cyclic array", "(function () { const a = []; a.push(a); return a; })()", []string{"r.0", "cyclic"}},
		{"a Map", "new Map([['secret', 1]])", []string{"r", "a Map"}},
		{"a RegExp", "/secret/", []string{"r", "a RegExp"}},
		{"an invalid Date", "new Date('secret')", []string{"r", "invalid Date"}},
		{"a BigInt beyond 64 bits", "2n ** 70n", []string{"r", "BigInt"}},
		{"nesting deeper than allowed", "(function () { let o = 1; for (let i = 0; i < 300; i++) o = {o: o}; return o; })()", []string{"nested more than"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := apply(t, exprJob(t, tc.expr), bson.D{{Key: "_id", Value: 1}})
			wantErr(t, err, errs.NotADocument, tc.says...)
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "hidden") {
				t.Errorf("the message shows a value: %v", err)
			}
			var e *errs.Error
			if !errorsAs(err, &e) || e.Job != "job" {
				t.Errorf("the error does not name the job: %#v", err)
			}
		})
	}
}

func TestTheTransformMustReturnADocument(t *testing.T) {
	for _, ret := range []string{"1", "'doc'", "[1]", "new Date()", "ObjectId('65f1c0a2b3c4d5e6f7a8b9c0')", "function () {}"} {
		t.Run("returning "+ret, func(t *testing.T) {
			j := loadJob(t, `module.exports = { transform(doc) { return `+ret+`; } };`)
			_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
			wantErr(t, err, errs.NotADocument, "not a document")
		})
	}
}

// richDoc holds one of every BSON type a search document can carry.
func richDoc() bson.D {
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	dec, _ := bson.ParseDecimal128("10.50")
	return bson.D{
		{Key: "_id", Value: oid},
		{Key: "s", Value: "text ✓"}, {Key: "i32", Value: int32(-5)}, {Key: "i64", Value: int64(1) << 40},
		{Key: "i64max", Value: int64(math.MaxInt64)}, {Key: "f", Value: 2.5}, {Key: "whole", Value: 3.0},
		{Key: "negzero", Value: math.Copysign(0, -1)}, {Key: "t", Value: true}, {Key: "null", Value: nil},
		{Key: "date", Value: bson.DateTime(-86400000)}, {Key: "oid", Value: oid}, {Key: "dec", Value: dec},
		{Key: "bin", Value: bson.Binary{Subtype: 0, Data: []byte{1, 2, 3}}},
		{Key: "ts", Value: bson.Timestamp{T: 1, I: 2}}, {Key: "re", Value: bson.Regex{Pattern: "x", Options: "im"}},
		{Key: "sym", Value: bson.Symbol("y")}, {Key: "code", Value: bson.JavaScript("1")}, {Key: "min", Value: bson.MinKey{}},
		{Key: "undef", Value: bson.Undefined{}}, {Key: "empty", Value: bson.A{}},
		{Key: "nested", Value: bson.D{{Key: "a", Value: bson.A{bson.D{{Key: "b", Value: int32(1)}}, "c"}}}},
	}
}

func TestDocumentsNeedingNoJavaScriptConvertLikeThoseThatDo(t *testing.T) {
	doc := richDoc()
	identity := mustApply(t, loadJob(t, `module.exports = {};`), doc).Doc
	for _, src := range []string{
		`module.exports = { transform(doc) { return doc; } };`,
		`module.exports = { transform(doc) { return {...doc}; } };`,
		`module.exports = { transform(doc) { return Object.assign({}, doc); } };`,
		`module.exports = { transform(doc) { return true; } };`,
		`module.exports = function (doc) { return this; };`,
	} {
		got := mustApply(t, loadJob(t, src), doc).Doc
		if !reflect.DeepEqual(got, identity) {
			t.Errorf("%s\n got %#v\nwant %#v", src, got, identity)
		}
	}
	if identity["id"] != "65f1c0a2b3c4d5e6f7a8b9c0" || identity["_id"] != "65f1c0a2b3c4d5e6f7a8b9c0" {
		t.Errorf("ids: %v %v", identity["id"], identity["_id"])
	}
	if _, ok := identity["undef"]; ok {
		t.Errorf("undefined was written")
	}
}

// mirrorDoc holds one of every BSON type.
func mirrorDoc() bson.D {
	d := richDoc()
	return append(d,
		bson.E{Key: "maxkey", Value: bson.MaxKey{}},
		bson.E{Key: "farDate", Value: bson.DateTime(math.MinInt64)},
		bson.E{Key: "nan", Value: math.NaN()},
		bson.E{Key: "uuid", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{7}, 16)}},
		bson.E{Key: "dbp", Value: bson.DBPointer{DB: "db.c", Pointer: bson.NewObjectID()}},
		bson.E{Key: "cws", Value: bson.CodeWithScope{Code: "x", Scope: bson.D{{Key: "x", Value: int32(1)}}}},
		bson.E{Key: "arr", Value: bson.A{int64(1), 1.0, int32(1), bson.DateTime(0), bson.Undefined{}}},
	)
}

func TestAMirrorKeepsEveryBSONType(t *testing.T) {
	doc := marshal(t, mirrorDoc())
	for _, src := range []string{
		`module.exports = { mirror: "copy" };`,
		`module.exports = { mirror: "copy", transform(doc) { return doc; } };`,
		`module.exports = { mirror: "copy", transform(doc) { return {...doc}; } };`,
		`module.exports = { mirror: "copy", transform(doc) { const o = {}; for (const k in doc) o[k] = doc[k]; o.nested = {...doc.nested, a: [...doc.nested.a]}; o.arr = doc.arr.slice(); return o; } };`,
		`module.exports = { mirror: "copy", transform(doc) { return true; } };`,
	} {
		t.Run(src, func(t *testing.T) {
			j := loadJob(t, src)
			if j.Kind != jobdef.Mirror || j.Mirror != "copy" || j.Index != "" {
				t.Fatalf("not a mirror job: %+v", j)
			}
			res, err := j.Apply(t.Context(), doc, transform.OpUpdate, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Raw, doc) {
				t.Fatalf("changed:\n got %v\nwant %v", res.Raw, doc)
			}
			if id, ok := res.ID.(bson.RawValue); !ok || !id.Equal(doc.Lookup("_id")) {
				t.Fatalf("ID %v", res.ID)
			}
		})
	}
}

func TestAMirrorDropsFieldsAndKeepsTheRestExactly(t *testing.T) {
	j := loadJob(t, `module.exports = { mirror: "people", transform(doc) { delete doc.email; delete doc.addr.street; doc.visits += 1; doc.score *= 2; return doc; } };`)
	in := bson.D{{Key: "_id", Value: int64(7)}, {Key: "email", Value: "x@y"}, {Key: "visits", Value: int64(41)}, {Key: "score", Value: 2.0},
		{Key: "addr", Value: bson.D{{Key: "street", Value: "s"}, {Key: "city", Value: "c"}}}, {Key: "at", Value: bson.DateTime(5)}}
	want := marshal(t, bson.D{{Key: "_id", Value: int64(7)}, {Key: "visits", Value: int64(42)}, {Key: "score", Value: 4.0},
		{Key: "addr", Value: bson.D{{Key: "city", Value: "c"}}}, {Key: "at", Value: bson.DateTime(5)}})
	res := mustApply(t, j, in)
	if !bytes.Equal(res.Raw, want) {
		t.Fatalf("got %v\nwant %v", res.Raw, want)
	}
}

func TestAMirrorWritesNewValuesAsTheNodeDriverDoes(t *testing.T) {
	j := loadJob(t, `module.exports = { mirror: "m", transform(doc) {
		return { small: 5, big: 2 ** 40, frac: 0.5, negzero: -0, bigint: 5n, when: new Date(1000),
			ref: ObjectId("65f1c0a2b3c4d5e6f7a8b9c0"), dec: Decimal128("1.10"), ts: Timestamp(1, 2),
			re: BSONRegExp("a", "mi"), list: [1, undefined], u: undefined, n: null };
	} };`)
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	dec, _ := bson.ParseDecimal128("1.10")
	want := marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "small", Value: int32(5)}, {Key: "big", Value: float64(1 << 40)},
		{Key: "frac", Value: 0.5}, {Key: "negzero", Value: math.Copysign(0, -1)}, {Key: "bigint", Value: int64(5)},
		{Key: "when", Value: bson.DateTime(1000)}, {Key: "ref", Value: oid}, {Key: "dec", Value: dec},
		{Key: "ts", Value: bson.Timestamp{T: 1, I: 2}}, {Key: "re", Value: bson.Regex{Pattern: "a", Options: "im"}},
		{Key: "list", Value: bson.A{int32(1), nil}}, {Key: "n", Value: nil}})
	res := mustApply(t, j, bson.D{{Key: "_id", Value: "k"}})
	if !bytes.Equal(res.Raw, want) {
		t.Fatalf("got %v\nwant %v", res.Raw, want)
	}
}

func TestAMirrorCannotChangeTheID(t *testing.T) {
	j := loadJob(t, `module.exports = { mirror: "m", transform(doc) { doc._id = doc.other; return doc; } };`)
	_, err := apply(t, j, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "other", Value: bson.NewObjectID()}})
	wantErr(t, err, errs.IDMismatch, "_id")

	// Dropping _id is not changing it: the source's comes back first.
	j = loadJob(t, `module.exports = { mirror: "m", transform(doc) { const {_id, ...rest} = doc; return {a: 1, ...rest}; } };`)
	res := mustApply(t, j, bson.D{{Key: "b", Value: 2}, {Key: "_id", Value: int64(3)}})
	want := marshal(t, bson.D{{Key: "_id", Value: int64(3)}, {Key: "a", Value: int32(1)}, {Key: "b", Value: int32(2)}})
	if !bytes.Equal(res.Raw, want) {
		t.Fatalf("got %v\nwant %v", res.Raw, want)
	}

	// The same id as a copy is fine.
	j = loadJob(t, `module.exports = { mirror: "m", transform(doc) { return {_id: ObjectId(doc._id.toHexString())}; } };`)
	mustApply(t, j, bson.D{{Key: "_id", Value: bson.NewObjectID()}})
}

func TestThePrimaryKeyComesFromTheID(t *testing.T) {
	oid := bson.NewObjectID()
	cases := []struct {
		name, ret string
		pk        string
		id        any
		wantErr   bool
		want      any
	}{
		{"an omitted key is added", "({a: 1})", "", oid, false, oid.Hex()},
		{"the same id is fine", "({id: doc._id.toHexString()})", "", oid, false, oid.Hex()},
		{"the ObjectId itself is fine", "({id: doc._id})", "", oid, false, oid.Hex()},
		{"another id is ID_MISMATCH", "({id: 'other'})", "", oid, true, nil},
		{"an integer id as a number is fine", "({id: 5})", "", int32(5), false, int64(5)},
		{"an integer id as a string is ID_MISMATCH", "({id: '5'})", "", int32(5), true, nil},
		{"a string id that needs encoding may be given as the _id", "({id: doc._id})", "", "5", false, "_s5"},
		{"another primary key name", "({sku: doc._id})", "sku", "a-1", false, "a-1"},
		{"primaryKey _id and the whole document", "doc", "_id", oid, false, oid.Hex()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk := ""
			if tc.pk != "" {
				pk = `primaryKey: "` + tc.pk + `", `
			}
			j := loadJob(t, `module.exports = { `+pk+`transform(doc) { return `+tc.ret+`; } };`)
			res, err := apply(t, j, bson.D{{Key: "_id", Value: tc.id}})
			if tc.wantErr {
				wantErr(t, err, errs.IDMismatch, "primary key")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			key := tc.pk
			if key == "" {
				key = "id"
			}
			if res.Doc[key] != tc.want || res.ID != tc.want {
				t.Fatalf("doc[%s] = %#v, ID %#v, want %#v", key, res.Doc[key], res.ID, tc.want)
			}
		})
	}
}

func TestDatesBeyondJavaScriptAreRefusedForSearch(t *testing.T) {
	_, err := apply(t, loadJob(t, `module.exports = {};`), bson.D{{Key: "_id", Value: 1}, {Key: "d", Value: bson.DateTime(math.MaxInt64)}})
	wantErr(t, err, errs.NotADocument, "d: a date outside")
	_, err = apply(t, loadJob(t, `module.exports = { transform(d) { return {d: d.d}; } };`), bson.D{{Key: "_id", Value: 1}, {Key: "d", Value: bson.DateTime(math.MaxInt64)}})
	wantErr(t, err, errs.NotADocument, "d: an invalid Date")
}

func TestAResultLargerThanTheLimitIsRefused(t *testing.T) {
	opts := transform.Options{MaxResultBytes: 1000}
	j := loadJob(t, `module.exports = { transform(doc) { return {s: "x".repeat(2000)}; } };`, opts)
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.NotADocument, "larger than the limit of 1000")

	j = loadJob(t, `module.exports = { transform(doc) { return {s: "x".repeat(500)}; } };`, opts)
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}})

	mopts := transform.Options{MaxMirrorBytes: 1000}
	j = loadJob(t, `module.exports = { mirror: "m" };`, mopts)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: strings.Repeat("x", 2000)}})
	wantErr(t, err, errs.NotADocument, "limit of 1000")
	j = loadJob(t, `module.exports = { mirror: "m", transform(d) { d.s += "y"; return d; } };`, mopts)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: strings.Repeat("x", 2000)}})
	wantErr(t, err, errs.NotADocument, "limit of 1000")
}

// A mirror writes what the replica stores: documents up to MongoDB's
// maxBsonObjectSize (16 MiB), whatever the search result limit (1 MiB of
// JSON) is, measured on the document as the replica stores it.
func TestAMirrorTakesDocumentsUpToTheReplicaLimit(t *testing.T) {
	// Megabytes through the runtime: time enough on a loaded machine,
	// since what is tested is the size.
	slow := transform.Options{Timeout: 30 * time.Second}
	big := strings.Repeat("x", 3<<20)
	doc := bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: big}}
	for _, src := range []string{
		`module.exports = { mirror: "m" };`,
		`module.exports = { mirror: "m", transform(d) { d.t = d.s; return d; } };`,
	} {
		res := mustApply(t, loadJob(t, src, slow), doc)
		if len(res.Raw) < len(big) {
			t.Errorf("%s: a %d-byte result", src, len(res.Raw))
		}
	}
	_, err := apply(t, loadJob(t, `module.exports = { index: "i" };`, slow), doc)
	wantErr(t, err, errs.NotADocument, "limit of 1048576")

	over := jobdef.DefaultMaxMirrorBytes - len(big) - 20
	j := loadJob(t, `module.exports = { mirror: "m", transform(d) { d.t = "y".repeat(`+strconv.Itoa(over)+`); return d; } };`, slow)
	_, err = apply(t, j, doc)
	wantErr(t, err, errs.NotADocument, "limit of 16777216", "maxBsonObjectSize")
}

func TestSourceDatesFollowTheDatesOption(t *testing.T) {
	at := time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)
	d := bson.D{{Key: "_id", Value: 1}, {Key: "at", Value: bson.NewDateTimeFromTime(at)}}
	iso := mustApply(t, loadJob(t, `module.exports = {};`), d).Doc["at"]
	epoch := mustApply(t, loadJob(t, `module.exports = {dates: "epoch"};`), d).Doc["at"]
	if iso != "1969-07-20T20:17:40.000Z" || epoch != at.UnixMilli() {
		t.Fatalf("iso %v epoch %v", iso, epoch)
	}
}

func TestAHugeSparseArrayIsRefusedNotAllocated(t *testing.T) {
	_, err := apply(t, exprJob(t, "new Array(1e9)"), bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.NotADocument, "larger than the limit")
	j := loadJob(t, `module.exports = { mirror: "m", transform(d) { return {a: new Array(1e9)}; } };`)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.NotADocument, "limit")
}

// ApplyTo writes each search document at the end of the buffer it is
// given, as the JSON Apply decodes: keys in the result's order, the
// primary key where the transform put it or else last; a document kept out
// or refused writes nothing.
func TestApplyToWritesDocumentsOneAfterAnother(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) {
		if (doc.skip) return null;
		if (doc.bad) return {n: NaN};
		if (doc.own) return {id: doc._id, b: "x"};
		return {b: doc.n, a: [doc.n, "é\n"], at: new Date(0)};
	} };`)
	ctx := context.Background()
	buf := []byte("before|")
	var want []byte
	want = append(want, buf...)
	for _, tc := range []struct {
		doc  bson.D
		json string // "" when nothing is written
	}{
		{bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 2.5}}, `{"b":2.5,"a":[2.5,"é\n"],"at":"1970-01-01T00:00:00.000Z","id":1}`},
		{bson.D{{Key: "_id", Value: 2}, {Key: "skip", Value: true}}, ""},
		{bson.D{{Key: "_id", Value: 3}, {Key: "bad", Value: true}}, ""},
		{bson.D{{Key: "_id", Value: "k"}, {Key: "own", Value: true}}, `{"id":"k","b":"x"}`},
	} {
		raw := marshal(t, tc.doc)
		res, out, err := j.ApplyTo(ctx, buf, raw, transform.OpInsert, nil)
		if tc.json == "" {
			if len(out) != len(buf) || res.JSON != nil {
				t.Fatalf("%v: wrote %q (err %v)", tc.doc, out[len(buf):], err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(res.JSON) != tc.json || cap(res.JSON) != len(res.JSON) {
			t.Fatalf("%v: JSON %s (cap %d), want %s", tc.doc, res.JSON, cap(res.JSON), tc.json)
		}
		want = append(want, tc.json...)
		if string(out) != string(want) {
			t.Fatalf("buffer %q, want %q", out, want)
		}
		applied := mustApply(t, j, tc.doc)
		var decoded map[string]any
		if err := json.Unmarshal(res.JSON, &decoded); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(decoded) != fmt.Sprint(jsonRoundTrip(t, applied.Doc)) {
			t.Fatalf("Apply's Doc %v, ApplyTo's JSON %s", applied.Doc, res.JSON)
		}
		buf = out
	}
}

func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// String values are kept per runtime (short ones): converting more of them
// than it keeps, repeated or not, long or short, gives each its own text,
// and a key holding a NUL matches no field (not even "a", whose 97-byte
// value's length, 98, is a "b" after the NUL that ends the key "a").
func TestStringValuesStayRightAcrossTheKeptOnes(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return { s: doc.s, same: doc.same, nul: doc["a\u0000b"] === undefined }; } };`,
		transform.Options{Pool: 1})
	long := strings.Repeat("x", 100)
	for i := 0; i < 10000; i++ {
		s := fmt.Sprintf("v%d", i)
		if i%3 == 0 {
			s = long + s
		}
		res := mustApply(t, j, bson.D{{Key: "_id", Value: i}, {Key: "a", Value: strings.Repeat("b", 97)}, {Key: "s", Value: s}, {Key: "same", Value: "published"}})
		if res.Doc["s"] != s || res.Doc["same"] != "published" || res.Doc["nul"] != true {
			t.Fatalf("document %d: got %v", i, res.Doc)
		}
	}
}

// A value the driver's reader refuses though the document's lengths add
// up (an old binary, subtype 2, whose inner length is wrong) is a
// per-document error, never a panic: NOT_A_DOCUMENT written as it is,
// TRANSFORM_FAILED when the transform reads it.
func TestAMalformedValueIsAPerDocumentError(t *testing.T) {
	// {_id: 1, b: BinData(2, inner length 9 of 4 bytes)}
	b := bsoncore.NewDocumentBuilder().AppendInt32("_id", 1).Build()
	elems := b[4 : len(b)-1]
	elems = append(elems, byte(bsoncore.TypeBinary), 'b', 0)
	elems = append(elems, 8, 0, 0, 0, 2, 9, 0, 0, 0, 'a', 'b', 'c', 'd')
	doc := bsoncore.BuildDocument(nil, elems)
	ctx := context.Background()
	_, err := loadJob(t, `module.exports = {};`).Apply(ctx, bson.Raw(doc), transform.OpInsert, nil)
	wantErr(t, err, errs.NotADocument, "b: a malformed BSON binary value")
	_, err = loadJob(t, `module.exports = { transform(doc) { return { b: doc.b }; } };`).Apply(ctx, bson.Raw(doc), transform.OpInsert, nil)
	wantErr(t, err, errs.TransformFailed, "malformed BSON value")
	_, err = loadJob(t, `module.exports = { mirror: "m", transform(doc) { return { x: doc.b }; } };`).Apply(ctx, bson.Raw(doc), transform.OpInsert, nil)
	wantErr(t, err, errs.TransformFailed, "malformed BSON value")
}

// A Decimal128 is a JSON number only when the number is its value;
// otherwise its exact text, never a number that lost it (1E-6000 was 0).
func TestADecimalNeverLosesItsValue(t *testing.T) {
	d := func(s string) bson.Decimal128 { return dec(t, s) }
	doc := bson.D{{Key: "_id", Value: 1},
		{Key: "tiny", Value: d("1E-6000")}, {Key: "huge", Value: d("-1E+6000")}, {Key: "long", Value: d("1234.5678901234567890123")},
		{Key: "nan", Value: d("NaN")}, {Key: "inf", Value: d("Infinity")}, {Key: "tenth", Value: d("0.1")},
		{Key: "price", Value: d("2.50")}, {Key: "int", Value: d("42")}, {Key: "zero", Value: d("-0.00")},
	}
	want := map[string]any{"tiny": "1E-6000", "huge": "-1E+6000", "long": "1234.5678901234567890123", "nan": "NaN",
		"inf": "Infinity", "tenth": 0.1, "price": 2.5, "int": int64(42), "zero": int64(0)}
	for _, src := range []string{`module.exports = {};`, `module.exports = { transform(doc) { return {...doc}; } };`,
		`module.exports = { transform(doc) { const o = {}; for (const k of Object.keys(doc)) o[k] = doc[k]; return o; } };`} {
		got := mustApply(t, loadJob(t, src), doc).Doc
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s = %#v, want %#v", src, k, got[k], w)
			}
		}
	}
	// Made in JavaScript, the same rule.
	got := mustApply(t, loadJob(t, `module.exports = { transform() { return { a: Decimal128("1E-6000"), b: Decimal128("0.25") }; } };`), bson.D{{Key: "_id", Value: 1}}).Doc
	if got["a"] != "1E-6000" || got["b"] != 0.25 {
		t.Fatalf("got %v", got)
	}
}

// The classes' values live in Go: getOwnPropertySymbols (or anything
// else) finds nothing to read or to rewrite, so a mirror writes the
// document's own bytes.
func TestABSONValueHidesItsBytes(t *testing.T) {
	minKey := bsoncore.NewDocumentBuilder().AppendInt32("_id", 1).AppendMinKey("m").
		AppendBinary("b", 0, []byte("secret")).AppendObjectID("o", bson.NewObjectID()).
		AppendDecimal128("d", 0, 1).Build()
	j := loadJob(t, `module.exports = { mirror: "m", transform(doc) {
		const found = [];
		for (const k of ["m", "b", "o", "d"]) {
			const v = doc[k];
			for (const s of Object.getOwnPropertySymbols(v)) { found.push(k); try { v[s] = {t: 3, d: "AAAA"}; } catch (e) {} }
			for (const s of Reflect.ownKeys(v)) found.push(k + ":" + String(s));
			for (const s in v) found.push(k + " in");
			try { v.t = 3; } catch (e) {}
			const p = new Proxy(v, { get(t, key) { if (typeof key === "symbol") found.push("leak"); return Reflect.get(t, key); } });
			try { Object.getPrototypeOf(v).toString.call(p); } catch (e) { found.push(k + ":" + e.name); }
		}
		return { ...doc, found };
	} };`)
	res, err := j.Apply(context.Background(), bson.Raw(minKey), transform.OpInsert, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bson.Raw(res.Raw)
	for _, k := range []string{"m", "b", "o", "d"} {
		if !got.Lookup(k).Equal(bson.Raw(minKey).Lookup(k)) {
			t.Errorf("%s changed: %v", k, got.Lookup(k))
		}
	}
	found, _ := got.Lookup("found").Array().Values()
	for _, f := range found {
		if s := f.StringValue(); !strings.HasSuffix(s, ":TypeError") {
			t.Errorf("the transform found %q", s)
		}
	}
}
