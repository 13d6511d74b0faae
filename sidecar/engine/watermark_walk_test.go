package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// everyID is one _id of each BSON type an _id may have (not an array,
// a regex or undefined: mongod refuses those) and of each class of value
// MongoDB orders apart: NaN (below every other number), the infinities,
// -0 (one _id with 0), each numeric type and mixed ones side by side,
// documents holding NaN. They are in MongoDB's order: canonical type
// first (canonicalizeBSONType, src/mongo/bson/bsontypes.h in
// mongodb/mongo; the manual's "Comparison/Sort Order"), then value.
func everyID(t *testing.T, nan, zero any) []any {
	t.Helper()
	dec := func(s string) bson.Decimal128 {
		d, err := bson.ParseDecimal128(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	oid := func(h string) bson.ObjectID {
		id, err := bson.ObjectIDFromHex(h)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	return []any{
		bson.MinKey{},
		nil,
		nan,
		math.Inf(-1),
		-1e300,
		int64(math.MinInt64),
		int32(-7),
		dec("-2.5"),
		-1.25,
		zero,
		dec("0.5"),
		int32(1),
		int64(2),
		2.5,
		dec("2.75"),
		int32(3),
		float64(1 << 53),
		int64(1<<53 + 1), // one _id apart from 2^53: mongod compares exactly
		dec("9007199254740993.5"),
		float64(1<<53 + 4),
		int64(math.MaxInt64),
		1e300,
		math.Inf(1),
		"",
		"A",
		"a",
		bson.Symbol("b"),
		"s",
		"\u00e9",
		bson.D{},
		bson.D{{Key: "a", Value: math.NaN()}},
		bson.D{{Key: "a", Value: int32(1)}},
		bson.D{{Key: "a", Value: int32(1)}, {Key: "b", Value: "x"}},
		bson.D{{Key: "b", Value: int32(0)}}, // an element's type sorts before its name
		bson.D{{Key: "a", Value: "x"}},
		bson.Binary{Subtype: 0x80, Data: []byte{9}},
		bson.Binary{Subtype: 0, Data: []byte{1, 2}},
		bson.Binary{Subtype: 4, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		oid("000000000000000000000000"),
		oid("65a1b2c3d4e5f60718293a4b"),
		false,
		true,
		bson.DateTime(-86400000),
		bson.DateTime(1700000000000),
		bson.Timestamp{T: 1, I: 1},
		bson.Timestamp{T: 1700000000, I: 2},
		bson.DBPointer{DB: "app.other", Pointer: oid("65a1b2c3d4e5f60718293a4b")},
		bson.JavaScript("function () {}"),
		bson.CodeWithScope{Code: "function () { return x; }", Scope: bson.D{{Key: "x", Value: int32(1)}}},
		bson.MaxKey{},
	}
}

// walkAll reads the chain's collection through its walk in pages of n,
// from the start, and returns the documents in the order read.
func walkAll(ctx context.Context, t *testing.T, c *Chain, filter bson.D, n int) []Item {
	t.Helper()
	var got []Item
	var last bson.RawValue
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatalf("page size %d: no end after %d pages (read %d)", n, pages, len(got))
		}
		ch, err := c.readChunk(ctx, filter, last, n)
		if err != nil {
			t.Fatalf("page size %d, after %v: %v", n, last, err)
		}
		if ch.N > n {
			t.Fatalf("page size %d: a page of %d", n, ch.N)
		}
		got = append(got, ch.Items...)
		if ch.N > 0 {
			last = ch.Last
		}
		if ch.Final {
			return got
		}
	}
}

func testChain(t *testing.T, db *mongo.Database, coll string) *Chain {
	t.Helper()
	return newChain(Source{
		DB: db, State: "meilistream", Job: &transform.Job{Job: jobdef.Job{Name: coll, Collection: coll}},
		Log:     hclog.NewNullLogger(),
		Wait:    func(ctx context.Context, attempt int) error { return ctx.Err() },
		Blame:   func(ctx context.Context, err error) error { return err },
		Waiting: new(atomic.Int32),
	}, "reindex")
}

// TestWalkReadsEveryIDTypeInOrder walks collections holding one document
// of each _id type and value class (the NaN and the zero of each of
// another type: each is one _id to MongoDB), with pages of 1, 2 and 3 (so
// every _id is once the last of a page, the one the next page reads
// after), alone and under a filter on another field as a fan-out's task
// has: every document is read, once, in MongoDB's order.
func TestWalkReadsEveryIDTypeInOrder(t *testing.T) {
	ctx, db := testDB(t)
	decNaN, err := bson.ParseDecimal128("NaN")
	if err != nil {
		t.Fatal(err)
	}
	decZero, err := bson.ParseDecimal128("-0.00")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range []struct {
		name      string
		nan, zero any
	}{
		{"double NaN, -0", math.NaN(), math.Copysign(0, -1)},
		{"decimal NaN, int32 0", decNaN, int32(0)},
		{"double NaN, decimal -0", math.NaN(), decZero},
	} {
		ids := everyID(t, v.nan, v.zero)
		coll := db.Collection(fmt.Sprintf("items%d", k))
		docs := make([]any, len(ids))
		for i, id := range ids {
			docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "i", Value: int32(i)}, {Key: "dep", Value: i%3 != 1}}
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
		c := testChain(t, db, coll.Name())
		for _, tc := range []struct {
			name   string
			filter bson.D
			want   func(i int) bool
		}{
			{"every document", nil, func(int) bool { return true }},
			{"a fan-out's task", bson.D{{Key: "dep", Value: true}}, func(i int) bool { return i%3 != 1 }},
		} {
			for n := 1; n <= 3; n++ {
				t.Run(fmt.Sprintf("%s: %s in pages of %d", v.name, tc.name, n), func(t *testing.T) {
					var want, got []int
					for i := range ids {
						if tc.want(i) {
							want = append(want, i)
						}
					}
					read := map[int]bool{}
					for _, it := range walkAll(ctx, t, c, tc.filter, n) {
						i := int(it.Doc.Lookup("i").Int32())
						got, read[i] = append(got, i), true
					}
					if slices.Equal(got, want) {
						return
					}
					for _, i := range want {
						if !read[i] {
							t.Errorf("_id %v never read", ids[i])
						}
					}
					t.Errorf("read documents %v, want %v", got, want)
				})
			}
		}
	}
}
