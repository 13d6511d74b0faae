package mongotest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func TestFailCommandMakesFindFail(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	// Through the command, as driver spec tests do.
	err := client.Database("admin").RunCommand(c, bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find"}}, {Key: "errorCode", Value: 2}, {Key: "errorLabels", Value: bson.A{"SomeLabel"}}}},
	}).Err()
	if err != nil {
		t.Fatal(err)
	}
	err = coll.FindOne(c, bson.D{}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 2 || !ce.HasErrorLabel("SomeLabel") {
		t.Fatalf("first find: %v", err)
	}
	if err := coll.FindOne(c, bson.D{}).Err(); err != nil {
		t.Fatalf("times:1 failed twice: %v", err)
	}
	// alwaysOn until off, through the Go method.
	srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find", "aggregate"}}, {Key: "errorCode", Value: 280}}}})
	for i := 0; i < 3; i++ {
		if err := coll.FindOne(c, bson.D{}).Err(); !errors.As(err, &ce) || ce.Code != 280 {
			t.Fatalf("alwaysOn %d: %v", i, err)
		}
	}
	srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}})
	if err := coll.FindOne(c, bson.D{}).Err(); err != nil {
		t.Fatalf("off: %v", err)
	}
}

func TestFailCommandRetryableWrites(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	// A step-down style error on insert: mongod labels it
	// RetryableWriteError, the driver retries once and the write lands once.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 10107}}}})
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("retryable insert: %v", err)
	}
	// A closed connection on update is retried too.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}, {Key: "closeConnection", Value: true}}}})
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}); err != nil {
		t.Fatalf("retried update: %v", err)
	}
	var d bson.M
	if err := coll.FindOne(c, bson.D{{Key: "_id", Value: 1}}).Decode(&d); err != nil || d["n"] != int32(1) {
		t.Fatalf("after retries %v %v", d, err)
	}
	// Without the label the error reaches the caller.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 2}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 11000}}}})
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}}); !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("non-retryable: %v", err)
	}
}

func TestFailCommandBlocksConnection(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find"}}, {Key: "blockConnection", Value: true}, {Key: "blockTimeMS", Value: 300}}}})
	begin := time.Now()
	if err := coll.FindOne(c, bson.D{}).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < 300*time.Millisecond {
		t.Fatalf("returned after %v", d)
	}
}

// mongod labels a change stream's getMore error ResumableChangeStreamError
// only once the getMore holds its cursor (error_labels.cpp reads the
// cursor's originating command): failGetMoreAfterCursorCheckout's errors
// get the label and the driver resumes, failCommand's fire before and get
// none, and reach the caller, as the change-streams specification's
// change-streams-resume-errorLabels tests expect ("change stream does not
// resume if error does not contain ResumableChangeStreamError").
func TestFailCommandLabelsLikeMongod(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failGetMoreAfterCursorCheckout"}, {Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "errorCode", Value: 189}}}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	if ev := next(t, cs); ev.DocumentKey["_id"] != int32(1) {
		t.Fatalf("%v", ev.DocumentKey)
	}
	// The same code from failCommand, with no errorLabels: not resumed.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 189}}}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	c2, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	var se mongo.ServerError
	if cs.Next(c2) {
		t.Fatal("a failCommand getMore error without labels was resumed")
	}
	if !errors.As(cs.Err(), &se) || !se.HasErrorCode(189) || se.HasErrorLabel("ResumableChangeStreamError") {
		t.Fatalf("Err %v", cs.Err())
	}
	// The same code on a find carries no change-stream label.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find"}}, {Key: "errorCode", Value: 2}}}})
	err = coll.FindOne(c, bson.D{}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 2 || len(ce.Labels) != 0 {
		t.Fatalf("find: %v (labels %v)", err, ce.Labels)
	}
}

// An aggregate opening a change stream is known to be one before it runs:
// failCommand's resumable errors on it are labelled, and the driver's
// Watch retries it once, as a retryable read.
func TestFailCommandLabelsTheOpeningAggregate(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	var labels []string
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"aggregate"}}, {Key: "errorCode", Value: 11000}}}})
	_, err := coll.Watch(c, mongo.Pipeline{})
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(11000) {
		t.Fatalf("watch failing with 11000: %v", err)
	}
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"aggregate"}}, {Key: "errorCode", Value: 91}}}})
	raw, err := client.Database("db").RunCommand(c, bson.D{{Key: "aggregate", Value: "c"},
		{Key: "pipeline", Value: bson.A{bson.D{{Key: "$changeStream", Value: bson.D{}}}}}, {Key: "cursor", Value: bson.D{}}}).Raw()
	if !errors.As(err, &se) {
		t.Fatalf("aggregate failing with 91: %v", err)
	}
	if v, err := raw.LookupErr("errorLabels"); err == nil {
		vals, _ := v.Array().Values()
		for _, l := range vals {
			labels = append(labels, l.StringValue())
		}
	}
	if fmt.Sprint(labels) != "[ResumableChangeStreamError]" {
		t.Fatalf("labels %v, want [ResumableChangeStreamError]", labels)
	}
}

