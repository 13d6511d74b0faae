package jobstate

import (
	"context"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
)

// Every process that runs a job, holder or standby, keeps a presence record
// of it in the state collection, beside the job's lease:
//
//	{_id: {presence: <job>, process: <holder id>}, hash: <transform hash>,
//	 waiting: <why it stands by, when it waits for a newer transform>,
//	 at: <server date of the last refresh>, liveUntil: <server date>}
//
// The process refreshes it on the lease's cadence and deletes it when the
// job stops there (shutdown, removed file, a new definition). A record is
// live while liveUntil, set from the server's clock at each refresh, is
// after the server's $$NOW: a process that died without deleting it stops
// counting a few refreshes later. The rollout rule reads them to tell pods
// that disagree on a transform (one waits for the other) from a revert no
// live pod disagrees with (honoured at once). Presence records are not
// fenced: each process writes only its own.

func presenceKey(job, process string) bson.D {
	return bson.D{{Key: "presence", Value: job}, {Key: "process", Value: process}}
}

// Presence is one live presence record.
type Presence struct {
	Job     string
	Process string // the process's lease holder identity, "host:pid:random"
	Hash    string // the transform hash it runs the job with
	// Waiting says why the process stands by for a process with a newer
	// transform ("" when it does not).
	Waiting string
	At      time.Time // server time of its last refresh
}

// MarkPresent writes process's presence record of job: it runs the job
// with hash, waiting for the reason given ("" when it is not), live for
// live from now by the server's clock.
func (s *Store) MarkPresent(ctx context.Context, job, process, hash, waiting string, live time.Duration) error {
	return s.MarkPresentAll(ctx, process, []Mark{{Job: job, Hash: hash, Waiting: waiting}}, live)
}

// Mark is what a presence record says of one job: the hash this process
// runs it with and why it stands by ("" when it does not).
type Mark struct {
	Job, Hash, Waiting string
}

// MarkPresentAll writes process's presence records of every job in marks,
// each as MarkPresent would, in one unordered bulk write: a process
// refreshes all of its records at once. A failure names the job when
// there is one.
func (s *Store) MarkPresentAll(ctx context.Context, process string, marks []Mark, live time.Duration) error {
	if len(marks) == 0 {
		return nil
	}
	job := ""
	if len(marks) == 1 {
		job = marks[0].Job
	}
	now, err := readClock(ctx, s.state, s.form)
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "record that this process runs the job")
	}
	models := make([]mongo.WriteModel, 0, len(marks))
	for _, m := range marks {
		var update any
		if now != nil {
			update = bson.D{
				{Key: "$set", Value: bson.D{{Key: "hash", Value: m.Hash}, {Key: "waiting", Value: m.Waiting}, {Key: "liveUntil", Value: now.Add(live)}}},
				{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}},
			}
		} else {
			update = mongo.Pipeline{{{Key: "$set", Value: bson.D{
				{Key: "hash", Value: bson.D{{Key: "$literal", Value: m.Hash}}},
				{Key: "waiting", Value: bson.D{{Key: "$literal", Value: m.Waiting}}},
				{Key: "at", Value: "$$NOW"},
				{Key: "liveUntil", Value: bson.D{{Key: "$add", Value: bson.A{"$$NOW", live.Milliseconds()}}}},
			}}}}
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: presenceKey(m.Job, process)}}).
			SetUpdate(update).SetUpsert(true))
	}
	if _, err := s.state.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return errs.Wrap(errs.Failed, job, err, "record that this process runs the job")
	}
	return nil
}

// RemovePresence deletes process's presence record of job.
func (s *Store) RemovePresence(ctx context.Context, job, process string) error {
	if _, err := s.state.DeleteOne(ctx, bson.D{{Key: "_id", Value: presenceKey(job, process)}}); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete this process's presence record")
	}
	return nil
}

// LiveWithHash returns the live presence records of job whose transform
// hash is hash, but process's own.
func (s *Store) LiveWithHash(ctx context.Context, job, hash, process string) ([]Presence, error) {
	filter := bson.D{
		{Key: "_id.presence", Value: job},
		{Key: "_id.process", Value: bson.D{{Key: "$ne", Value: process}}},
		{Key: "hash", Value: hash},
	}
	out, err := readPresence(ctx, s.state, filter, s.form)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read which processes run the job")
	}
	return out, nil
}

// ReadPresence returns every live presence record of the state collection,
// sorted by job then process, for `meilistream status`, in the form the
// source takes (form).
func ReadPresence(ctx context.Context, state *mongo.Collection, form capability.Form) ([]Presence, error) {
	out, err := readPresence(ctx, state, bson.D{{Key: "_id.presence", Value: bson.D{{Key: "$exists", Value: true}}}}, form)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "read which processes run the jobs")
	}
	return out, nil
}

// readPresence reads the live records matching filter: liveUntil is
// compared with the server's clock ($$NOW in $expr, MongoDB 4.2+), never
// this process's (without pipelines, a reading of it: see readClock).
func readPresence(ctx context.Context, state *mongo.Collection, filter bson.D, form capability.Form) ([]Presence, error) {
	live, err := beforeClock(ctx, state, form, "$gt", "liveUntil")
	if err != nil {
		return nil, err
	}
	filter = append(filter[:len(filter):len(filter)], live)
	cur, err := state.Find(ctx, filter)
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var out []Presence
	for cur.Next(ctx) {
		var d struct {
			ID struct {
				Job     string `bson:"presence"`
				Process string `bson:"process"`
			} `bson:"_id"`
			Hash    string    `bson:"hash"`
			Waiting string    `bson:"waiting"`
			At      time.Time `bson:"at"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, err
		}
		out = append(out, Presence{Job: d.ID.Job, Process: d.ID.Process, Hash: d.Hash, Waiting: d.Waiting, At: d.At})
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Job != out[b].Job {
			return out[a].Job < out[b].Job
		}
		return out[a].Process < out[b].Process
	})
	return out, nil
}
