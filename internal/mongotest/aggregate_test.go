package mongotest_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestAggregateStages(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	var docs []any
	for i := 0; i < 20; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "g", Value: fmt.Sprint("g", i%3)}, {Key: "v", Value: i}})
	}
	coll.InsertMany(c, docs)
	cur, err := coll.Aggregate(c, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "v", Value: bson.D{{Key: "$gte", Value: 3}}}}}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$g"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}, {Key: "total", Value: bson.D{{Key: "$sum", Value: "$v"}}}}}},
		{{Key: "$sort", Value: bson.D{{Key: "_id", Value: -1}}}},
		{{Key: "$skip", Value: 1}},
		{{Key: "$limit", Value: 1}},
		{{Key: "$project", Value: bson.D{{Key: "n", Value: 1}, {Key: "twice", Value: bson.D{{Key: "$multiply", Value: bson.A{"$total", 2}}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.D
	if err := cur.All(c, &got); err != nil {
		t.Fatal(err)
	}
	// g1 holds 4,7,10,13,16,19 -> n 6, total 69
	want := bson.D{{Key: "_id", Value: "g1"}, {Key: "n", Value: int32(6)}, {Key: "twice", Value: int32(138)}}
	if len(got) != 1 || !sameDoc(got[0], want) {
		t.Fatalf("got %v", got)
	}
	cur, err = coll.Aggregate(c, mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "g", Value: "g0"}}}}, {{Key: "$count", Value: "n"}}})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := cur.All(c, &got); err != nil || len(got) != 1 || got[0][0].Value != int32(7) {
		t.Fatalf("$count %v %v", got, err)
	}
	// CountDocuments is an aggregate with $group {_id: 1, n: {$sum: 1}}.
	if n, err := coll.CountDocuments(c, bson.D{{Key: "g", Value: "none"}}); err != nil || n != 0 {
		t.Fatalf("count none: %d %v", n, err)
	}
	if n, err := coll.CountDocuments(c, bson.D{}, options.Count().SetSkip(5).SetLimit(10)); err != nil || n != 10 {
		t.Fatalf("count skip limit: %d %v", n, err)
	}
	// Unknown expression operator: 168.
	_, err = coll.Aggregate(c, mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "x", Value: bson.D{{Key: "$nope", Value: 1}}}}}}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 168 {
		t.Fatalf("unknown operator: %v", err)
	}
}

