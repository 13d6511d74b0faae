package mongotest_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// oplogEdge reads the oldest (dir 1) or newest (dir -1) oplog entry's ts
// the way a client measures the oplog's window.
func oplogEdge(t *testing.T, client *mongo.Client, dir int) bson.Timestamp {
	t.Helper()
	var e struct {
		TS bson.Timestamp `bson:"ts"`
		Op *string        `bson:"op"`
	}
	opts := options.FindOne().SetSort(bson.D{{Key: "$natural", Value: dir}}).SetProjection(bson.D{{Key: "ts", Value: 1}})
	if err := client.Database("local").Collection("oplog.rs").FindOne(ctx(t), bson.D{}, opts).Decode(&e); err != nil {
		t.Fatalf("find local.oplog.rs sorted by $natural %d: %v", dir, err)
	}
	if e.Op != nil {
		t.Errorf("projection {ts: 1} kept op %q", *e.Op)
	}
	return e.TS
}

func TestOplogReadsGiveTheOldestAndNewestRetainedEntries(t *testing.T) {
	srv, client := start(t)
	coll := client.Database("db").Collection("c")
	if _, err := coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	first := oplogEdge(t, client, 1)
	srv.AdvanceClock(time.Hour)
	if _, err := coll.InsertOne(ctx(t), bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	oldest, newest := oplogEdge(t, client, 1), oplogEdge(t, client, -1)
	if oldest != first {
		t.Errorf("oldest entry moved from %v to %v with nothing trimmed", first, oldest)
	}
	if gap := int64(newest.T) - int64(oldest.T); gap < 3600 {
		t.Errorf("window %d s after the clock moved an hour, want >= 3600 (oldest %v, newest %v)", gap, oldest, newest)
	}

	t.Run("trimming the history moves the oldest entry", func(t *testing.T) {
		srv.SetHistorySize(1)
		o, n := oplogEdge(t, client, 1), oplogEdge(t, client, -1)
		if o != n || n != newest {
			t.Errorf("with one entry kept: oldest %v newest %v, want both %v", o, n, newest)
		}
	})

	t.Run("a filter is refused rather than answered wrongly", func(t *testing.T) {
		err := client.Database("local").Collection("oplog.rs").FindOne(ctx(t), bson.D{{Key: "op", Value: "i"}}).Err()
		if err == nil {
			t.Fatal("a filtered oplog read succeeded")
		}
	})
}
