package replicate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/auth"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// secret is what a document holds and no message may show.
const secret = "jane.roe@example.com"

func testSink(t *testing.T) *Sink {
	t.Helper()
	// Never dialled: classify only names the namespace.
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	s, err := New(Options{Job: "people", Source: c.Database("app").Collection("people"), Replica: c.Database("copy").Collection("people")}, sink.Unguarded)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rawDocT(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeErr is a write error as mongod sends it: its errmsg, and for some
// codes extra fields beside it (keyPattern/keyValue) or errInfo.
func writeErr(t *testing.T, code int, msg string, extra bson.D, info bson.D) mongo.WriteError {
	we := mongo.WriteError{Code: code, Message: msg}
	d := append(bson.D{{Key: "index", Value: int32(0)}, {Key: "code", Value: int32(code)}, {Key: "errmsg", Value: msg}}, extra...)
	if info != nil {
		we.Details = rawDocT(t, info)
		d = append(d, bson.E{Key: "errInfo", Value: info})
	}
	we.Raw = rawDocT(t, d)
	return we
}

// The write errors a replica answers for a document, as mongod words them
// (messages from src/mongo: duplicate_key_error_info.cpp, storage_validation
// .cpp, object_replace_executor.cpp, bson/bsonobj.cpp, index/ 2d/2dsphere
// and text key generation, doc_validation_error.cpp), each quoting the
// document's value where mongod does.
func refusals(t *testing.T) []mongo.WriteError {
	return []mongo.WriteError{
		writeErr(t, 11000, `E11000 duplicate key error collection: copy.people index: email_1 dup key: { email: "`+secret+`" }`,
			bson.D{{Key: "keyPattern", Value: bson.D{{Key: "email", Value: 1}}}, {Key: "keyValue", Value: bson.D{{Key: "email", Value: secret}}}}, nil),
		writeErr(t, 121, "Document failed validation", nil, bson.D{
			{Key: "failingDocumentId", Value: secret},
			{Key: "details", Value: bson.D{
				{Key: "operatorName", Value: "$jsonSchema"},
				{Key: "schemaRulesNotSatisfied", Value: bson.A{
					bson.D{{Key: "operatorName", Value: "properties"}, {Key: "propertiesNotSatisfied", Value: bson.A{
						bson.D{{Key: "propertyName", Value: "email"}, {Key: "details", Value: bson.A{
							bson.D{{Key: "operatorName", Value: "pattern"}, {Key: "specifiedAs", Value: bson.D{{Key: "pattern", Value: "^[a-z]+$"}}},
								{Key: "reason", Value: "regular expression did not match"}, {Key: "consideredValue", Value: secret}},
						}}},
					}}},
					bson.D{{Key: "operatorName", Value: "required"}, {Key: "specifiedAs", Value: bson.D{{Key: "required", Value: bson.A{"name"}}}}, {Key: "missingProperties", Value: bson.A{"name"}}},
					// Hostile: a considered value shaped like the error's own keys.
					bson.D{{Key: "operatorName", Value: "$eq"}, {Key: "consideredValue", Value: bson.D{{Key: "reason", Value: secret}}}},
					bson.D{{Key: "operatorName", Value: "$in"}, {Key: "consideredValues", Value: bson.A{secret}}},
				}},
			}},
		}),
		writeErr(t, 10334, "BSONObj size: 16777300 (0x1000054) is invalid. Size must be between 0 and 16793600(16MB) First element: email: "+secret, nil, nil),
		writeErr(t, 17420, "Document to upsert is larger than 16777216", nil, nil),
		writeErr(t, 66, `After applying the update, the '_id' (required and immutable) field was found to have been removed --{ _id: 1, email: "`+secret+`" }`, nil, nil),
		writeErr(t, 66, `After applying the update, the (immutable) field '_id' was found to have been altered to _id: "`+secret+`"`, nil, nil),
		writeErr(t, 16755, `Can't extract geo keys: { _id: 1, email: "`+secret+`", loc: [ 200, 100 ] }  longitude/latitude is out of bounds`, nil, nil),
		writeErr(t, 17262, "language override unsupported: "+secret, nil, nil),
		writeErr(t, 17280, `Btree::insert: key too large to index, failing copy.people.$email_1 1034 { : "`+secret+`" }`, nil, nil),
		writeErr(t, 52, "The dollar ($) prefixed field '$price' in '$price' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.", nil, nil),
		writeErr(t, 15, "Document exceeds maximum nesting depth of 100", nil, nil),
		writeErr(t, 4242, `some future refusal quoting "`+secret+`"`, nil, nil),
		writeErr(t, 4243, "some future refusal: "+secret+` [`+secret+`]`, nil, nil),
	}
}

func TestRefusalsQuoteNoValue(t *testing.T) {
	for _, we := range refusals(t) {
		f := docFailure(3, we)
		t.Logf("%d: %s: %s", we.Code, f.Code, f.Message)
		if strings.Contains(f.Message, "jane.roe") {
			t.Errorf("code %d: the refusal quotes the value: %s", we.Code, f.Message)
		}
		if f.Message == "" || f.Code == "" || fmt.Sprint(f.Writes) != "[3]" {
			t.Errorf("code %d: %+v", we.Code, f)
		}
	}
	// What is kept says what to fix.
	f := docFailure(0, refusals(t)[0])
	if !strings.Contains(f.Message, `{"email":1}`) {
		t.Errorf("the duplicate's refusal names the index's fields: %s", f.Message)
	}
	f = docFailure(0, refusals(t)[1])
	for _, want := range []string{"$jsonSchema", "regular expression did not match", "^[a-z]+$", "missingProperties", `"email"`} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("the validation refusal lost %q: %s", want, f.Message)
		}
	}
	f = docFailure(0, refusals(t)[9])
	if !strings.Contains(f.Message, "'$price'") {
		t.Errorf("the field name of a 52 is kept: %s", f.Message)
	}
}

