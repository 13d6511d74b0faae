package jobstate

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
)

// A job with verify: true keeps its background verify in the state
// collection, fenced by the lease epoch like the position:
//
//	{_id: {verify: <job>}, pass: {startedAt, hash, phase, lastId,
//	 checked, missing, stale, extra, errors, skippedChanging, repaired},
//	 last: {startedAt, doneAt, hash, checked, missing, ...},
//	 leaseEpoch, updatedAt}
//
// pass is the pass under way, checkpointed now and then (a holder that
// takes over resumes it); last is the last complete pass, which the
// metrics show and which says when the next one is due.

func verifyKey(job string) bson.D { return bson.D{{Key: "verify", Value: job}} }

// VerifyCounts are what a verify pass counted.
type VerifyCounts struct {
	Checked         int64 `bson:"checked"`
	Missing         int64 `bson:"missing"`
	Stale           int64 `bson:"stale"`
	Extra           int64 `bson:"extra"`
	Errors          int64 `bson:"errors"`
	SkippedChanging int64 `bson:"skippedChanging"`
	Repaired        int64 `bson:"repaired"`
}

// VerifyPass is a background verify pass, under way or done.
type VerifyPass struct {
	StartedAt time.Time `bson:"startedAt"`
	DoneAt    time.Time `bson:"doneAt,omitempty"`
	// Hash is the transform the pass compares with: a pass of another
	// transform is not resumed.
	Hash string `bson:"hash"`
	// Phase is "source" (walking the collection, LastID the last _id
	// compared) or "destination" (walking the destination's ids, from the
	// first again on a resume).
	Phase  string        `bson:"phase,omitempty"`
	LastID bson.RawValue `bson:"lastId,omitempty"`
	Counts VerifyCounts  `bson:"counts"`
}

// VerifyState is a job's background verify: the pass under way and the
// last complete one, either nil.
type VerifyState struct {
	Pass *VerifyPass `bson:"pass,omitempty"`
	Last *VerifyPass `bson:"last,omitempty"`
}

// ReadVerify returns the job's background verify state (empty when none).
func (s *Store) ReadVerify(ctx context.Context, job string) (*VerifyState, error) {
	var v VerifyState
	err := s.state.FindOne(ctx, bson.D{{Key: "_id", Value: verifyKey(job)}}).Decode(&v)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &VerifyState{}, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the background verify's checkpoint")
	}
	return &v, nil
}

// CheckpointVerify records the pass under way.
func (s *Store) CheckpointVerify(ctx context.Context, job string, l Fence, p *VerifyPass) error {
	err := s.fencedSet(ctx, job, l, verifyKey(job), bson.D{{Key: "pass", Value: p}})
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "checkpoint the background verify")
	}
	return err
}

// FinishVerify records p as the last complete pass; none is under way.
func (s *Store) FinishVerify(ctx context.Context, job string, l Fence, p *VerifyPass) error {
	err := s.fencedUpdate(ctx, job, l, verifyKey(job), bson.D{{Key: "last", Value: p}}, []string{"pass"}, nil)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "record the background verify's pass")
	}
	return err
}
