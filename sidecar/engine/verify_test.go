package engine_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/engine"
)

func TestVerifyComparesSearchDocumentsAsMeilisearchReturnsThem(t *testing.T) {
	for _, c := range []struct {
		name, want, have string
		field            string // "" when the same
	}{
		{"key order is irrelevant", `{"id":1,"a":"x","b":2}`, `{"b":2,"a":"x","id":1}`, ""},
		{"numbers compare by value", `{"id":1,"n":1}`, `{"id":1,"n":1.0}`, ""},
		{"integers beyond 2^53 compare exactly", `{"id":1,"n":9007199254740993}`, `{"id":1,"n":9007199254740992}`, "n"},
		{"a number is not its string", `{"id":1,"n":5}`, `{"id":1,"n":"5"}`, "n"},
		{"the primary key is compared", `{"id":1,"a":"x"}`, `{"id":2,"a":"x"}`, "id"},
		{"a field the destination lacks", `{"id":1,"a":"x","b":1}`, `{"id":1,"a":"x"}`, "b"},
		{"a field only the destination has", `{"id":1}`, `{"id":1,"z":true}`, "z"},
		{"nested fields are named by their path", `{"id":1,"author":{"name":"A","n":1}}`, `{"id":1,"author":{"name":"B","n":1}}`, "author.name"},
		{"arrays compare in order", `{"id":1,"tags":["a","b"]}`, `{"id":1,"tags":["b","a"]}`, "tags"},
		{"the first differing field in the transform's order", `{"id":1,"title":"x","a":1}`, `{"id":1,"title":"y","a":2}`, "title"},
		{"_vectors is left out", `{"id":1,"_vectors":{"e":[1,2]}}`, `{"id":1}`, ""},
		{"null is not absent", `{"id":1,"a":null}`, `{"id":1}`, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			field, same := engine.DiffJSON([]byte(c.want), []byte(c.have))
			if same != (c.field == "") || field != c.field {
				t.Fatalf("DiffJSON(%s, %s) = %q, %v; want %q", c.want, c.have, field, same, c.field)
			}
		})
	}
}

func TestVerifyComparesMirrorDocumentsByExactBSON(t *testing.T) {
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	id := bson.RawValue{Type: bson.TypeInt64, Value: raw(bson.D{{Key: "v", Value: int64(7)}}).Lookup("v").Value}
	for _, c := range []struct {
		name       string
		want, have bson.D
		field      string
	}{
		{"the same bytes", bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: int64(1)}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: int64(1)}}, ""},
		{"an int64 is not a double", bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: int64(1)}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: 1.0}}, "n"},
		{"an int32 is not an int64", bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: int32(1)}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "n", Value: int64(1)}}, "n"},
		{"top-level order is the replica's", bson.D{{Key: "a", Value: 1}, {Key: "_id", Value: int64(7)}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "a", Value: 1}}, ""},
		{"a document without _id has the source's", bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "a", Value: 1}}, ""},
		{"another _id differs", bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "_id", Value: int32(7)}, {Key: "a", Value: 1}}, "_id"},
		{"nested order matters", bson.D{{Key: "_id", Value: int64(7)}, {Key: "s", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 2}}}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "s", Value: bson.D{{Key: "y", Value: 2}, {Key: "x", Value: 1}}}}, "s"},
		{"a field only the replica has", bson.D{{Key: "_id", Value: int64(7)}}, bson.D{{Key: "_id", Value: int64(7)}, {Key: "z", Value: true}}, "z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			field, same := engine.DiffBSON(id, raw(c.want), raw(c.have))
			if same != (c.field == "") || field != c.field {
				t.Fatalf("DiffBSON = %q, %v; want %q", field, same, c.field)
			}
		})
	}
}

func TestVerifyReadsTheClusterTimeOfAPosition(t *testing.T) {
	tok := func(data string) bson.Raw {
		b, _ := bson.Marshal(bson.D{{Key: "_data", Value: data}})
		return b
	}
	// KeyString of Timestamp(1700000000, 5): 82, then the seconds and
	// the increment, big-endian.
	at := tok("82" + "6553F100" + "00000005" + "2B022C0100296E5A1004")
	for _, c := range []struct {
		name string
		tok  bson.Raw
		wall time.Time
		read bson.Timestamp
		want bool
	}{
		{"a token at the read", at, time.Time{}, bson.Timestamp{T: 1700000000, I: 5}, true},
		{"a token past the read", at, time.Time{}, bson.Timestamp{T: 1700000000, I: 4}, true},
		{"a token before the read", at, time.Time{}, bson.Timestamp{T: 1700000000, I: 6}, false},
		{"a token the format of which is unknown falls back to the wall time", tok("01ABCD"), time.Unix(1700000001, 0), bson.Timestamp{T: 1700000000, I: 9}, true},
		{"a wall time in the read's second has not passed it", tok("01ABCD"), time.Unix(1700000000, 0), bson.Timestamp{T: 1700000000, I: 9}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := engine.PositionPassed(c.tok, c.wall, c.read); got != c.want {
				t.Fatalf("PositionPassed = %v, want %v", got, c.want)
			}
		})
	}
}
