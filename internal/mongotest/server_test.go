package mongotest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

func TestServerClockAndOperationTime(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	before := srv.Now().Truncate(time.Millisecond) // BSON dates have ms precision
	srv.AdvanceClock(time.Hour)
	if d := srv.Now().Sub(before); d < time.Hour || d > time.Hour+5*time.Second {
		t.Fatalf("advanced by %v", d)
	}
	sess, err := client.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.EndSession(c)
	coll := client.Database("db").Collection("c")
	err = mongo.WithSession(c, sess, func(sc context.Context) error {
		_, err := coll.InsertOne(sc, bson.D{{Key: "at", Value: "x"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	op := sess.OperationTime()
	if op == nil || int64(op.T) < srv.Now().Unix()-5 {
		t.Fatalf("operationTime %v does not follow the server clock %v", op, srv.Now())
	}
	// $currentDate and wallTime follow the server clock too.
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll.UpdateOne(c, bson.D{{Key: "at", Value: "x"}}, bson.D{{Key: "$currentDate", Value: bson.D{{Key: "d", Value: true}}}})
	ev := next(t, cs)
	if ev.WallTime.Before(before.Add(time.Hour)) {
		t.Fatalf("wallTime %v", ev.WallTime)
	}
	d, _ := ev.UpdateDescription.UpdatedFields["d"].(bson.DateTime)
	if d.Time().Before(before.Add(time.Hour)) {
		t.Fatalf("$currentDate %v", d.Time())
	}
}

func TestUnacknowledgedWrites(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	if _, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	// The server sends no reply to moreToCome; a following command on the
	// same client still works and sees the write.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := client.Database("db").Collection("c").CountDocuments(c, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unacknowledged insert never landed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDirectConnectionAndCloseIsIdempotent(t *testing.T) {
	srv, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + srv.Addr() + "/?directConnection=true"))
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	if err := client.Database("db").RunCommand(c, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		t.Fatal(err)
	}
	client.Disconnect(c)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsAreRefusedClearly(t *testing.T) {
	srv, _ := start(t)
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://u:p@" + srv.Addr() + "/?replicaSet=rs0").SetServerSelectionTimeout(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	err = client.Ping(ctx(t), nil)
	if err == nil || !strings.Contains(err.Error(), "mongotest has no users") {
		t.Fatalf("ping with credentials: %v", err)
	}
}

func TestListenAddressIsAdvertised(t *testing.T) {
	for _, addr := range []string{"localhost:0", "0.0.0.0:0"} {
		srv, err := mongotest.Start(mongotest.Options{Addr: addr})
		if err != nil {
			t.Fatal(err)
		}
		client := connect(t, srv)
		if err := client.Ping(ctx(t), nil); err != nil {
			t.Fatalf("%s (URI %s): %v", addr, srv.URI(), err)
		}
		srv.Close()
	}
}
