package jobdef_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
)

func TestIndexIDForms(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	long := strings.Repeat("a", 511)
	cases := []struct {
		name string
		id   any
		want any
	}{
		{"an ObjectId is its lowercase hex", oid, "65f1c0a2b3c4d5e6f7a8b9c0"},
		{"an int32 is that number", int32(-42), int64(-42)},
		{"an int64 is that number", int64(math.MaxInt64), int64(math.MaxInt64)},
		{"the smallest int64 is that number", int64(math.MinInt64), int64(math.MinInt64)},
		{"a double holding an integer is that number", 5.0, int64(5)},
		{"negative zero is 0", math.Copysign(0, -1), int64(0)},
		{"a double holding 2^53 is that number", float64(1 << 53), int64(1 << 53)},
		{"a plain string is itself", "article-42_b", "article-42_b"},
		{"a string of 511 characters is itself", long, long},
		{"uppercase hex of 24 is plain", "65F1C0A2B3C4D5E6F7A8B9C0", "65F1C0A2B3C4D5E6F7A8B9C0"},
		{"a decimal string is encoded", "5", "_s5"},
		{"a negative decimal string is encoded", "-5", "_s-5"},
		{"a zero-padded decimal string is encoded", "007", "_s007"},
		{"an ObjectId's hex as a string is encoded", "65f1c0a2b3c4d5e6f7a8b9c0", "_s65f1c0a2b3c4d5e6f7a8b9c0"},
		{"a string starting with _ is encoded", "_draft", "_s_draft"},
		{"a string with other characters is base64url", "a b/c", "_uYSBiL2M"},
		{"unicode is base64url", "été", "_uw6l0w6k"},
		{"the empty string is base64url", "", "_u"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jobdef.IndexID(testutil.RawValue(t, tc.id))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestOtherIDsAreEncodedBSON(t *testing.T) {
	dec, _ := bson.ParseDecimal128("1.5")
	for _, id := range []any{1.5, math.NaN(), math.Inf(1), float64(1 << 60), dec, bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{1}, 16)},
		bson.D{{Key: "a", Value: 1}, {Key: "b", Value: "x"}}, bson.A{1, 2}, true, nil, bson.DateTime(0), bson.MinKey{}, bson.MaxKey{},
		bson.Timestamp{T: 1, I: 2}, bson.Regex{Pattern: "a", Options: "i"}, bson.Symbol("s"), bson.Undefined{}} {
		got, err := jobdef.IndexID(testutil.RawValue(t, id))
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		s, ok := got.(string)
		if !ok || !strings.HasPrefix(s, "_b") || !meiliID(s) {
			t.Errorf("%v: %v", id, got)
		}
	}
}

func TestAnIDTooLongForMeilisearchIsNotADocument(t *testing.T) {
	for _, id := range []any{strings.Repeat("é", 300), strings.Repeat("_", 511), bson.D{{Key: "k", Value: strings.Repeat("x", 400)}}} {
		_, err := jobdef.IndexID(testutil.RawValue(t, id))
		wantErr(t, err, errs.NotADocument, "too long")
	}
}

// meiliID reports whether Meilisearch accepts s as a string id.
func meiliID(s string) bool {
	if len(s) < 1 || len(s) > 511 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// externalID is the id as Meilisearch stores it: an integer becomes its
// decimal string, so 5 and "5" are one document there.
func externalID(id any) string {
	if n, ok := id.(int64); ok {
		return fmt.Sprint(n)
	}
	return id.(string)
}

// mongoKey is what MongoDB's unique _id index compares.
func mongoKey(v bson.RawValue) string { return jobdef.IDKey(v) }

// idCorpus holds _ids that would collide under a careless mapping.
func idCorpus(t testing.TB) []bson.RawValue {
	oid, _ := bson.ObjectIDFromHex("65f1c0a2b3c4d5e6f7a8b9c0")
	digits, _ := bson.ObjectIDFromHex("123456789012345678901234") // hex that is all digits
	dec, _ := bson.ParseDecimal128("5")
	vals := []any{oid, oid.Hex(), digits, digits.Hex(), strings.ToUpper(oid.Hex()), "_s" + oid.Hex(),
		int32(5), int64(5), 5.0, "5", "_s5", "_u5", "_b5", "05", -5, "-5", "_s-5", int64(math.MaxInt64), "9223372036854775807",
		5.5, dec, "", "_", "__", "_s", "_u", "_b", "a b", "_uYSBi", "YSBi", "a", "A", "-", "-a", "a-", "0", int32(0), math.Copysign(0, -1),
		bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "a", Value: int64(1)}}, bson.A{"x"}, bson.Binary{Data: []byte("5")}, bson.Symbol("5"),
		true, false, nil, bson.DateTime(5), bson.Timestamp{T: 5}, strings.Repeat("z", 511), "_s" + strings.Repeat("z", 507),
		strings.Repeat("é", 150)}
	var out []bson.RawValue
	for _, v := range vals {
		out = append(out, testutil.RawValue(t, v))
	}
	return out
}

