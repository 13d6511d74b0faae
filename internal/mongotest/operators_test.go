package mongotest_test

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestMoreQueryOperators(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertMany(c, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "Alpha"}, {Key: "tags", Value: bson.A{"x", "y"}}, {Key: "items", Value: bson.A{bson.D{{Key: "k", Value: 1}, {Key: "v", Value: 5}}, bson.D{{Key: "k", Value: 2}, {Key: "v", Value: 1}}}}},
		bson.D{{Key: "_id", Value: 2}, {Key: "name", Value: "beta"}, {Key: "tags", Value: bson.A{"y"}}, {Key: "items", Value: bson.A{bson.D{{Key: "k", Value: 1}, {Key: "v", Value: 1}}}}},
		bson.D{{Key: "_id", Value: 3}, {Key: "name", Value: "gamma"}, {Key: "tags", Value: bson.A{}}, {Key: "n", Value: 10}},
	})
	cases := []struct {
		filter bson.D
		want   string
	}{
		{bson.D{{Key: "name", Value: bson.D{{Key: "$regex", Value: "^a"}, {Key: "$options", Value: "i"}}}}, "[1]"},
		{bson.D{{Key: "name", Value: bson.Regex{Pattern: "ta$"}}}, "[2]"},
		{bson.D{{Key: "tags", Value: bson.D{{Key: "$all", Value: bson.A{"x", "y"}}}}}, "[1]"},
		{bson.D{{Key: "tags", Value: bson.D{{Key: "$size", Value: 0}}}}, "[3]"},
		{bson.D{{Key: "items", Value: bson.D{{Key: "$elemMatch", Value: bson.D{{Key: "k", Value: 1}, {Key: "v", Value: bson.D{{Key: "$gt", Value: 2}}}}}}}}, "[1]"},
		{bson.D{{Key: "items.k", Value: 2}}, "[1]"},
		{bson.D{{Key: "items.0.v", Value: 1}}, "[2]"},
		{bson.D{{Key: "n", Value: bson.D{{Key: "$mod", Value: bson.A{3, 1}}}}}, "[3]"},
		{bson.D{{Key: "tags", Value: bson.A{"y"}}}, "[2]"},
		{bson.D{{Key: "n", Value: bson.D{{Key: "$type", Value: "int"}}}}, "[3]"},
		{bson.D{{Key: "name", Value: bson.D{{Key: "$not", Value: bson.Regex{Pattern: "a$"}}}}}, "[]"},
		{bson.D{{Key: "name", Value: bson.D{{Key: "$in", Value: bson.A{bson.Regex{Pattern: "^g"}, "beta"}}}}}, "[2 3]"},
	}
	for _, tc := range cases {
		cur, err := coll.Find(c, tc.filter)
		if err != nil {
			t.Fatalf("%v: %v", tc.filter, err)
		}
		var got []struct {
			ID int `bson:"_id"`
		}
		cur.All(c, &got)
		ids := []int{}
		for _, g := range got {
			ids = append(ids, g.ID)
		}
		if fmt.Sprint(ids) != tc.want {
			t.Errorf("%v: got %v, want %s", tc.filter, ids, tc.want)
		}
	}
}

