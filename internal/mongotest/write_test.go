package mongotest_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func findDoc(t *testing.T, coll *mongo.Collection, id any) bson.D {
	t.Helper()
	var d bson.D
	if err := coll.FindOne(ctx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatalf("find %v: %v", id, err)
	}
	return d
}

func TestUpdateOperators(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}, {Key: "arr", Value: bson.A{1, 2}}, {Key: "gone", Value: true}}); err != nil {
		t.Fatal(err)
	}
	res, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "a"}}, bson.D{
		{Key: "$set", Value: bson.D{{Key: "sub.x", Value: "y"}}},
		{Key: "$inc", Value: bson.D{{Key: "n", Value: 2}}},
		{Key: "$unset", Value: bson.D{{Key: "gone", Value: ""}}},
		{Key: "$push", Value: bson.D{{Key: "arr", Value: 3}}},
		{Key: "$addToSet", Value: bson.D{{Key: "set", Value: "s"}}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "never", Value: 1}}},
	})
	if err != nil || res.MatchedCount != 1 || res.ModifiedCount != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	got := findDoc(t, coll, "a")
	want := bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(3)}, {Key: "arr", Value: bson.A{int32(1), int32(2), int32(3)}}, {Key: "set", Value: bson.A{"s"}}, {Key: "sub", Value: bson.D{{Key: "x", Value: "y"}}}}
	if !sameDoc(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	// A no-op update matches but does not modify.
	res, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 3}}}})
	if err != nil || res.MatchedCount != 1 || res.ModifiedCount != 0 {
		t.Fatalf("no-op: %+v %v", res, err)
	}
	// Replacement keeps _id.
	if _, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "only", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := findDoc(t, coll, "a"); !sameDoc(got, bson.D{{Key: "_id", Value: "a"}, {Key: "only", Value: int32(1)}}) {
		t.Fatalf("replace: %v", got)
	}
	// Changing _id is refused with 66.
	_, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "_id", Value: "b"}}}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteErrors[0].Code != 66 {
		t.Fatalf("immutable _id: %v", err)
	}
	// Upsert builds the document from the filter's equalities.
	res, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: "u"}, {Key: "k", Value: 5}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}, {Key: "$setOnInsert", Value: bson.D{{Key: "created", Value: true}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil || res.UpsertedID != "u" {
		t.Fatalf("upsert: %+v %v", res, err)
	}
	if got := findDoc(t, coll, "u"); !sameDoc(got, bson.D{{Key: "_id", Value: "u"}, {Key: "k", Value: int32(5)}, {Key: "created", Value: true}, {Key: "v", Value: int32(1)}}) {
		t.Fatalf("upserted: %v", got)
	}
	// multi
	if _, err := coll.InsertMany(c, []any{bson.D{{Key: "g", Value: 1}}, bson.D{{Key: "g", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	res, err = coll.UpdateMany(c, bson.D{{Key: "g", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "h", Value: 2}}}})
	if err != nil || res.ModifiedCount != 2 {
		t.Fatalf("multi: %+v %v", res, err)
	}
	dr, err := coll.DeleteMany(c, bson.D{{Key: "h", Value: 2}})
	if err != nil || dr.DeletedCount != 2 {
		t.Fatalf("deleteMany %+v %v", dr, err)
	}
	dr, err = coll.DeleteOne(c, bson.D{{Key: "_id", Value: "u"}})
	if err != nil || dr.DeletedCount != 1 {
		t.Fatalf("deleteOne %+v %v", dr, err)
	}
}

func sameDoc(a, b bson.D) bool {
	ra, _ := bson.Marshal(a)
	rb, _ := bson.Marshal(b)
	return string(ra) == string(rb)
}

func TestUpdatePipelineStages(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.D{{Key: "f", Value: "f"}}}, {Key: "drop", Value: 1}, {Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "a", Value: bson.D{{Key: "d", Value: true}}}, {Key: "at", Value: "$$NOW"}, {Key: "n", Value: bson.D{{Key: "$add", Value: bson.A{"$n", 1}}}}}}},
		{{Key: "$unset", Value: "drop"}},
		{{Key: "$addFields", Value: bson.D{{Key: "missing", Value: "$nope"}, {Key: "t", Value: bson.D{{Key: "$type", Value: "$nope"}}}, {Key: "cat", Value: bson.D{{Key: "$concatArrays", Value: bson.A{bson.A{1}, bson.A{2, 3}}}}}, {Key: "sl", Value: bson.D{{Key: "$slice", Value: bson.A{bson.A{1, 2, 3}, -2}}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := findDoc(t, coll, 1)
	now := bson.DateTime(srv.Now().UnixMilli())
	at, _ := lookup(got, "at").(bson.DateTime)
	if at > now || now-at > 5000 {
		t.Fatalf("$$NOW gave %v (server now %v)", at, now)
	}
	want := bson.D{{Key: "_id", Value: int32(1)}, {Key: "a", Value: bson.D{{Key: "f", Value: "f"}, {Key: "d", Value: true}}}, {Key: "n", Value: int32(2)}, {Key: "at", Value: at}, {Key: "t", Value: "missing"}, {Key: "cat", Value: bson.A{int32(1), int32(2), int32(3)}}, {Key: "sl", Value: bson.A{int32(2), int32(3)}}}
	if !sameDoc(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

func lookup(d bson.D, k string) any {
	for _, e := range d {
		if e.Key == k {
			return e.Value
		}
	}
	return nil
}

func TestExprInUpsertFilterIsRefused(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	filter := bson.D{{Key: "_id", Value: 1}, {Key: "$expr", Value: bson.D{{Key: "$lt", Value: bson.A{"$exp", "$$NOW"}}}}}
	_, err := coll.UpdateOne(c, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteErrors[0].Code != 224 || !strings.Contains(we.WriteErrors[0].Message, "$expr is not allowed") {
		t.Fatalf("update: %v", err)
	}
	err = coll.FindOneAndUpdate(c, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, options.FindOneAndUpdate().SetUpsert(true)).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 224 {
		t.Fatalf("findAndModify: %v", err)
	}
	// Without upsert $expr is fine.
	if _, err := coll.UpdateOne(c, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}); err != nil {
		t.Fatal(err)
	}
}

func TestUniqueIndexesAndDuplicateKeys(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	_, err := coll.Indexes().CreateMany(c, []mongo.IndexModel{
		{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)},
		{Keys: bson.D{{Key: "slug", Value: 1}}, Options: options.Index().SetUnique(true).SetPartialFilterExpression(bson.D{{Key: "slug", Value: bson.D{{Key: "$exists", Value: true}}}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "a@x"}}); err != nil {
		t.Fatal(err)
	}
	_, err = coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}, {Key: "email", Value: "a@x"}})
	var we mongo.WriteException
	if !mongo.IsDuplicateKeyError(err) || !errors.As(err, &we) {
		t.Fatalf("dup email: %v", err)
	}
	if msg := we.WriteErrors[0].Message; msg != `E11000 duplicate key error collection: db.c index: email_1 dup key: { email: "a@x" }` {
		t.Fatalf("message %q", msg)
	}
	_, err = coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "b@x"}})
	if !errors.As(err, &we) || !strings.Contains(we.WriteErrors[0].Message, "index: _id_ dup key: { _id: 1 }") {
		t.Fatalf("dup _id: %v", err)
	}
	// The partial index ignores documents without slug; a missing email
	// counts as null in the plain unique index, so only one may lack it.
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 4}}); !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("second null email: %v", err)
	}
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 5}, {Key: "email", Value: "c"}, {Key: "slug", Value: "s"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "slug", Value: "s"}}}}); !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("dup slug by update: %v", err)
	}
	// findAndModify reports 11000 as a command error.
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "email", Value: "c"}}}}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("findAndModify dup: %v", err)
	}
	// listIndexes shows them.
	specs, err := coll.Indexes().ListSpecifications(c)
	if err != nil || len(specs) != 3 || specs[1].Name != "email_1" || specs[1].Unique == nil || !*specs[1].Unique {
		t.Fatalf("indexes %+v %v", specs, err)
	}
}