// Errors the engine retries or that stop the job are shown in /status and
// the log: they too name codes, never values.
func TestDescribeQuotesNoValue(t *testing.T) {
	var bulk []mongo.BulkWriteError
	var wes []mongo.WriteError
	for _, we := range refusals(t) {
		bulk = append(bulk, mongo.BulkWriteError{WriteError: we})
		wes = append(wes, we)
	}
	cases := []error{
		mongo.BulkWriteException{WriteErrors: bulk, WriteConcernError: &mongo.WriteConcernError{Code: 64, Name: "WriteConcernFailed", Message: "waiting for replication timed out"}},
		mongo.WriteException{WriteErrors: wes},
		mongo.CommandError{Code: 13, Name: "Unauthorized", Message: `not authorized on copy to execute command { update: "people", updates: [ { q: { _id: 1 }, u: { email: "` + secret + `" } } ] }`},
		mongo.CommandError{Code: 11000, Name: "DuplicateKey", Message: `E11000 duplicate key error collection: copy.people index: email_1 dup key: { email: "` + secret + `" }`},
	}
	for _, err := range cases {
		got := redacted(err).Error()
		t.Log(got)
		if strings.Contains(got, "jane.roe") {
			t.Errorf("%T quotes the value: %s", err, got)
		}
		if !errors.As(redacted(err), new(mongo.ServerError)) {
			t.Errorf("%T: the driver's error is lost for errors.As", err)
		}
	}
}

