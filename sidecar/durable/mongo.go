package durable

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// MongoSource is the Source of the jobs whose state and leases are in
// State (the state collection).
type MongoSource struct {
	State *mongo.Collection
	// Leases, when set, judges the leases in the form the source takes
	// (lease.Manager.HeldBy); nil: with $$NOW.
	Leases *lease.Manager
}

var _ Source = MongoSource{}

// Mark writes the job's wait document (jobstate.MarkWait).
func (m MongoSource) Mark(ctx context.Context, job string) (bson.Timestamp, error) {
	return jobstate.MarkWait(ctx, m.State, job)
}

// Recorded reads the job's recorded durable time and whether its lease
// is held.
func (m MongoSource) Recorded(ctx context.Context, job string) (bson.Timestamp, bool, error) {
	d, err := jobstate.ReadDurable(ctx, m.State, job)
	if err != nil {
		return d, false, err
	}
	var h string
	if m.Leases != nil {
		h, err = m.Leases.HeldBy(ctx, job)
	} else {
		h, err = lease.HeldBy(ctx, m.State, job)
	}
	return d, h != "", err
}
