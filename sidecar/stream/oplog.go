package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Window is the source's oplog window: the cluster times of the oldest and
// newest entries of local.oplog.rs. A change stream can resume from a
// position only while it is newer than Oldest; Newest is "now" in cluster
// time (an idle replica set writes a no-op every 10 s, so it is never
// further behind).
type Window struct {
	Oldest, Newest time.Time
}

// Seconds is the window's length.
func (w Window) Seconds() float64 { return w.Newest.Sub(w.Oldest).Seconds() }

// OplogPrivilege is what a user needs to read the window: read on the
// local database (MongoDB Atlas, "Oplog Access": "a database user must
// have read access on the local database"). clusterMonitor is not
// documented to grant find on local.oplog.rs, so it is not what to ask for.
const OplogPrivilege = `the "read" role on the "local" database`

// ReadWindow reads the oplog window with two finds on local.oplog.rs in
// natural order, limit 1, projection {ts: 1}: the same reads mongod's own
// tools make, cheap on a capped collection of any size.
func ReadWindow(ctx context.Context, client *mongo.Client) (Window, error) {
	oplog := client.Database("local").Collection("oplog.rs")
	edge := func(dir int) (time.Time, error) {
		var e struct {
			TS bson.Timestamp `bson:"ts"`
		}
		opts := options.FindOne().SetSort(bson.D{{Key: "$natural", Value: dir}}).SetProjection(bson.D{{Key: "ts", Value: 1}})
		err := oplog.FindOne(ctx, bson.D{}, opts).Decode(&e)
		if err != nil {
			return time.Time{}, err
		}
		return time.Unix(int64(e.TS.T), 0).UTC(), nil
	}
	oldest, err := edge(1)
	if err == nil {
		var newest time.Time
		if newest, err = edge(-1); err == nil {
			return Window{Oldest: oldest, Newest: newest}, nil
		}
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) && (ce.Code == 13 || ce.Name == "Unauthorized") {
		return Window{}, fmt.Errorf("read the oplog window from local.oplog.rs: not authorized (give the user %s): %w", OplogPrivilege, err)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return Window{}, fmt.Errorf("read the oplog window: local.oplog.rs is empty or absent (a standalone server has no oplog)")
	}
	return Window{}, fmt.Errorf("read the oplog window from local.oplog.rs: %w", err)
}
