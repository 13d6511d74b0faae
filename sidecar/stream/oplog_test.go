package stream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/stream"
)

func TestReadWindowIsNewestMinusOldestOplogEntry(t *testing.T) {
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Database("db").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	srv.AdvanceClock(2 * time.Hour)
	if _, err := client.Database("db").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	w, err := stream.ReadWindow(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	if s := w.Seconds(); s < 7200 || s > 7200+60 {
		t.Errorf("window %v s (oldest %v, newest %v), want two hours", s, w.Oldest, w.Newest)
	}

	t.Run("a user who may not read the oplog is told which role to ask for", func(t *testing.T) {
		srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
			{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"find"}}, {Key: "errorCode", Value: 13}}}})
		_, err := stream.ReadWindow(ctx, client)
		if err == nil || !strings.Contains(err.Error(), `the "read" role on the "local" database`) {
			t.Errorf("ReadWindow refused = %v, want it to name the role", err)
		}
	})
}
