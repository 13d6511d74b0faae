package stream_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/stream"
)

func TestTokenTime(t *testing.T) {
	tok := func(data any) bson.Raw {
		b, err := bson.Marshal(bson.D{{Key: "_data", Value: data}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name string
		tok  bson.Raw
		want bson.Timestamp
		ok   bool
	}{
		// A mongod 7.0 event token: the KeyString timestamp, then the rest.
		{"a real event token", tok("8263F0A6E1000000012B022C0100296E5A1004AB39D1E6B2DC4D34A3BDE1A07A2A1BC046645F6964006463F0A6E1F4A4B2C1F5D0E7C70004"), bson.Timestamp{T: 0x63F0A6E1, I: 1}, true},
		{"the test server's high-water mark", tok("826B0F763E000000010000000000000D68C0"), bson.Timestamp{T: 0x6B0F763E, I: 1}, true},
		{"another KeyString type", tok("8763F0A6E100000001"), bson.Timestamp{}, false},
		{"too short", tok("8263F0A6"), bson.Timestamp{}, false},
		{"not hex", tok("82zzzzzzzz00000001"), bson.Timestamp{}, false},
		{"not a string", tok(int32(5)), bson.Timestamp{}, false},
		{"no _data", func() bson.Raw { b, _ := bson.Marshal(bson.D{{Key: "x", Value: 1}}); return b }(), bson.Timestamp{}, false},
		{"empty", nil, bson.Timestamp{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := stream.TokenTime(c.tok)
			if got != c.want || ok != c.ok {
				t.Fatalf("TokenTime = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
