package mongotest_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
)

// Options.NoExpressions answers as FerretDB 1.24.2 with its SQLite backend
// answered the mongo-driver v2 client (the answers were read from a
// FerretDB built from its module, see CONTRIBUTING.md): update pipelines
// refused by update (14) and findAndModify (238), expression operators
// refused (238), plain operators and $currentDate served.
func TestNoExpressionsRefusesAsFerretDB(t *testing.T) {
	_, client := start(t, mongotest.Options{NoExpressions: true})
	c := ctx(t)
	coll := client.Database("noexpr").Collection("c")
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	now := mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "at", Value: "$$NOW"}}}}}
	byID := bson.D{{Key: "_id", Value: 1}}
	gt := bson.D{{Key: "$gt", Value: bson.A{"$x", "$$NOW"}}}
	for _, tc := range []struct {
		what string
		code int32
		name string
		msg  string
		run  func() error
	}{
		{"an update pipeline in update", 14, "TypeMismatch", "BSON field 'update.updates.u' is the wrong type 'array', expected type 'object'",
			func() error { _, err := coll.UpdateOne(c, byID, now); return err }},
		{"an update pipeline in findAndModify", 238, "NotImplemented", "Aggregation pipelines are not supported yet",
			func() error { return coll.FindOneAndUpdate(c, byID, now).Err() }},
		{"a projection in findAndModify", 238, "NotImplemented", `findAndModify: support for field "fields" with value { x: 1 } is not implemented yet`,
			func() error {
				return coll.FindOneAndUpdate(c, byID, bson.D{{Key: "$set", Value: bson.D{{Key: "y", Value: 1}}}}, options.FindOneAndUpdate().SetProjection(bson.D{{Key: "x", Value: 1}})).Err()
			}},
		{"$expr with an operator", 238, "NotImplemented", "The operator $gt is not implemented yet",
			func() error { return coll.FindOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "$expr", Value: gt}}).Err() }},
		{"a $type code of a type it cannot store", 2, "BadValue", "Invalid numerical type code: 12",
			func() error {
				return coll.FindOne(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: bson.A{2, 12}}}}}).Err()
			}},
		{"the $type code of decimal", 238, "NotImplemented", "Type code 19 not implemented",
			func() error {
				return coll.FindOne(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: 19}}}}).Err()
			}},
		{"an operator in $project", 238, "NotImplemented", "The operator $gt is not implemented yet",
			func() error {
				_, err := coll.Aggregate(c, mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "due", Value: gt}}}}})
				return err
			}},
	} {
		t.Run(tc.what+" is refused", func(t *testing.T) {
			var ce mongo.CommandError
			if err := tc.run(); !errors.As(err, &ce) || ce.Code != tc.code || ce.Name != tc.name || ce.Message != tc.msg {
				t.Fatalf("got %v, want (%s) %s, code %d", err, tc.name, tc.msg, tc.code)
			}
		})
	}
	t.Run("plain operators and $currentDate are served", func(t *testing.T) {
		var got bson.M
		err := coll.FindOneAndUpdate(c, byID, bson.D{{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}, {Key: "$max", Value: bson.D{{Key: "x", Value: 2}}}}).Decode(&got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := coll.Aggregate(c, mongo.Pipeline{{{Key: "$match", Value: byID}}, {{Key: "$project", Value: bson.D{{Key: "x", Value: 1}}}}}); err != nil {
			t.Fatal(err)
		}
		if err := coll.FindOne(c, bson.D{{Key: "x", Value: bson.D{{Key: "$type", Value: bson.A{1, 16, 18, "date"}}}}}).Err(); err != nil {
			t.Fatalf("$type with the codes of types FerretDB stores: %v", err)
		}
	})
}
