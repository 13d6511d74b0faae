package transform_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/testutil"
)

// The _ids the transform tests feed documents with, as the id tests of
// jobdef make them.

// externalID is the id as Meilisearch stores it: an integer becomes its
// decimal string, so 5 and "5" are one document there.
func externalID(id any) string {
	if n, ok := id.(int64); ok {
		return fmt.Sprint(n)
	}
	return id.(string)
}

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

func dec(t testing.TB, s string) bson.Decimal128 {
	t.Helper()
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
