package mongotest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/meilistream/meilistream/internal/mongotest"
)

// Options.Standalone answers as a standalone mongod does, each answer
// checked against mongod's: hello without a replica set; $changeStream
// refused with 40573 (document_source_change_stream.cpp); transactions
// refused with 20 IllegalOperation "Transaction numbers are only allowed on
// a replica set member or mongos"; w "majority" accepted and w above 1
// refused with 2 BadValue before the write (write_concern.cpp
// validateWriteConcern; jstests/core/write_concern.js on a standalone);
// read concern majority served, linearizable 123 NotAReplicaSet;
// replSetGetStatus 76 "not running with --replSet"; no cluster time.
func TestStandaloneAnswersAsAStandaloneMongod(t *testing.T) {
	srv, client := start(t, mongotest.Options{Standalone: true})
	c := ctx(t)
	if strings.Contains(srv.URI(), "replicaSet") {
		t.Errorf("a standalone's URI names a replica set: %s", srv.URI())
	}
	admin := client.Database("admin")

	hello, err := admin.RunCommand(c, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"setName", "hosts", "primary", "me", "setVersion", "electionId", "secondary", "$clusterTime", "operationTime"} {
		if _, err := hello.LookupErr(absent); err == nil {
			t.Errorf("hello has %s: %s", absent, hello)
		}
	}
	if w, ok := hello.Lookup("isWritablePrimary").BooleanOK(); !ok || !w {
		t.Errorf("hello is not a writable primary: %s", hello)
	}
	if _, ok := hello.Lookup("logicalSessionTimeoutMinutes").Int32OK(); !ok {
		t.Errorf("hello has no logicalSessionTimeoutMinutes (a standalone has sessions): %s", hello)
	}

	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("insert on a standalone: %v", err)
	}
	majority := client.Database("db").Collection("c", options.Collection().SetWriteConcern(writeconcern.Majority()))
	if _, err := majority.InsertOne(c, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatalf("w majority on a standalone: %v", err)
	}
	w2 := client.Database("db").Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: 2}))
	_, err = w2.InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	if !hasCode(err, 2, "BadValue", "cannot use 'w' > 1 when a host is not replicated") {
		t.Errorf("w 2: want 2 BadValue, got %v", err)
	}
	tagged := client.Database("db").Collection("c", options.Collection().SetWriteConcern(&writeconcern.WriteConcern{W: "dc"}))
	_, err = tagged.InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	if !hasCode(err, 2, "BadValue", `cannot use non-majority 'w' mode "dc" when a host is not a member of a replica set`) {
		t.Errorf("w tag: want 2 BadValue, got %v", err)
	}
	if n, _ := coll.CountDocuments(c, bson.D{}); n != 2 {
		t.Errorf("%d documents, want 2: a refused write concern applied the write", n)
	}

	for name, watch := range map[string]func() error{
		"collection": func() error { _, err := coll.Watch(c, mongo.Pipeline{}); return err },
		"database":   func() error { _, err := client.Database("db").Watch(c, mongo.Pipeline{}); return err },
		"cluster":    func() error { _, err := client.Watch(c, mongo.Pipeline{}); return err },
	} {
		if err := watch(); !hasCode(err, 40573, "Location40573", "The $changeStream stage is only supported on replica sets") {
			t.Errorf("watch a %s: want 40573, got %v", name, err)
		}
	}

	sess, err := client.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.EndSession(c)
	_, err = sess.WithTransaction(c, func(sc context.Context) (any, error) {
		return coll.InsertOne(sc, bson.D{{Key: "_id", Value: 9}})
	})
	if !hasCode(err, 20, "IllegalOperation", "Transaction numbers are only allowed on a replica set member or mongos") {
		t.Errorf("a transaction: want 20 IllegalOperation, got %v", err)
	}

	majorityRead := client.Database("db").Collection("c", options.Collection().SetReadConcern(readconcern.Majority()))
	if n, err := majorityRead.CountDocuments(c, bson.D{}); err != nil || n != 2 {
		t.Errorf("a majority read on a standalone: %d, %v", n, err)
	}
	linearizable := client.Database("db").Collection("c", options.Collection().SetReadConcern(readconcern.Linearizable()))
	err = linearizable.FindOne(c, bson.D{}).Err()
	if !hasCode(err, 123, "NotAReplicaSet", "node needs to be a replica set member to use read concern") {
		t.Errorf("a linearizable read on a standalone: want 123, got %v", err)
	}

	err = admin.RunCommand(c, bson.D{{Key: "replSetGetStatus", Value: 1}}).Err()
	if !hasCode(err, 76, "NoReplicationEnabled", "not running with --replSet") {
		t.Errorf("replSetGetStatus: want 76, got %v", err)
	}
	status, err := admin.RunCommand(c, bson.D{{Key: "serverStatus", Value: 1}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := status.LookupErr("repl"); err == nil {
		t.Errorf("a standalone's serverStatus has a repl section: %s", status)
	}

	// The default server is still the replica set primary.
	rs, rsClient := another(t)
	if !strings.Contains(rs.URI(), "replicaSet=") {
		t.Errorf("replica set URI: %s", rs.URI())
	}
	var h struct {
		SetName string `bson:"setName"`
	}
	if err := rsClient.Database("admin").RunCommand(c, bson.D{{Key: "hello", Value: 1}}).Decode(&h); err != nil || h.SetName != mongotest.ReplicaSetName {
		t.Errorf("replica set hello: %+v %v", h, err)
	}
}

func hasCode(err error, code int32, name, msg string) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Code == code && ce.Name == name && ce.Message == msg
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) == 1 {
		return we.WriteErrors[0].Code == int(code) && we.WriteErrors[0].Message == msg
	}
	return false
}