func TestMoreUpdateOperators(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.A{3, 1, 2, 2}}, {Key: "lo", Value: 5}, {Key: "hi", Value: 5}, {Key: "m", Value: 3}, {Key: "old", Value: "v"}, {Key: "q", Value: bson.A{1, 2, 3}}})
	_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{
		{Key: "$pull", Value: bson.D{{Key: "a", Value: 2}}},
		{Key: "$min", Value: bson.D{{Key: "lo", Value: 1}}},
		{Key: "$max", Value: bson.D{{Key: "hi", Value: 9}}},
		{Key: "$mul", Value: bson.D{{Key: "m", Value: 2.5}}},
		{Key: "$rename", Value: bson.D{{Key: "old", Value: "new"}}},
		{Key: "$pop", Value: bson.D{{Key: "q", Value: -1}}},
		{Key: "$push", Value: bson.D{{Key: "p", Value: bson.D{{Key: "$each", Value: bson.A{5, 1, 4}}, {Key: "$sort", Value: 1}, {Key: "$slice", Value: 2}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got bson.D
	coll.FindOne(c, bson.D{}).Decode(&got)
	want := `{"_id":{"$numberInt":"1"},"a":[{"$numberInt":"3"},{"$numberInt":"1"}],"lo":{"$numberInt":"1"},"hi":{"$numberInt":"9"},"m":{"$numberDouble":"7.5"},"q":[{"$numberInt":"2"},{"$numberInt":"3"}],"new":"v","p":[{"$numberInt":"1"},{"$numberInt":"4"}]}`
	if fmt.Sprint(got) != want {
		t.Fatalf("got  %v\nwant %s", got, want)
	}
	// $inc on a string is a TypeMismatch write error (14).
	_, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "new", Value: 1}}}})
	if we, ok := err.(mongo.WriteException); !ok || we.WriteErrors[0].Code != 14 {
		t.Fatalf("$inc string: %v", err)
	}
	// An unknown update operator is a FailedToParse (9).
	_, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$bogus", Value: bson.D{{Key: "x", Value: 1}}}})
	if we, ok := err.(mongo.WriteException); !ok || we.WriteErrors[0].Code != 9 {
		t.Fatalf("$bogus: %v", err)
	}
}

func TestMoreStages(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertMany(c, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "tags", Value: bson.A{"a", "b"}}, {Key: "in", Value: bson.D{{Key: "x", Value: 1}}}},
		bson.D{{Key: "_id", Value: 2}, {Key: "tags", Value: bson.A{"b"}}, {Key: "in", Value: bson.D{{Key: "x", Value: 2}}}},
	})
	run := func(p mongo.Pipeline) string {
		cur, err := coll.Aggregate(c, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.D
		if err := cur.All(c, &out); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	if got := run(mongo.Pipeline{{{Key: "$unwind", Value: "$tags"}}, {{Key: "$sortByCount", Value: "$tags"}}}); got != `[{"_id":"b","count":{"$numberInt":"2"}} {"_id":"a","count":{"$numberInt":"1"}}]` {
		t.Errorf("sortByCount %s", got)
	}
	if got := run(mongo.Pipeline{{{Key: "$replaceRoot", Value: bson.D{{Key: "newRoot", Value: "$in"}}}}}); got != `[{"x":{"$numberInt":"1"}} {"x":{"$numberInt":"2"}}]` {
		t.Errorf("replaceRoot %s", got)
	}
	if got := run(mongo.Pipeline{{{Key: "$group", Value: bson.D{{Key: "_id", Value: nil}, {Key: "all", Value: bson.D{{Key: "$push", Value: "$_id"}}}, {Key: "avg", Value: bson.D{{Key: "$avg", Value: "$in.x"}}}, {Key: "mx", Value: bson.D{{Key: "$max", Value: "$in.x"}}}}}}}); got != `[{"_id":null,"all":[{"$numberInt":"1"},{"$numberInt":"2"}],"avg":{"$numberDouble":"1.5"},"mx":{"$numberInt":"2"}}]` {
		t.Errorf("group %s", got)
	}
	if got := run(mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "in.y", Value: bson.D{{Key: "$size", Value: "$tags"}}}}}}, {{Key: "$unset", Value: bson.A{"tags", "in.x"}}}, {{Key: "$limit", Value: 1}}}); got != `[{"_id":{"$numberInt":"1"},"in":{"y":{"$numberInt":"2"}}}]` {
		t.Errorf("set/unset %s", got)
	}
	// $project with a nested inclusion and a computed field.
	if got := run(mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "in.x", Value: 1}, {Key: "first", Value: bson.D{{Key: "$arrayElemAt", Value: bson.A{"$tags", 0}}}}}}}}); got != `[{"in":{"x":{"$numberInt":"1"}},"first":"a"} {"in":{"x":{"$numberInt":"2"}},"first":"b"}]` {
		t.Errorf("project %s", got)
	}
	_ = options.Aggregate
}
