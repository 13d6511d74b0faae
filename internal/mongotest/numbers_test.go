package mongotest_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// mongod compares numbers of different types by their exact values
// (src/mongo/base/compare_numbers.h: compareLongToDouble keeps an int64
// beyond 2^53 exact, compareDecimalToDouble converts rounding toward
// negative and checks the inexact flag, compareDoubles puts NaN below every
// number and equal to itself), and its _id index (KeyString) does the same:
// NumberLong(2^53+1) and 2^53 as a double are two documents.
func TestNumbersCompareExactlyAcrossTypes(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("n")
	const big = int64(1)<<53 + 1 // 9007199254740993: no double holds it
	dec := func(s string) bson.Decimal128 {
		d, err := bson.ParseDecimal128(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	docs := []any{
		bson.D{{Key: "_id", Value: big}, {Key: "k", Value: "long 2^53+1"}},
		bson.D{{Key: "_id", Value: float64(1 << 53)}, {Key: "k", Value: "double 2^53"}},
		bson.D{{Key: "_id", Value: dec("9007199254740992.5")}, {Key: "k", Value: "decimal 2^53+0.5"}},
		bson.D{{Key: "_id", Value: 0.1}, {Key: "k", Value: "double 0.1"}},
		bson.D{{Key: "_id", Value: dec("0.1")}, {Key: "k", Value: "decimal 0.1"}},
		bson.D{{Key: "_id", Value: math.NaN()}, {Key: "k", Value: "NaN"}},
		bson.D{{Key: "_id", Value: math.Inf(-1)}, {Key: "k", Value: "-Infinity"}},
		bson.D{{Key: "_id", Value: 0.0}, {Key: "k", Value: "zero"}},
		bson.D{{Key: "_id", Value: int64(math.MaxInt64)}, {Key: "k", Value: "max long"}},
		bson.D{{Key: "_id", Value: 0x1p63}, {Key: "k", Value: "double 2^63"}},
	}
	if _, err := coll.InsertMany(c, docs); err != nil {
		t.Fatalf("distinct numbers refused as duplicates: %v", err)
	}
	// Values equal to a stored _id of another type are duplicates: -0 is 0,
	// a decimal NaN is NaN, decimal 2^53 is the double 2^53.
	for _, dup := range []any{math.Copysign(0, -1), int32(0), dec("-0"), dec("NaN"), dec("9007199254740992"), dec("9.007199254740993E15")} {
		_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: dup}})
		if !mongo.IsDuplicateKeyError(err) {
			t.Errorf("insert _id %v (%T): want duplicate key, got %v", dup, dup, err)
		}
	}

	keys := func(filter bson.D, opts ...options.Lister[options.FindOptions]) string {
		t.Helper()
		cur, err := coll.Find(c, filter, opts...)
		if err != nil {
			t.Fatalf("find %v: %v", filter, err)
		}
		var got []struct {
			K string `bson:"k"`
		}
		if err := cur.All(c, &got); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, g := range got {
			out = append(out, g.K)
		}
		return fmt.Sprintf("%q", out)
	}
	byID := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	cases := []struct {
		name   string
		filter bson.D
		opts   []options.Lister[options.FindOptions]
		want   string
	}{
		{"the _id order is exact, NaN first", bson.D{}, []options.Lister[options.FindOptions]{byID},
			`["NaN" "-Infinity" "zero" "decimal 0.1" "double 0.1" "double 2^53" "decimal 2^53+0.5" "long 2^53+1" "max long" "double 2^63"]`},
		{"a descending sort is its reverse", bson.D{}, []options.Lister[options.FindOptions]{options.Find().SetSort(bson.D{{Key: "_id", Value: -1}})},
			`["double 2^63" "max long" "long 2^53+1" "decimal 2^53+0.5" "double 2^53" "double 0.1" "decimal 0.1" "zero" "-Infinity" "NaN"]`},
		{"$gt a double finds the long just above it", bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: float64(1 << 53)}, {Key: "$lt", Value: 1e18}}}}, nil,
			`["decimal 2^53+0.5" "long 2^53+1"]`},
		{"$lt a long finds the double just below it", bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: big}, {Key: "$gt", Value: 1}}}}, nil,
			`["double 2^53" "decimal 2^53+0.5"]`},
		{"$eq a long is not the nearest double", bson.D{{Key: "_id", Value: big}}, nil, `["long 2^53+1"]`},
		{"$in is exact", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{float64(big), dec("0.1")}}}}}, nil, `["decimal 0.1" "double 2^53"]`},
		{"decimal 0.1 is below double 0.1", bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: 0.1}, {Key: "$gt", Value: 0}}}}, nil, `["decimal 0.1"]`},
		{"max long is below 2^63 as a double", bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: int64(math.MaxInt64)}}}}, nil, `["max long" "double 2^63"]`},
		{"NaN matches only $gte/$lte/$eq NaN", bson.D{{Key: "_id", Value: bson.D{{Key: "$lte", Value: dec("NaN")}}}}, nil, `["NaN"]`},
		{"nothing is $gt NaN", bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: math.NaN()}}}}, nil, `[]`},
		{"-0 finds 0", bson.D{{Key: "_id", Value: math.Copysign(0, -1)}}, nil, `["zero"]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := keys(tc.filter, tc.opts...); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}

	// A unique secondary index, $group and distinct tell the values apart
	// exactly too.
	other := client.Database("db").Collection("u")
	if _, err := other.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "v", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.InsertMany(c, []any{bson.D{{Key: "v", Value: big}}, bson.D{{Key: "v", Value: float64(1 << 53)}}}); err != nil {
		t.Fatalf("a unique index took 2^53+1 and 2^53 for one value: %v", err)
	}
	if _, err := other.InsertOne(c, bson.D{{Key: "v", Value: dec("9007199254740993")}}); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("decimal 2^53+1 beside long 2^53+1 in a unique index: want duplicate key, got %v", err)
	}
	res := other.Distinct(c, "v", bson.D{})
	var vals []any
	if err := res.Decode(&vals); err != nil || len(vals) != 2 {
		t.Errorf("distinct v: %v %v, want two values", vals, err)
	}
	cur, err := other.Aggregate(c, mongo.Pipeline{{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var groups []bson.M
	if err := cur.All(c, &groups); err != nil || len(groups) != 2 {
		t.Errorf("$group by v: %v %v, want two groups", groups, err)
	}
}

// The positional $ as mongod applies it: the first array element the
// filter matched (jstests/core/write/update/updatel.js and
// update_arraymatch*.js), refused with 2 BadValue "The positional operator
// did not find the match needed from the query." when the filter matched no
// element, an upsert's insert included
// (src/mongo/db/update/update_object_node.cpp).
func TestPositionalOperatorUpdatesTheMatchedElement(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("p")
	seed := func() {
		t.Helper()
		if _, err := coll.DeleteMany(c, bson.D{}); err != nil {
			t.Fatal(err)
		}
		_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1},
			{Key: "tags", Value: bson.A{"a", "b", "c", "b"}},
			{Key: "items", Value: bson.A{
				bson.D{{Key: "k", Value: "x"}, {Key: "n", Value: 1}, {Key: "sub", Value: bson.A{1, 2}}},
				bson.D{{Key: "k", Value: "y"}, {Key: "n", Value: 2}, {Key: "sub", Value: bson.A{3, 4}}},
				bson.D{{Key: "k", Value: "z"}, {Key: "n", Value: 3}, {Key: "sub", Value: bson.A{5}}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) string {
		t.Helper()
		raw, err := coll.FindOne(c, bson.D{{Key: "_id", Value: 1}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		js, err := bson.MarshalExtJSON(bson.D{{Key: path, Value: raw.Lookup(path)}}, false, false)
		if err != nil {
			t.Fatal(err)
		}
		return string(js)
	}
	cases := []struct {
		name   string
		filter bson.D
		update bson.D
		field  string
		want   string
	}{
		{"a scalar array element: the first equal one", bson.D{{Key: "tags", Value: "b"}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: "B"}}}}, "tags", `{"tags":["a","B","c","b"]}`},
		{"$in: the first element in the list", bson.D{{Key: "tags", Value: bson.D{{Key: "$in", Value: bson.A{"c", "b"}}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: "X"}}}}, "tags", `{"tags":["a","X","c","b"]}`},
		{"a sub-document field through the array", bson.D{{Key: "items.k", Value: "y"}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "items.$.n", Value: 10}}}}, "items", `{"items":[{"k":"x","n":1,"sub":[1,2]},{"k":"y","n":12,"sub":[3,4]},{"k":"z","n":3,"sub":[5]}]}`},
		{"$elemMatch: the element that matched", bson.D{{Key: "items", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "n", Value: bson.D{{Key: "$gt", Value: 1}}}}}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "items.$.k", Value: "Y"}}}}, "items", `{"items":[{"k":"x","n":1,"sub":[1,2]},{"k":"Y","n":2,"sub":[3,4]},{"k":"z","n":3,"sub":[5]}]}`},
		{"a nested array: the outermost position", bson.D{{Key: "items.sub", Value: 5}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "items.$.n", Value: 0}}}}, "items", `{"items":[{"k":"x","n":1,"sub":[1,2]},{"k":"y","n":2,"sub":[3,4]},{"k":"z","n":0,"sub":[5]}]}`},
		{"two conditions: the last one's position", bson.D{{Key: "_id", Value: 1}, {Key: "tags", Value: "c"}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: "tags.$", Value: ""}}}}, "tags", `{"tags":["a","b",null,"b"]}`},
		{"$or: the branch that matched", bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "tags", Value: "q"}}, bson.D{{Key: "items.k", Value: "z"}}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: "Z"}}}}, "tags", `{"tags":["a","b","Z","b"]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed()
			r, err := coll.UpdateOne(c, tc.filter, tc.update)
			if err != nil || r.ModifiedCount != 1 {
				t.Fatalf("update %v %v: %v %v", tc.filter, tc.update, r, err)
			}
			if got := get(tc.field); got != tc.want {
				t.Errorf("%s = %s, want %s", tc.field, got, tc.want)
			}
		})
	}
	t.Run("findOneAndUpdate applies it too", func(t *testing.T) {
		seed()
		err := coll.FindOneAndUpdate(c, bson.D{{Key: "tags", Value: "c"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: "C"}}}}).Err()
		if got := get("tags"); err != nil || got != `{"tags":["a","b","C","b"]}` {
			t.Fatalf("got %s, %v", got, err)
		}
	})

	t.Run("the change event names the element updated", func(t *testing.T) {
		seed()
		cs, err := coll.Watch(c, mongo.Pipeline{})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close(c)
		if _, err := coll.UpdateOne(c, bson.D{{Key: "tags", Value: "c"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: "C"}}}}); err != nil {
			t.Fatal(err)
		}
		if !cs.Next(c) {
			t.Fatalf("no event: %v", cs.Err())
		}
		fields := cs.Current.Lookup("updateDescription", "updatedFields")
		if js, _ := bson.MarshalExtJSON(bson.D{{Key: "f", Value: fields}}, false, false); string(js) != `{"f":{"tags.2":"C"}}` {
			t.Errorf("updatedFields %s, want tags.2 (as mongod logs the resolved path)", js)
		}
	})

	refused := []struct {
		name   string
		filter bson.D
		update bson.D
		upsert bool
		msg    string
	}{
		{"no array in the filter", bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: 1}}}}, false,
			"The positional operator did not find the match needed from the query."},
		{"the whole array matched, no element", bson.D{{Key: "tags", Value: bson.A{"a", "b", "c", "b"}}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: 1}}}}, false,
			"The positional operator did not find the match needed from the query."},
		{"a negation records no position", bson.D{{Key: "tags", Value: bson.D{{Key: "$ne", Value: "q"}}}}, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.$", Value: 1}}}}, false,
			"The positional operator did not find the match needed from the query."},
		{"an upsert that inserts", bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a.$.b", Value: 1}}}}, true,
			"The positional operator did not find the match needed from the query."},
		{"two $ in one path", bson.D{{Key: "items.sub", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "items.$.sub.$", Value: 1}}}}, false,
			"Too many positional (i.e. '$') elements found in path 'items.$.sub.$'"},
		{"$ first", bson.D{{Key: "tags", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "$.a", Value: 1}}}}, false,
			"Cannot have positional (i.e. '$') element in the first position in path '$.a'"},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			seed()
			_, err := coll.UpdateOne(c, tc.filter, tc.update, options.UpdateOne().SetUpsert(tc.upsert))
			var we mongo.WriteException
			if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 2 || we.WriteErrors[0].Message != tc.msg {
				t.Fatalf("want write error 2 %q, got %v", tc.msg, err)
			}
			if n, _ := coll.CountDocuments(c, bson.D{}); n != 1 {
				t.Errorf("%d documents after a refused update, want 1", n)
			}
			if got := get("tags"); got != `{"tags":["a","b","c","b"]}` {
				t.Errorf("tags = %s after a refused update", got)
			}
		})
	}
}