func TestConcurrentConditionalUpsertsGiveOneDuplicateKey(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The filter has a predicate besides _id, so the loser's insert
			// hits _id and mongod does not retry it (reference note §6.3).
			_, errs[i] = coll.UpdateOne(c, bson.D{{Key: "_id", Value: "k"}, {Key: "owner", Value: i}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
		}()
	}
	wg.Wait()
	dups := 0
	for _, err := range errs {
		if mongo.IsDuplicateKeyError(err) {
			dups++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if dups != 1 {
		t.Fatalf("duplicate-key errors: %d (%v)", dups, errs)
	}
	// Plain-equality upserts on the same _id never see 11000: mongod retries
	// them as updates.
	for range 2 {
		if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: "k"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "x", Value: 1}}}}, options.UpdateOne().SetUpsert(true)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindAndModify(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertMany(c, []any{bson.D{{Key: "_id", Value: 1}, {Key: "p", Value: 2}}, bson.D{{Key: "_id", Value: 2}, {Key: "p", Value: 9}}}); err != nil {
		t.Fatal(err)
	}
	var before bson.M
	err := coll.FindOneAndUpdate(c, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "taken", Value: true}}}}, options.FindOneAndUpdate().SetSort(bson.D{{Key: "p", Value: -1}})).Decode(&before)
	if err != nil || before["_id"] != int32(2) || before["taken"] != nil {
		t.Fatalf("before %v %v", before, err)
	}
	var up bson.M
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: 7}}, mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "at", Value: "$$NOW"}}}}}, options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&up)
	if err != nil || up["_id"] != int32(7) || up["at"] == nil {
		t.Fatalf("upsert after %v %v", up, err)
	}
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: 8}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}, options.FindOneAndUpdate().SetUpsert(true)).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("upsert with before returns no document: %v", err)
	}
	var removed bson.M
	if err := coll.FindOneAndDelete(c, bson.D{{Key: "_id", Value: 1}}).Decode(&removed); err != nil || removed["p"] != int32(2) {
		t.Fatalf("delete %v %v", removed, err)
	}
	var replaced bson.M
	if err := coll.FindOneAndReplace(c, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "r", Value: 1}}, options.FindOneAndReplace().SetReturnDocument(options.After).SetProjection(bson.D{{Key: "_id", Value: 0}})).Decode(&replaced); err != nil || len(replaced) != 1 {
		t.Fatalf("replace %v %v", replaced, err)
	}
}

