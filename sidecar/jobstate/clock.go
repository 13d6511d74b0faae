package jobstate

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/capability"
)

// readClock returns nil when the source takes update pipelines and $$NOW
// (the records are then written with $$NOW, as on every MongoDB since
// 4.2), else a reading of the server's own clock taken now, before the
// write or read that uses it. A server time computed from it (liveUntil,
// expiresAt) is at most the server's now plus the duration: shorter by a
// round trip, never longer; and a record judged expired by it
// (expiresAt <= reading) is expired by the server's clock when the
// command applies, since that clock only moved on. The lease package doc
// ("Without update pipelines") says the same of the leases.
func readClock(ctx context.Context, state *mongo.Collection, form capability.Form) (*time.Time, error) {
	pipelines, err := form.Pipelines(ctx)
	if err != nil || pipelines {
		return nil, err
	}
	now, err := capability.Now(ctx, state.Database())
	if err != nil {
		return nil, err
	}
	return &now, nil
}

// beforeClock is the filter element comparing field with the server's
// clock by op ("$gt": still live, "$lte": expired): $expr with $$NOW, or
// the field against a reading of the clock (readClock).
func beforeClock(ctx context.Context, state *mongo.Collection, form capability.Form, op, field string) (bson.E, error) {
	now, err := readClock(ctx, state, form)
	if err != nil {
		return bson.E{}, err
	}
	if now != nil {
		return bson.E{Key: field, Value: bson.D{{Key: op, Value: *now}}}, nil
	}
	return bson.E{Key: "$expr", Value: bson.D{{Key: op, Value: bson.A{"$" + field, "$$NOW"}}}}, nil
}

func (s *Store) before(ctx context.Context, op, field string) (bson.E, error) {
	return beforeClock(ctx, s.state, s.form, op, field)
}
