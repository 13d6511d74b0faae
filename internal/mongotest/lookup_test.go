package mongotest_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// $lookup's equality form, as the manual describes it ("Equality Match with
// a Single Join Condition"): arrays match element by element on either
// side, numbers across types, and a missing local field matches a missing
// or null foreign one.
func TestLookupStageJoinsAsMongodDoes(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("d")
	if _, err := db.Collection("users").InsertMany(c, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "Ada"}},
		bson.D{{Key: "_id", Value: int64(2)}, {Key: "name", Value: "Grace"}},
		bson.D{{Key: "_id", Value: 3}, {Key: "name", Value: "Edsger"}, {Key: "team", Value: nil}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("articles").InsertMany(c, []any{
		bson.D{{Key: "_id", Value: 10}, {Key: "authorId", Value: 1.0}},
		bson.D{{Key: "_id", Value: 11}, {Key: "authorId", Value: bson.A{2, 3, 99}}},
		bson.D{{Key: "_id", Value: 12}},
	}); err != nil {
		t.Fatal(err)
	}
	run := func(local, foreign string) map[int32][]string {
		cur, err := db.Collection("articles").Aggregate(c, mongo.Pipeline{
			{{Key: "$lookup", Value: bson.D{{Key: "from", Value: "users"}, {Key: "localField", Value: local}, {Key: "foreignField", Value: foreign}, {Key: "as", Value: "m"}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var docs []struct {
			ID int32 `bson:"_id"`
			M  []struct {
				Name string `bson:"name"`
			} `bson:"m"`
		}
		if err := cur.All(c, &docs); err != nil {
			t.Fatal(err)
		}
		out := map[int32][]string{}
		for _, d := range docs {
			for _, m := range d.M {
				out[d.ID] = append(out[d.ID], m.Name)
			}
		}
		return out
	}
	got := run("authorId", "_id")
	if len(got[10]) != 1 || got[10][0] != "Ada" || len(got[11]) != 2 || len(got[12]) != 0 {
		t.Fatalf("by _id: %v", got)
	}
	got = run("team", "team")
	if len(got[12]) != 3 {
		t.Fatalf("missing matches missing or null: %v", got)
	}
}