func TestCollectionsAndIndexesAdmin(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	if _, err := db.Collection("b").InsertOne(c, bson.D{}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCollection(c, "a"); err != nil {
		t.Fatal(err)
	}
	names, err := db.ListCollectionNames(c, bson.D{})
	if err != nil || strings.Join(names, ",") != "a,b" {
		t.Fatalf("names %v %v", names, err)
	}
	specs, err := db.ListCollectionSpecifications(c, bson.D{{Key: "name", Value: "b"}})
	if err != nil || len(specs) != 1 || specs[0].UUID == nil {
		t.Fatalf("specs %+v %v", specs, err)
	}
	// Listing indexes of a missing collection is an empty list for the driver.
	cur, err := db.Collection("none").Indexes().List(c)
	if err != nil || cur.Next(c) {
		t.Fatalf("list missing: %v", err)
	}
	if err := db.Collection("b").Drop(c); err != nil {
		t.Fatal(err)
	}
	if err := db.Collection("b").Drop(c); err != nil {
		t.Fatalf("dropping a missing collection: %v", err)
	}
	dbs, err := client.ListDatabaseNames(c, bson.D{})
	if err != nil || strings.Join(dbs, ",") != "db" {
		t.Fatalf("dbs %v %v", dbs, err)
	}
	vals, err := db.Collection("a").Distinct(c, "x", bson.D{}).Raw()
	if err != nil || vals == nil {
		t.Fatalf("distinct %v %v", vals, err)
	}
}

func TestEmptyObjectInPipelineSetIsRefused(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "a", Value: bson.D{}}}}}}, options.UpdateOne().SetUpsert(true))
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteErrors[0].Code != 40180 {
		t.Fatalf("{a: {}}: %v", err)
	}
	// $literal is the way to set an empty object.
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "a", Value: bson.D{{Key: "$literal", Value: bson.D{}}}}}}}}, options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatal(err)
	}
}