// Every code a replica can answer a write with is classified, in each
// place it can come: a statement's write error, a write concern error, the
// whole command's error.
func TestClassification(t *testing.T) {
	s := testSink(t)
	bulkOf := func(code int) error {
		return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: 0, Code: code, Message: "x"}}}}
	}
	wceOf := func(code int) error {
		return mongo.BulkWriteException{WriteConcernError: &mongo.WriteConcernError{Code: code, Message: "x"}}
	}
	cmdOf := func(code int) error { return mongo.CommandError{Code: int32(code), Message: "x"} }

	const (
		doc   = "per document"
		retry = "retried"
		stop  = "job failure"
		bisec = "bisected"
	)
	verdict := func(err error) string {
		out, e := s.classify(err)
		switch {
		case e != nil && errs.CodeOf(e) == errs.ConfigInvalid:
			return stop
		case e != nil && errs.CodeOf(e) == errs.Failed:
			return retry
		case e != nil:
			return "code " + string(errs.CodeOf(e))
		case out.all != nil:
			return bisec
		case len(out.refused) == 1:
			return doc
		}
		return "nothing"
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		// Write errors of one statement.
		{"11000 DuplicateKey", bulkOf(11000), doc},
		{"121 DocumentValidationFailure", bulkOf(121), doc},
		{"10334 BSONObjectTooLarge", bulkOf(10334), doc},
		{"17419 document too large after the update", bulkOf(17419), doc},
		{"17420 document to upsert too large", bulkOf(17420), doc},
		{"2 BadValue", bulkOf(2), doc},
		{"15 Overflow (nesting)", bulkOf(15), doc},
		{"52 DollarPrefixedFieldName", bulkOf(52), doc},
		{"53 InvalidIdField", bulkOf(53), doc},
		{"55 InvalidDBRef", bulkOf(55), doc},
		{"66 ImmutableField", bulkOf(66), doc},
		{"16755 geo keys", bulkOf(16755), doc},
		{"17280 KeyTooLong", bulkOf(17280), doc},
		{"an unknown write error", bulkOf(4242), doc},
		{"13 Unauthorized as a write error", bulkOf(13), stop},
		{"166 CommandNotSupportedOnView as a write error", bulkOf(166), stop},
		{"61 ShardKeyNotFound (sharded on another key)", bulkOf(61), stop},
		{"283 WouldChangeOwningShard", bulkOf(283), stop},
		{"112 WriteConflict", bulkOf(112), retry},
		{"50 MaxTimeMSExpired", bulkOf(50), retry},
		{"64 WriteConcernFailed as a write error", bulkOf(64), retry},
		{"11602 InterruptedDueToReplStateChange", bulkOf(11602), retry},
		{"14031 OutOfDiskSpace", bulkOf(14031), retry},
		// Write concern errors: applied, not known to be durable.
		{"write concern 64 WriteConcernFailed", wceOf(64), retry},
		{"write concern 91 ShutdownInProgress", wceOf(91), retry},
		{"write concern 11602", wceOf(11602), retry},
		{"write concern 100 UnsatisfiableWriteConcern", wceOf(100), stop},
		{"write concern 79 UnknownReplWriteConcern", wceOf(79), stop},
		{"an unknown write concern error", wceOf(4242), retry},
		// The whole command's answer.
		{"13 Unauthorized", cmdOf(13), stop},
		{"18 AuthenticationFailed", cmdOf(18), stop},
		{"166 CommandNotSupportedOnView", cmdOf(166), stop},
		{"73 InvalidNamespace", cmdOf(73), stop},
		{"9 FailedToParse", cmdOf(9), stop},
		{"2 BadValue", cmdOf(2), stop},
		{"72 InvalidOptions", cmdOf(72), stop},
		{"59 CommandNotFound", cmdOf(59), stop},
		{"10334 BSONObjectTooLarge", cmdOf(10334), bisec},
		{"10107 NotWritablePrimary", cmdOf(10107), retry},
		{"91 ShutdownInProgress", cmdOf(91), retry},
		{"189 PrimarySteppedDown", cmdOf(189), retry},
		{"89 NetworkTimeout", cmdOf(89), retry},
		{"50 MaxTimeMSExpired", cmdOf(50), retry},
		{"8000 AtlasError (quota)", cmdOf(8000), retry},
		{"an unknown command error", cmdOf(54321), retry},
		{"any code labelled RetryableWriteError", mongo.CommandError{Code: 9, Labels: []string{"RetryableWriteError"}}, retry},
		{"a network error", errors.New("connection(127.0.0.1:27017[-3]) incomplete read of message header: EOF"), retry},
		{"a timeout", context.DeadlineExceeded, retry},
		// As the driver hands it over: its authentication error inside the
		// connection's handshake error (no server code to read).
		{"a handshake refusing the credentials", fmt.Errorf("connection(127.0.0.1:27017[-3]) failed to handshake: %w", &auth.Error{}), stop},
		// A retryable write error beside a document's refusal: the whole
		// batch again (the refusal is met again then).
		{"a refusal beside a write conflict", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{
			{WriteError: mongo.WriteError{Index: 0, Code: 11000}}, {WriteError: mongo.WriteError{Index: 1, Code: 112}}}}, retry},
	}
	for _, c := range cases {
		if got := verdict(c.err); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