func TestExpressionsAndTypeOrder(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	now := time.Now()
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "d", Value: now}, {Key: "n", Value: int64(5)}, {Key: "s", Value: "x"}, {Key: "arr", Value: bson.A{1, 2, 3, 4}}, {Key: "nul", Value: nil}})
	cur, err := coll.Aggregate(c, mongo.Pipeline{{{Key: "$project", Value: bson.D{
		{Key: "_id", Value: 0},
		{Key: "missingLtNull", Value: bson.D{{Key: "$lt", Value: bson.A{"$absent", nil}}}},
		{Key: "missingEqNull", Value: bson.D{{Key: "$eq", Value: bson.A{"$absent", nil}}}},
		{Key: "numberLtDate", Value: bson.D{{Key: "$lt", Value: bson.A{"$n", "$d"}}}},
		{Key: "numberLtString", Value: bson.D{{Key: "$lt", Value: bson.A{"$n", "$s"}}}},
		{Key: "dateLtNow", Value: bson.D{{Key: "$lte", Value: bson.A{"$d", "$$NOW"}}}},
		{Key: "intEqLong", Value: bson.D{{Key: "$eq", Value: bson.A{5, "$n"}}}},
		{Key: "plus", Value: bson.D{{Key: "$add", Value: bson.A{"$d", 1.5}}}},
		{Key: "plusNull", Value: bson.D{{Key: "$add", Value: bson.A{"$d", "$absent"}}}},
		{Key: "diff", Value: bson.D{{Key: "$subtract", Value: bson.A{bson.D{{Key: "$add", Value: bson.A{"$d", 1000}}}, "$d"}}}},
		{Key: "types", Value: bson.A{bson.D{{Key: "$type", Value: "$absent"}}, bson.D{{Key: "$type", Value: "$n"}}, bson.D{{Key: "$type", Value: "$d"}}, bson.D{{Key: "$type", Value: "$nul"}}}},
		{Key: "ifNull", Value: bson.D{{Key: "$ifNull", Value: bson.A{"$absent", "$nul", "dflt"}}}},
		{Key: "cond", Value: bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$and", Value: bson.A{1, "$s", bson.D{{Key: "$not", Value: bson.A{0}}}}}}, "yes", "no"}}}},
		{Key: "or", Value: bson.D{{Key: "$or", Value: bson.A{0, nil, "$absent"}}}},
		{Key: "slice", Value: bson.D{{Key: "$slice", Value: bson.A{"$arr", 1, 2}}}},
		{Key: "concat", Value: bson.D{{Key: "$concatArrays", Value: bson.A{"$arr", bson.A{"z"}}}}},
		{Key: "lit", Value: bson.D{{Key: "$literal", Value: "$notAPath"}}},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.M
	if err := cur.All(c, &got); err != nil || len(got) != 1 {
		t.Fatal(err)
	}
	g := got[0]
	checks := map[string]any{
		"missingLtNull": true, "missingEqNull": false, "numberLtDate": true, "numberLtString": true,
		"dateLtNow": true, "intEqLong": true, "plusNull": nil, "diff": int64(1000),
		"ifNull": "dflt", "cond": "yes", "or": false, "lit": "$notAPath",
	}
	for k, want := range checks {
		if g[k] != want {
			t.Errorf("%s = %#v, want %#v", k, g[k], want)
		}
	}
	if p, ok := g["plus"].(bson.DateTime); !ok || int64(p) != now.UnixMilli()+2 {
		t.Errorf("date + 1.5 = %#v, want the date plus 2 ms", g["plus"])
	}
	if fmt.Sprint(g["types"]) != "[missing long date null]" {
		t.Errorf("types %v", g["types"])
	}
	if fmt.Sprint(g["slice"]) != "[2 3]" || fmt.Sprint(g["concat"]) != "[1 2 3 4 z]" {
		t.Errorf("slice %v concat %v", g["slice"], g["concat"])
	}
	// Sorting across types follows MongoDB's canonical order.
	mixed := client.Database("db").Collection("mixed")
	mixed.InsertMany(c, []any{
		bson.D{{Key: "v", Value: now}}, bson.D{{Key: "v", Value: true}}, bson.D{{Key: "v", Value: "s"}},
		bson.D{{Key: "v", Value: 3}}, bson.D{{Key: "v", Value: nil}}, bson.D{{Key: "v", Value: bson.D{{Key: "a", Value: 1}}}},
		bson.D{{Key: "v", Value: bson.NewObjectID()}}, bson.D{{Key: "v", Value: bson.Timestamp{T: 1}}}, bson.D{{Key: "v", Value: 1.5}}, bson.D{},
	})
	cur, err = mixed.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "v", Value: 1}}).SetProjection(bson.D{{Key: "_id", Value: 0}}))
	if err != nil {
		t.Fatal(err)
	}
	var sorted []bson.M
	if err := cur.All(c, &sorted); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, s := range sorted {
		kinds = append(kinds, fmt.Sprintf("%T", s["v"]))
	}
	want := "[<nil> <nil> float64 int32 string bson.D bson.ObjectID bool bson.DateTime bson.Timestamp]"
	if fmt.Sprint(kinds) != want {
		t.Fatalf("order %v\nwant  %v", kinds, want)
	}
	// $type in a query.
	n, err := mixed.CountDocuments(c, bson.D{{Key: "v", Value: bson.D{{Key: "$type", Value: "number"}}}})
	if err != nil || n != 2 {
		t.Fatalf("$type number: %d %v", n, err)
	}
}

func TestDistinctDropDatabaseRenameListDatabases(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db1")
	coll := db.Collection("c")
	coll.InsertMany(c, []any{bson.D{{Key: "k", Value: bson.A{"b", "a"}}}, bson.D{{Key: "k", Value: "a"}}, bson.D{{Key: "k", Value: 1}}})
	var vals []any
	if err := coll.Distinct(c, "k", bson.D{}).Decode(&vals); err != nil || fmt.Sprint(vals) != "[1 a b]" {
		t.Fatalf("distinct %v %v", vals, err)
	}
	client.Database("db2").Collection("x").InsertOne(c, bson.D{})
	res, err := client.ListDatabases(c, bson.D{})
	if err != nil || len(res.Databases) != 2 || res.Databases[0].Name != "db1" || res.Databases[0].SizeOnDisk == 0 {
		t.Fatalf("listDatabases %+v %v", res, err)
	}
	admin := client.Database("admin")
	if err := admin.RunCommand(c, bson.D{{Key: "renameCollection", Value: "db1.c"}, {Key: "to", Value: "db1.d"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.Collection("d").CountDocuments(c, bson.D{}); n != 3 {
		t.Fatalf("renamed has %d", n)
	}
	err = admin.RunCommand(c, bson.D{{Key: "renameCollection", Value: "db1.c"}, {Key: "to", Value: "db1.e"}}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 26 {
		t.Fatalf("rename missing: %v", err)
	}
	client.Database("db1").Collection("e").InsertOne(c, bson.D{})
	err = admin.RunCommand(c, bson.D{{Key: "renameCollection", Value: "db1.d"}, {Key: "to", Value: "db1.e"}}).Err()
	if !errors.As(err, &ce) || ce.Code != 48 {
		t.Fatalf("rename onto existing: %v", err)
	}
	if err := admin.RunCommand(c, bson.D{{Key: "renameCollection", Value: "db1.d"}, {Key: "to", Value: "db1.e"}, {Key: "dropTarget", Value: true}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Drop(c); err != nil {
		t.Fatal(err)
	}
	names, err := client.ListDatabaseNames(c, bson.D{})
	if err != nil || fmt.Sprint(names) != "[db2]" {
		t.Fatalf("after dropDatabase %v %v", names, err)
	}
}

func TestManySmallDocuments(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("inserts 100k documents; a speed check, skipped with -short and -race")
	}
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("big")
	const n = 100000
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}, {Key: "name", Value: "document"}, {Key: "n", Value: i}}
	}
	begin := time.Now()
	if _, err := coll.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	inserted := time.Since(begin)
	// Read back in _id pages, as a reindex does.
	begin = time.Now()
	last, count := -1, 0
	for {
		cur, err := coll.Find(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(1000).SetBatchSize(1000))
		if err != nil {
			t.Fatal(err)
		}
		var page []struct {
			ID int `bson:"_id"`
		}
		if err := cur.All(c, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			if p.ID != last+1 {
				t.Fatalf("after %d got %d", last, p.ID)
			}
			last = p.ID
			count++
		}
	}
	read := time.Since(begin)
	if count != n {
		t.Fatalf("read %d", count)
	}
	t.Logf("inserted %d in %v, read back in %v", n, inserted, read)
}