// Labels follow src/mongo/db/error_labels.cpp and the categories of
// src/mongo/base/error_codes.yml: RetryableWriteError only for the
// RetriableError category (not 234 RetryChangeStream, 133, StaleConfig),
// NonResumableChangeStreamError for 280/286 on any command, and
// ResumableChangeStreamError for NeedRetargettingError codes too.
func TestFailCommandLabelCategories(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	fail := func(cmd string, code int) {
		srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
			{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{cmd}}, {Key: "errorCode", Value: code}}}})
	}
	// 234 on a retryable write: no RetryableWriteError, so the driver
	// does not retry and the insert fails.
	fail("insert", 234)
	_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(234) || se.HasErrorLabel("RetryableWriteError") {
		t.Fatalf("insert failing with 234: %v", err)
	}
	// 189 is retried (RetriableError).
	fail("insert", 189)
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatalf("insert failing once with 189 was not retried: %v", err)
	}
	// 286 on a find: NonResumableChangeStreamError.
	fail("find", 286)
	err = coll.FindOne(c, bson.D{}).Err()
	if !errors.As(err, &se) || !se.HasErrorLabel("NonResumableChangeStreamError") || se.HasErrorLabel("ResumableChangeStreamError") {
		t.Fatalf("find failing with 286: %v", err)
	}
	// StaleConfig (NeedRetargettingError) on a change stream getMore that
	// holds its cursor resumes.
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failGetMoreAfterCursorCheckout"}, {Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "errorCode", Value: 13388}}}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	if ev := next(t, cs); ev.DocumentKey["_id"] != int32(3) {
		t.Fatalf("%v", ev.DocumentKey)
	}
	// 11000 on a getMore is not resumable: Next fails.
	fail("getMore", 11000)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 4}})
	c2, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	if cs.Next(c2) {
		t.Fatal("a getMore failing with 11000 was resumed")
	}
	if !errors.As(cs.Err(), &se) || !se.HasErrorCode(11000) {
		t.Fatalf("Err %v", cs.Err())
	}
}

// data.namespace limits the fail point to one collection's commands, a
// getMore's included: mongod matches a getMore by its cursor's collection
// (the command's "collection" field), not by its first value, a cursor id.
func TestFailCommandNamespaceMatchesGetMore(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	for _, name := range []string{"books", "other"} {
		if _, err := db.Collection(name).InsertMany(c, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	srv.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 2}, {Key: "namespace", Value: "db.books"}}}})
	drain := func(name string) error {
		cur, err := db.Collection(name).Find(c, bson.D{}, options.Find().SetBatchSize(1))
		if err != nil {
			return err
		}
		defer cur.Close(c)
		n := 0
		for cur.Next(c) {
			n++
		}
		if err := cur.Err(); err != nil {
			return err
		}
		if n != 3 {
			return fmt.Errorf("%d documents, want 3", n)
		}
		return nil
	}
	var ce mongo.CommandError
	if err := drain("books"); !errors.As(err, &ce) || ce.Code != 2 {
		t.Fatalf("getMore on db.books: %v, want the fail point's error 2", err)
	}
	if err := drain("other"); err != nil {
		t.Fatalf("getMore on db.other failed: %v", err)
	}
	// A change stream's getMore on books fails too (11000: not resumable).
	cs, err := db.Collection("books").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 11000}, {Key: "namespace", Value: "db.books"}}}})
	c2, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	if cs.Next(c2) {
		t.Fatal("a change stream getMore on db.books did not fail")
	}
	var se mongo.ServerError
	if !errors.As(cs.Err(), &se) || !se.HasErrorCode(11000) {
		t.Fatalf("change stream Err %v, want 11000", cs.Err())
	}
}

// configureFailPoint answers how many times the fail point was entered so
// far (over every configuration), and waitForFailPoint waits for a total,
// failing with MaxTimeMSExpired: a script can so check that the fault it
// set up happened.
func TestFailPointCountAndWaitForFailPoint(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	admin := client.Database("admin")
	coll := client.Database("db").Collection("c")
	configure := func(cmd bson.D) int64 {
		t.Helper()
		res, err := admin.RunCommand(c, cmd).Raw()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := res.Lookup("count").AsInt64OK()
		if !ok {
			t.Fatalf("reply %s has no count", res)
		}
		return n
	}
	wait := func(n int64, ms int) error {
		return admin.RunCommand(c, bson.D{{Key: "waitForFailPoint", Value: "failCommand"},
			{Key: "timesEntered", Value: n}, {Key: "maxTimeMS", Value: ms}}).Err()
	}
	on := bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: bson.D{{Key: "times", Value: 2}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find"}}, {Key: "errorCode", Value: 2}, {Key: "namespace", Value: "db.c"}}}}
	off := bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}
	if n := configure(on); n != 0 {
		t.Fatalf("count %d before any fail point fired", n)
	}
	// Not entered: another namespace, another command.
	_ = client.Database("db").Collection("other").FindOne(c, bson.D{}).Err()
	_, _ = coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	var ce mongo.CommandError
	if err := wait(1, 50); !errors.As(err, &ce) || ce.Code != 50 {
		t.Fatalf("waitForFailPoint 1 before it fired = %v, want MaxTimeMSExpired", err)
	}
	done := make(chan error, 1)
	go func() { done <- wait(2, 30000) }()
	for i := 0; i < 3; i++ {
		_ = coll.FindOne(c, bson.D{}).Err()
	}
	if err := <-done; err != nil {
		t.Fatalf("waitForFailPoint 2 after two failures: %v", err)
	}
	if n := configure(off); n != 2 {
		t.Fatalf("count %d after times:2 fired, want 2", n)
	}
	if n := configure(on); n != 2 {
		t.Fatalf("count %d after a new configuration, want 2 (it counts on)", n)
	}
}