// serverStatus reports open cursors as mongod does (metrics.cursor.open
// total/noTimeout/pinned, totalOpened, timedOut) and the change-stream
// cursors alone under metrics.changeStreams.cursor, the names newer mongod
// versions use (SERVER-123062): what a bench reads to count the change
// streams a process holds open.
func TestServerStatusCountsOpenChangeStreamCursors(t *testing.T) {
	srv, client := start(t, mongotest.Options{CursorTimeout: time.Minute})
	c := ctx(t)
	admin := client.Database("admin")
	type counts struct {
		Metrics struct {
			Cursor struct {
				TimedOut    int64 `bson:"timedOut"`
				TotalOpened int64 `bson:"totalOpened"`
				Open        struct {
					Total, Pinned, NoTimeout int64
				} `bson:"open"`
			} `bson:"cursor"`
			ChangeStreams struct {
				Cursor struct {
					TotalOpened int64 `bson:"totalOpened"`
					Open        struct {
						Total, Pinned int64
					} `bson:"open"`
				} `bson:"cursor"`
			} `bson:"changeStreams"`
		} `bson:"metrics"`
	}
	status := func() counts {
		t.Helper()
		var s counts
		if err := admin.RunCommand(c, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	coll := client.Database("db").Collection("c")
	for i := 0; i < 3; i++ {
		if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	cs1, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	cs2, err := client.Database("db").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	find, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	s := status()
	if s.Metrics.ChangeStreams.Cursor.Open.Total != 2 || s.Metrics.Cursor.Open.Total != 3 ||
		s.Metrics.ChangeStreams.Cursor.TotalOpened != 2 || s.Metrics.Cursor.TotalOpened != 3 {
		t.Fatalf("two streams and a find open: %+v", s.Metrics)
	}

	// A stream waiting in its getMore is pinned.
	wctx, cancel := context.WithCancel(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for cs1.Next(wctx) {
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s = status(); s.Metrics.ChangeStreams.Cursor.Open.Pinned != 1; s = status() {
		if time.Now().After(deadline) {
			t.Fatalf("a stream in its getMore is never pinned: %+v", s.Metrics)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Metrics.Cursor.Open.Pinned < 1 {
		t.Errorf("metrics.cursor.open.pinned leaves out the pinned stream: %+v", s.Metrics)
	}
	cancel()
	<-done
	// Closing a stream kills its cursor. (The driver leaves the cursor of
	// a stream whose Next was cancelled to the server's timeout.)
	if err := cs2.Close(c); err != nil {
		t.Fatal(err)
	}
	if s = status(); s.Metrics.ChangeStreams.Cursor.Open.Total != 1 || s.Metrics.Cursor.Open.Total != 2 {
		t.Fatalf("one stream closed: %+v", s.Metrics)
	}

	// Idle cursors past the timeout are reaped and counted as timed out,
	// once the cancelled stream's getMore has ended on the server.
	deadline = time.Now().Add(10 * time.Second)
	for s = status(); s.Metrics.Cursor.Open.Pinned != 0; s = status() {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled getMore never ends: %+v", s.Metrics)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.AdvanceClock(2 * time.Minute)
	if s = status(); s.Metrics.Cursor.Open.Total != 0 || s.Metrics.ChangeStreams.Cursor.Open.Total != 0 || s.Metrics.Cursor.TimedOut != 2 {
		t.Fatalf("after the cursor timeout: %+v", s.Metrics)
	}
	_ = cs1.Close(c)
	_ = find.Close(c)
}

// $currentOp on admin lists the cursors as mongod's does: with idleCursors
// an idle change stream is an "idleCursor" whose originatingCommand's
// pipeline starts with $changeStream, one waiting in its getMore an active
// "getmore" op with the same cursor; without idleCursors the idle ones are
// left out (document_source_current_op.cpp). Off admin it is 73.
func TestCurrentOpListsChangeStreamCursors(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertMany(c, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	idle, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close(c)
	waiting, err := client.Database("db").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	find, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer find.Close(c)
	streams := func(idleCursors bool) (idleN, activeN int) {
		t.Helper()
		cur, err := client.Database("admin").Aggregate(c, mongo.Pipeline{
			{{Key: "$currentOp", Value: bson.D{{Key: "idleCursors", Value: idleCursors}}}},
			{{Key: "$match", Value: bson.D{{Key: "cursor.originatingCommand.pipeline.0.$changeStream", Value: bson.D{{Key: "$exists", Value: true}}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var ops []struct {
			Type   string `bson:"type"`
			Op     string `bson:"op"`
			Cursor struct {
				CursorID  int64 `bson:"cursorId"`
				Tailable  bool  `bson:"tailable"`
				AwaitData bool  `bson:"awaitData"`
			} `bson:"cursor"`
		}
		if err := cur.All(c, &ops); err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if !op.Cursor.Tailable || !op.Cursor.AwaitData || op.Cursor.CursorID == 0 {
				t.Errorf("a change stream's cursor: %+v", op)
			}
			switch {
			case op.Type == "idleCursor":
				idleN++
			case op.Type == "op" && op.Op == "getmore":
				activeN++
			default:
				t.Errorf("unexpected entry %+v", op)
			}
		}
		return idleN, activeN
	}
	if i, a := streams(true); i != 2 || a != 0 {
		t.Fatalf("two idle streams: %d idle, %d active", i, a)
	}
	if i, a := streams(false); i != 0 || a != 0 {
		t.Fatalf("without idleCursors: %d idle, %d active", i, a)
	}

	wctx, cancel := context.WithCancel(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for waiting.Next(wctx) {
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		i, a := streams(true)
		if i == 1 && a == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a stream in its getMore: %d idle, %d active", i, a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done

	err = client.Database("db").RunCommand(c, bson.D{{Key: "aggregate", Value: 1}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$currentOp", Value: bson.D{}}}}}, {Key: "cursor", Value: bson.D{}}}).Err()
	if !hasCode(err, 73, "InvalidNamespace", "$currentOp must be run against the 'admin' database with {aggregate: 1}") {
		t.Errorf("$currentOp off admin: %v", err)
	}
}

func TestServerStatusCountsWhatEachNamespaceWrote(t *testing.T) {
	_, client := start(t, mongotest.Options{})
	c := ctx(t)
	coll := client.Database("db").Collection("things")
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "b"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	var s struct {
		Mongotest struct {
			Oplog map[string]struct{ Ops, Bytes int64 } `bson:"oplog"`
		} `bson:"mongotest"`
	}
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&s); err != nil {
		t.Fatal(err)
	}
	w := s.Mongotest.Oplog["db.things"]
	// The document (29 bytes), the update's description, the _id (14).
	if w.Ops != 3 || w.Bytes <= 29+14 {
		t.Fatalf("db.things wrote %+v, want 3 ops of more than 43 bytes (all: %+v)", w, s.Mongotest.Oplog)
	}
}