func TestNoTwoIDsShareAnIndexID(t *testing.T) {
	seen := map[string]bson.RawValue{}
	for _, id := range idCorpus(t) {
		got, err := jobdef.IndexID(id)
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		if s, ok := got.(string); ok && !meiliID(s) {
			t.Fatalf("%v -> %q, which Meilisearch refuses", id, s)
		}
		ext := externalID(got)
		if prev, ok := seen[ext]; ok && mongoKey(prev) != mongoKey(id) {
			t.Fatalf("%v and %v both map to %q", prev, id, ext)
		}
		seen[ext] = id
	}
}

func TestParseIndexIDReversesIndexID(t *testing.T) {
	for _, id := range idCorpus(t) {
		got, err := jobdef.IndexID(id)
		if err != nil {
			t.Fatal(err)
		}
		// As Meilisearch hands it back: the value itself, and for numbers
		// also a float64 (JSON decoding) and a json.Number.
		forms := []any{got}
		if n, ok := got.(int64); ok {
			forms = append(forms, json.Number(fmt.Sprint(n)), fmt.Sprint(n))
			if math.Abs(float64(n)) <= 1<<53 {
				forms = append(forms, float64(n))
			}
		}
		for _, f := range forms {
			back, err := jobdef.ParseIndexID(f)
			if err != nil {
				t.Fatalf("%v -> %#v: %v", id, f, err)
			}
			if mongoKey(back) != mongoKey(id) {
				t.Fatalf("%v -> %#v -> %v", id, f, back)
			}
		}
	}
}

func TestParseIndexIDRefusesWhatIndexIDNeverWrites(t *testing.T) {
	for _, s := range []any{"", "_", "_sabc", "_s", "_x1", "_u!!", "_uYQ=", "_bAA", "007", "-0", "a b", strings.Repeat("a", 512), 1.5, true, nil, uint64(math.MaxUint64)} {
		if got, err := jobdef.ParseIndexID(s); err == nil {
			t.Errorf("%#v parsed as %v", s, got)
		} else if errs.CodeOf(err) != errs.NotADocument {
			t.Errorf("%#v: %v", s, err)
		}
	}
}

// FuzzIndexIDString: every string _id gets a valid, reversible id that no
// other kind of _id has.
func FuzzIndexIDString(f *testing.F) {
	for _, s := range []string{"", "a", "5", "-5", "_x", "65f1c0a2b3c4d5e6f7a8b9c0", "a b", "é", strings.Repeat("9", 30)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id := bson.RawValue{Type: bson.TypeString, Value: bsoncore.AppendString(nil, s)}
		got, err := jobdef.IndexID(id)
		if err != nil {
			if errs.CodeOf(err) != errs.NotADocument || !strings.Contains(err.Error(), "too long") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		str, ok := got.(string)
		if !ok || !meiliID(str) {
			t.Fatalf("%q -> %#v", s, got)
		}
		if isDec(str) || isHex24(str) {
			t.Fatalf("%q -> %q looks like a number or an ObjectId", s, str)
		}
		back, err := jobdef.ParseIndexID(str)
		if err != nil || back.Type != bson.TypeString || back.StringValue() != s {
			t.Fatalf("%q -> %q -> %v %v", s, str, back, err)
		}
	})
}

// FuzzIndexIDValue: any BSON value either maps to an id that parses back to
// it or is NOT_A_DOCUMENT.
func FuzzIndexIDValue(f *testing.F) {
	for _, v := range idCorpus(f) {
		f.Add(byte(v.Type), v.Value)
	}
	f.Fuzz(func(t *testing.T, typ byte, data []byte) {
		val, rest, ok := bsoncore.ReadValue(data, bsoncore.Type(typ))
		if !ok || len(rest) != 0 || val.Validate() != nil {
			return
		}
		id := bson.RawValue{Type: bson.Type(typ), Value: data}
		got, err := jobdef.IndexID(id)
		if err != nil {
			if errs.CodeOf(err) != errs.NotADocument {
				t.Fatal(err)
			}
			return
		}
		if s, ok := got.(string); ok && !meiliID(s) {
			t.Fatalf("%v -> %q", id, s)
		}
		back, err := jobdef.ParseIndexID(got)
		if err != nil {
			t.Fatalf("%v -> %#v: %v", id, got, err)
		}
		if mongoKey(back) != mongoKey(id) {
			t.Fatalf("%v -> %#v -> %v", id, got, back)
		}
	})
}

func isDec(s string) bool {
	s = strings.TrimPrefix(s, "-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func isHex24(s string) bool { return len(s) == 24 && strings.Trim(s, "0123456789abcdef") == "" }
