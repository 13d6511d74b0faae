package mongotest_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var peopleSchema = bson.D{{Key: "$jsonSchema", Value: bson.D{
	{Key: "bsonType", Value: "object"},
	{Key: "required", Value: bson.A{"name"}},
	{Key: "properties", Value: bson.D{
		{Key: "name", Value: bson.D{{Key: "bsonType", Value: "string"}, {Key: "minLength", Value: 1}}},
		{Key: "age", Value: bson.D{{Key: "bsonType", Value: bson.A{"int", "long"}}, {Key: "minimum", Value: 0}}},
		{Key: "tags", Value: bson.D{{Key: "type", Value: "array"}, {Key: "items", Value: bson.D{{Key: "type", Value: "string"}}}, {Key: "uniqueItems", Value: true}}},
	}},
	{Key: "additionalProperties", Value: bson.D{{Key: "bsonType", Value: bson.A{"string", "int", "array", "objectId"}}}},
}}}

func validationCode(err error) (int, bson.Raw) {
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return we.WriteErrors[0].Code, we.WriteErrors[0].Details
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return int(ce.Code), ce.Raw
	}
	return 0, nil
}

// A collection's validator is enforced on every write, as mongod's
// CollectionImpl::checkValidation: a document that fails it is refused
// with 121 DocumentValidationFailure and errInfo, unless the command says
// bypassDocumentValidation; validationLevel moderate spares updates of
// documents that already failed; validationAction warn only logs.
func TestValidatorIsEnforced(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	if err := db.CreateCollection(c, "people", options.CreateCollection().SetValidator(peopleSchema)); err != nil {
		t.Fatal(err)
	}
	people := db.Collection("people")
	if _, err := people.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "Ada"}, {Key: "age", Value: 36}, {Key: "tags", Value: bson.A{"x", "y"}}}); err != nil {
		t.Fatalf("a valid document: %v", err)
	}
	bad := map[string]bson.D{
		"missing required":       {{Key: "age", Value: 3}},
		"wrong bsonType":         {{Key: "name", Value: 5}},
		"below minimum":          {{Key: "name", Value: "b"}, {Key: "age", Value: -1}},
		"too short":              {{Key: "name", Value: ""}},
		"item of the wrong type": {{Key: "name", Value: "b"}, {Key: "tags", Value: bson.A{"x", 2}}},
		"items not unique":       {{Key: "name", Value: "b"}, {Key: "tags", Value: bson.A{"x", "x"}}},
		"additional property":    {{Key: "name", Value: "b"}, {Key: "score", Value: 1.5}},
	}
	for name, doc := range bad {
		_, err := people.InsertOne(c, doc)
		code, details := validationCode(err)
		if code != 121 {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := details.LookupErr("details", "operatorName"); err != nil {
			t.Fatalf("%s: errInfo without details: %v", name, details)
		}
	}
	// Unordered inserts: the invalid one fails alone.
	_, err := people.InsertMany(c, []any{bson.D{{Key: "_id", Value: 2}, {Key: "name", Value: "ok"}}, bson.D{{Key: "_id", Value: 3}}, bson.D{{Key: "_id", Value: 4}, {Key: "name", Value: "ok"}}},
		options.InsertMany().SetOrdered(false))
	var we mongo.BulkWriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Index != 1 || we.WriteErrors[0].Code != 121 {
		t.Fatalf("unordered insert: %v", err)
	}
	if n, _ := people.CountDocuments(c, bson.D{}); n != 3 {
		t.Fatalf("%d documents after the unordered insert, want 3", n)
	}
	// Updates, replacements, upserts and findAndModify are checked too.
	for name, write := range map[string]func() error{
		"update": func() error {
			_, err := people.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: 1}}}})
			return err
		},
		"replace": func() error {
			_, err := people.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "age", Value: 1}})
			return err
		},
		"upsert": func() error {
			_, err := people.UpdateOne(c, bson.D{{Key: "_id", Value: 9}}, bson.D{{Key: "$set", Value: bson.D{{Key: "age", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
			return err
		},
		"findAndModify": func() error {
			return people.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "name", Value: ""}}}}).Err()
		},
	} {
		if code, _ := validationCode(write()); code != 121 {
			t.Fatalf("%s of an invalid document: %v", name, write())
		}
	}
	var ada bson.M
	if err := people.FindOne(c, bson.D{{Key: "_id", Value: 1}}).Decode(&ada); err != nil || ada["name"] != "Ada" {
		t.Fatalf("a refused write changed the document: %v %v", ada, err)
	}
	// bypassDocumentValidation lets one through.
	if _, err := people.InsertOne(c, bson.D{{Key: "_id", Value: 10}}, options.InsertOne().SetBypassDocumentValidation(true)); err != nil {
		t.Fatalf("bypass: %v", err)
	}
	// moderate: the invalid document may be updated and stay invalid;
	// valid ones must stay valid.
	if err := db.RunCommand(c, bson.D{{Key: "collMod", Value: "people"}, {Key: "validationLevel", Value: "moderate"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := people.UpdateOne(c, bson.D{{Key: "_id", Value: 10}}, bson.D{{Key: "$set", Value: bson.D{{Key: "age", Value: -5}}}}); err != nil {
		t.Fatalf("moderate, an already invalid document: %v", err)
	}
	if _, err := people.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "age", Value: -5}}}}); err == nil {
		t.Fatal("moderate let a valid document become invalid")
	}
	// warn: logged, written.
	if err := db.RunCommand(c, bson.D{{Key: "collMod", Value: "people"}, {Key: "validationAction", Value: "warn"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := people.InsertOne(c, bson.D{{Key: "_id", Value: 11}}); err != nil {
		t.Fatalf("warn: %v", err)
	}
	// A query-operator validator, set by collMod.
	if err := db.RunCommand(c, bson.D{{Key: "collMod", Value: "people"}, {Key: "validator", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "$gt", Value: 0}}}}}, {Key: "validationAction", Value: "error"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if code, _ := validationCode(func() error { _, err := people.InsertOne(c, bson.D{{Key: "qty", Value: 0}}); return err }()); code != 121 {
		t.Fatal("query validator not enforced")
	}
	if _, err := people.InsertOne(c, bson.D{{Key: "qty", Value: 2}}); err != nil {
		t.Fatalf("query validator: %v", err)
	}
}

// A schema mongod cannot parse is refused when the collection is created
// (json_schema_parser.cpp: FailedToParse for unknown and unsupported
// keywords), and $jsonSchema works as a query operator.
func TestJSONSchemaParsingAndQueries(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	for schema, want := range map[string]string{
		`{"$jsonSchema": {"foo": 1}}`:                            "Unknown $jsonSchema keyword: foo",
		`{"$jsonSchema": {"format": "email"}}`:                   "keyword 'format' is not currently supported",
		`{"$jsonSchema": {"type": "integer"}}`:                   "type 'integer' is not currently supported",
		`{"$jsonSchema": {"exclusiveMinimum": true}}`:            "'minimum' must be a present",
		`{"$jsonSchema": {"type": "object", "bsonType": "int"}}`: "Cannot specify both",
	} {
		var v bson.D
		if err := bson.UnmarshalExtJSON([]byte(schema), false, &v); err != nil {
			t.Fatal(err)
		}
		err := db.CreateCollection(c, "bad", options.CreateCollection().SetValidator(v))
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != 9 || !strings.Contains(ce.Message, want) {
			t.Fatalf("%s: %v, want FailedToParse %q", schema, err, want)
		}
	}
	coll := db.Collection("c")
	coll.InsertMany(c, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: "x"}},
		bson.D{{Key: "_id", Value: 2}, {Key: "a", Value: 5}},
		bson.D{{Key: "_id", Value: 3}},
		bson.D{{Key: "_id", Value: 4}, {Key: "a", Value: bson.D{{Key: "b", Value: 1}}}},
	})
	for schema, want := range map[string]int64{
		`{"properties": {"a": {"type": "string"}}}`: 2, // 1, and 3 without a
		`{"required": ["a"]}`:                       3,
		`{"properties": {"a": {"anyOf": [{"type": "number"}, {"type": "object", "required": ["b"]}]}}, "required": ["a"]}`: 2,
		`{"properties": {"a": {"not": {"type": "number"}}}}`:                                                               3,
		`{"type": "array"}`: 0,
	} {
		var v bson.D
		if err := bson.UnmarshalExtJSON([]byte(schema), false, &v); err != nil {
			t.Fatal(err)
		}
		n, err := coll.CountDocuments(c, bson.D{{Key: "$jsonSchema", Value: v}})
		if err != nil || n != want {
			t.Fatalf("%s: %d documents (%v), want %d", schema, n, err, want)
		}
	}
}