// Overlapping paths in one update are refused with 40
// ConflictingUpdateOperators, as mongod's update tree does
// (UpdateObjectNode::parseAndMerge), across operators.
func TestConflictingUpdatePaths(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	for _, u := range []bson.D{
		{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "$inc", Value: bson.D{{Key: "a", Value: 1}}}},
		{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 1}, {Key: "a", Value: 1}}}},
		{{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: 1}}}, {Key: "$currentDate", Value: bson.D{{Key: "updatedAt", Value: true}}}},
		{{Key: "$set", Value: bson.D{{Key: "b", Value: 1}}}, {Key: "$rename", Value: bson.D{{Key: "x", Value: "b"}}}},
	} {
		_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, u, options.UpdateOne().SetUpsert(true))
		var we mongo.WriteException
		if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 40 {
			t.Fatalf("%v: %v", u, err)
		}
	}
	// Siblings and distinct prefixes are fine.
	u := bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 1}, {Key: "a.c", Value: 2}, {Key: "ab", Value: 3}}}, {Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, u); err != nil {
		t.Fatal(err)
	}
}

// A replacement that matches a document may not hold a top-level
// $-prefixed field (52), but an upsert that inserts it may, as an insert
// may, and so may a pipeline update; a replacement's _id of another numeric
// type that compares equal replaces the stored one. As mongod:
// src/mongo/db/update/object_replace_executor.cpp (compareWithBSONElement,
// allowTopLevelDollarPrefixedFields only for pipelines),
// src/mongo/db/exec/upsert_stage.cpp (an upsert's insert validated as an
// insert), docs "Dollar-Prefixed Field Names".
func TestReplacementDollarFieldsAndIDTypes(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	upsert := options.Replace().SetUpsert(true)
	if _, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 1}, {Key: "$price", Value: 1}}, upsert); err != nil {
		t.Fatalf("an upsert inserting a $-prefixed field: %v", err)
	}
	_, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 1}, {Key: "$price", Value: 2}}, upsert)
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteErrors[0].Code != 52 {
		t.Fatalf("a replacement of a document with a $-prefixed field: %v, want 52", err)
	}
	pipe := bson.A{bson.D{{Key: "$replaceWith", Value: bson.D{{Key: "$literal", Value: bson.D{{Key: "_id", Value: 1}, {Key: "$price", Value: 3}}}}}}}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, pipe); err != nil {
		t.Fatalf("a pipeline update to a $-prefixed field: %v", err)
	}
	if got := findDoc(t, coll, 1); !sameDoc(got, bson.D{{Key: "_id", Value: int32(1)}, {Key: "$price", Value: int32(3)}}) {
		t.Fatalf("after the pipeline: %v", got)
	}

	if _, err := coll.ReplaceOne(c, bson.D{{Key: "_id", Value: int64(1)}}, bson.D{{Key: "_id", Value: int64(1)}, {Key: "v", Value: 1}}); err != nil {
		t.Fatalf("a replacement with an equal _id of another type: %v", err)
	}
	var raw bson.Raw
	if err := coll.FindOne(c, bson.D{{Key: "_id", Value: 1}}).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if typ := raw.Lookup("_id").Type; typ != bson.TypeInt64 {
		t.Fatalf("stored _id is a %s, want the replacement's int64", typ)
	}
	_, err = coll.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}})
	if !errors.As(err, &we) || we.WriteErrors[0].Code != 66 {
		t.Fatalf("a replacement with another _id: %v, want 66", err)
	}
}
