package mongotest_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// A write concern a one-node replica set cannot satisfy: the write is
// applied and the reply carries writeConcernError 100 "Not enough
// data-bearing nodes" (the replica set configuration's
// checkIfWriteConcernCanBeSatisfied); an unknown tag is 79.
func TestUnsatisfiableWriteConcernIsAWriteConcernError(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	w30 := db.Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: 30}))
	_, err := w30.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 100 || we.WriteConcernError.Name != "UnsatisfiableWriteConcern" {
		t.Fatalf("insert with w:30: %v", err)
	}
	if we.HasErrorLabel("RetryableWriteError") {
		t.Fatalf("100 is not a retriable code, yet labelled: %v", we.Labels)
	}
	if n, _ := db.Collection("c").CountDocuments(c, bson.D{}); n != 1 {
		t.Fatalf("the write was not applied: %d documents", n)
	}
	tag := db.Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: "eastCoast"}))
	_, err = tag.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}})
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 79 {
		t.Fatalf("update with an unknown tag: %v", err)
	}
	for _, wc := range []*writeconcern.WriteConcern{writeconcern.Majority(), writeconcern.W1(), {W: 1, Journal: new(bool)}} {
		if _, err := db.Collection("c", options.Collection().SetWriteConcern(wc)).InsertOne(c, bson.D{}); err != nil {
			t.Fatalf("insert with %+v: %v", wc, err)
		}
	}
}

// A writeConcernError from failCommand is labelled as mongod labels the
// reply (error_labels.cpp isRetryableWriteError looks at the write concern
// error's code too): a retriable code on a retryable write gets
// RetryableWriteError, so the driver retries it (the retryable-writes
// specification's "InsertOne succeeds after WriteConcernError
// ShutdownInProgress"); a statement already applied is not applied twice.
func TestFailCommandWriteConcernErrorLabels(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	wce := func(code int32) {
		data := bson.D{{Key: "failCommands", Value: bson.A{"insert", "update"}},
			{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: code}, {Key: "errmsg", Value: "injected"}}}}
		srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}}, {Key: "data", Value: data}})
	}
	wce(91)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("insert after a ShutdownInProgress write concern error was not retried: %v", err)
	}
	wce(91)
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil {
		t.Fatalf("update: %v", err)
	}
	var got bson.M
	if err := coll.FindOne(c, bson.D{}).Decode(&got); err != nil || got["n"] != int32(1) {
		t.Fatalf("the retried update ran %v times (%v)", got["n"], err)
	}
	// WriteConcernFailed (64) is not retriable: the caller sees it.
	wce(64)
	_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 64 || we.HasErrorLabel("RetryableWriteError") {
		t.Fatalf("insert with an injected 64: %v", err)
	}
	// data.errorLabels replaces the computed labels, here with none.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}}, {Key: "data", Value: bson.D{
		{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorLabels", Value: bson.A{}},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: int32(91)}, {Key: "errmsg", Value: "injected"}}}}}})
	_, err = coll.InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 91 {
		t.Fatalf("insert with an injected 91 and errorLabels []: %v", err)
	}
}