// Batches without statements and names with NUL are refused, as mongod
// refuses them (write_ops.cpp checkOpCountForCommand: 16 InvalidLength;
// NamespaceString validDBName / validCollectionName: 73 InvalidNamespace).
func TestEmptyBatchesAndNULNamesAreRefused(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	for _, cmd := range []bson.D{
		{{Key: "insert", Value: "c"}, {Key: "documents", Value: bson.A{}}},
		{{Key: "update", Value: "c"}, {Key: "updates", Value: bson.A{}}},
		{{Key: "delete", Value: "c"}, {Key: "deletes", Value: bson.A{}}},
	} {
		err := db.RunCommand(c, cmd).Err()
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != 16 || !strings.Contains(ce.Message, "Got 0 operations") {
			t.Fatalf("%s with no statements: %v", cmd[0].Key, err)
		}
	}
	if names, _ := db.ListCollectionNames(c, bson.D{}); len(names) != 0 {
		t.Fatalf("an empty insert created %v", names)
	}
	for _, coll := range []*mongo.Collection{
		db.Collection("a\x00b"),
		client.Database("d\x00b").Collection("c"),
	} {
		_, err := coll.InsertOne(c, bson.D{})
		var ce mongo.ServerError
		if !errors.As(err, &ce) || !ce.HasErrorCode(73) {
			t.Fatalf("insert into %q.%q: %v", coll.Database().Name(), coll.Name(), err)
		}
	}
	if err := db.CreateCollection(c, "x\x00y"); err == nil {
		t.Fatal("create with a NUL in the name worked")
	}
}
