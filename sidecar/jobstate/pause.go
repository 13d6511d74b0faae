package jobstate

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
)

// A paused job has a pause document in the state collection:
//
//	{_id: {pause: <job>}, paused: true, pausedAt: <server date>,
//	 pausedBy: <process>, leaseEpoch, updatedAt}
//
// Written (and cleared, by resume) under the job's lease, fenced by its
// epoch like the position: whoever holds the job next reads it before it
// follows, so a pause outlives restarts and takeovers until `meilistream
// resume`. Clearing unsets the payload and keeps the stamp (the fencing
// rule of the state documents).

func pauseKey(job string) bson.D { return bson.D{{Key: "pause", Value: job}} }

// Pause is a job's recorded pause.
type Pause struct {
	Paused   bool      `bson:"paused"`
	PausedAt time.Time `bson:"pausedAt"`
	PausedBy string    `bson:"pausedBy"`
}

// RecordPause records that job is paused, by process, fenced by l.
func (s *Store) RecordPause(ctx context.Context, job string, l Fence, process string) error {
	err := s.fencedUpdate(ctx, job, l, pauseKey(job),
		bson.D{{Key: "paused", Value: true}, {Key: "pausedBy", Value: process}}, nil, []string{"pausedAt"})
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "record the pause")
	}
	return err
}

// ClearPause records that job is no longer paused, fenced by l.
func (s *Store) ClearPause(ctx context.Context, job string, l Fence) error {
	err := s.fencedUpdate(ctx, job, l, pauseKey(job), nil, []string{"paused", "pausedAt", "pausedBy"}, nil)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "clear the pause")
	}
	return err
}

// ReadPause returns job's pause; nil when it is not paused.
func (s *Store) ReadPause(ctx context.Context, job string) (*Pause, error) {
	return ReadPause(ctx, s.state, job)
}

// ReadPause returns job's pause from the state collection; nil when it is
// not paused (for `meilistream status`, which has no Store).
func ReadPause(ctx context.Context, state *mongo.Collection, job string) (*Pause, error) {
	var p Pause
	err := state.FindOne(ctx, bson.D{{Key: "_id", Value: pauseKey(job)}}).Decode(&p)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the pause")
	}
	if !p.Paused {
		return nil, nil
	}
	return &p, nil
}
