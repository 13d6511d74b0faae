// Package capability asks the source MongoDB, once, before the jobs touch
// it, what it can do that meilistream relies on: change streams (a replica
// set or a sharded cluster has them; a standalone mongod answers 40573 and
// FerretDB NotImplemented), update pipelines and $$NOW in expressions
// (MongoDB 4.2 and later; FerretDB 1.24 has neither). The answers decide
// what runs: a job that follows a change stream cannot start on a source
// without one (Source.Check says why, with the server's own answer, and
// what to do), and the leases and the other server-time records of the
// state collection are written without pipelines where the source has none
// (lease package doc, "Without update pipelines").
//
// The probe writes one document of its own to the state collection, once
// for the life of the collection, {_id: {probe: "capabilities"}, at:
// <1970-01-01>}, shared by every process, and modifies nothing after: $expr and update pipelines are only judged by some servers
// when a document matches (FerretDB evaluates $expr per document, so a
// filter that matches nothing says nothing).
package capability

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Source is what the probe learned of the source MongoDB.
type Source struct {
	// SetName is the replica set's name, "" for a standalone server (and
	// for mongos, where Router is true).
	SetName string
	// Router is true when the server is a mongos (hello's msg "isdbgrid").
	Router bool
	// MaxWireVersion is hello's maxWireVersion (17 is MongoDB 6.0, 21 is 7.0).
	MaxWireVersion int32
	// Version is buildInfo's version; FerretDB is FerretDB's own version
	// ("" for MongoDB), from buildInfo's ferretdbVersion.
	Version, FerretDB string

	// ChangeStreams: a change stream opens on the source database (what
	// the engine follows).
	ChangeStreams bool
	// UpdatePipelines: update and findAndModify take an aggregation
	// pipeline that sets a field to $$NOW.
	UpdatePipelines bool
	// ExprNow: $$NOW compares in a query's $expr and in an aggregation's
	// $project (the lease's and the presence records' "still live" test).
	ExprNow bool

	// Refusals holds the server's answer to each capability it lacks, in
	// the order ChangeStreams, UpdatePipelines, ExprNow.
	Refusals []Refusal
	// Unprobed is, when the probe could not write its document (a user
	// without write access), the server's answer to that write; then
	// UpdatePipelines and ExprNow are assumed, not probed.
	Unprobed string
}

// Refusal is a server's answer to a capability it lacks.
type Refusal struct {
	Capability string // "change streams", "update pipelines", "$$NOW in $expr"
	Code       int32
	Name       string // the code's name, e.g. "NotImplemented"
	Message    string
}

func (r Refusal) String() string {
	name := r.Name
	if name == "" {
		name = "no code name"
	}
	return fmt.Sprintf("(%s, code %d) %q", name, r.Code, r.Message)
}

// Pipelines reports whether the server-time records can be written as
// today, with update pipelines and $$NOW: both must work.
func (s Source) Pipelines() bool { return s.UpdatePipelines && s.ExprNow }

// Describe is a short description of the server for messages: its
// product and version, and whether it is a replica set.
func (s Source) Describe() string {
	var b strings.Builder
	if s.FerretDB != "" {
		fmt.Fprintf(&b, "FerretDB %s", s.FerretDB)
	} else {
		fmt.Fprintf(&b, "MongoDB %s", s.Version)
	}
	fmt.Fprintf(&b, ", maxWireVersion %d, ", s.MaxWireVersion)
	switch {
	case s.Router:
		b.WriteString("a mongos")
	case s.SetName != "":
		fmt.Fprintf(&b, "replica set %q", s.SetName)
	default:
		b.WriteString("no replica set (hello has no setName)")
	}
	return b.String()
}

func (s Source) refusal(capability string) (Refusal, bool) {
	for _, r := range s.Refusals {
		if r.Capability == capability {
			return r, true
		}
	}
	return Refusal{}, false
}

// Check says what streamJobs, the jobs that follow a change stream, lack
// on this source: nil when it has change streams (or there are no such
// jobs), else one error naming the jobs, the server's answer and what to
// do. The uri variable is named in the message (MEILISTREAM_MONGODB_URI).
// Update pipelines are never required: the leases do without them.
func (s Source) Check(streamJobs []string, uriVar string) error {
	if s.ChangeStreams || len(streamJobs) == 0 {
		return nil
	}
	r, _ := s.refusal(ChangeStreamsCap)
	return fmt.Errorf("the source MongoDB (%s: %s) has no change streams, which jobs %s follow: it answered $changeStream with %s; "+
		"give these jobs mode: \"scan\" (or set MEILISTREAM_MODE=scan), or run MongoDB as a replica set (mongod --replSet NAME, then rs.initiate(); a single member is enough)",
		uriVar, s.Describe(), strings.Join(streamJobs, ", "), r)
}

// The names of the capabilities in a Refusal.
const (
	ChangeStreamsCap   = "change streams"
	UpdatePipelinesCap = "update pipelines"
	ExprNowCap         = "$$NOW in $expr"
)

// probeKey is the _id of the probe's own document in the state collection.
var probeKey = bson.D{{Key: "probe", Value: "capabilities"}}

// probeDate is the probe document's date: any date before the server's
// clock does.
var probeDate = time.Unix(0, 0).UTC()

// Probe asks the server behind state (the state collection, in the source
// database) what it can do. A capability the server refuses is recorded
// in the Source with its answer; an error means the server could not be
// asked (unreachable, credentials refused, a timeout), and says so.
func Probe(ctx context.Context, state *mongo.Collection) (Source, error) {
	var s Source
	db := state.Database()
	var hello struct {
		SetName        string `bson:"setName"`
		Msg            string `bson:"msg"`
		MaxWireVersion int32  `bson:"maxWireVersion"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return s, fmt.Errorf("ask the source MongoDB what it is (hello): %w", err)
	}
	s.SetName, s.Router, s.MaxWireVersion = hello.SetName, hello.Msg == "isdbgrid", hello.MaxWireVersion
	var build struct {
		Version  string `bson:"version"`
		FerretDB string `bson:"ferretdbVersion"`
	}
	// buildInfo only describes the server in messages: a refusal of it
	// changes nothing.
	if err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&build); err == nil {
		s.Version, s.FerretDB = build.Version, build.FerretDB
	} else if !refused(err) {
		return s, fmt.Errorf("ask the source MongoDB its version (buildInfo): %w", err)
	}
	steps := []struct {
		capability string
		ok         *bool
		try        func(context.Context, *mongo.Collection) error
	}{
		{ChangeStreamsCap, &s.ChangeStreams, tryChangeStream},
		{UpdatePipelinesCap, &s.UpdatePipelines, tryUpdatePipeline},
		{ExprNowCap, &s.ExprNow, tryExprNow},
	}
	// Written once for the life of the state collection: $setOnInsert
	// leaves an existing document as it is, so a start adds nothing to the
	// oplog (whose window the jobs' positions need).
	if _, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: probeKey}},
		bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "at", Value: probeDate}}}}, options.UpdateOne().SetUpsert(true)); err != nil {
		if !refused(err) {
			return s, fmt.Errorf("write the capability probe's document in %s: %w", state.Name(), err)
		}
		// A user that may not write (meilistream status with a read-only
		// user) writes no server-time record either: the probe of
		// pipelines is moot, and its reads keep the form of every MongoDB
		// since 4.2, as before the probe existed.
		s.UpdatePipelines, s.ExprNow, s.Unprobed = true, true, asRefusal(err).String()
		if err := tryChangeStream(ctx, state); err == nil {
			s.ChangeStreams = true
		} else if refused(err) {
			r := asRefusal(err)
			r.Capability = ChangeStreamsCap
			s.Refusals = append(s.Refusals, *r)
		} else {
			return s, fmt.Errorf("probe the source MongoDB for %s: %w", ChangeStreamsCap, err)
		}
		return s, nil
	}
	for _, st := range steps {
		err := st.try(ctx, state)
		var r *Refusal
		switch {
		case err == nil:
			*st.ok = true
			continue
		case errors.As(err, &r):
		case refused(err):
			r = asRefusal(err)
		default:
			return s, fmt.Errorf("probe the source MongoDB for %s: %w", st.capability, err)
		}
		r.Capability = st.capability
		s.Refusals = append(s.Refusals, *r)
	}
	return s, nil
}

// tryChangeStream opens a change stream on the database, as the engine
// does, and closes it. When the database's is refused, a collection's is
// tried for the record: FerretDB answers the database form with a parse
// error (9) and the collection form with what it means (NotImplemented).
func tryChangeStream(ctx context.Context, state *mongo.Collection) error {
	cs, err := state.Database().Watch(ctx, mongo.Pipeline{})
	if err == nil {
		return cs.Close(ctx)
	}
	if !refused(err) {
		return err
	}
	if ccs, cerr := state.Watch(ctx, mongo.Pipeline{}); cerr == nil {
		_ = ccs.Close(ctx)
	} else if refused(cerr) {
		return cerr
	}
	return err
}

// tryUpdatePipeline runs an update pipeline with $$NOW on the probe
// document through both commands the state records use: findAndModify
// (leases) and update (presence, requests); FerretDB refuses them with
// different answers. The pipeline keeps the date it finds ($$NOW is later
// than probeDate), so the server modifies nothing and logs nothing.
func tryUpdatePipeline(ctx context.Context, state *mongo.Collection) error {
	keep := bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$lte", Value: bson.A{"$at", "$$NOW"}}}, "$at", "$$NOW"}}}
	set := mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "at", Value: keep}}}}}
	if err := state.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: probeKey}}, set).Err(); err != nil {
		return err
	}
	res, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: probeKey}}, set)
	if err != nil {
		return err
	}
	if res.MatchedCount != 1 {
		return &Refusal{Message: "an update pipeline matched nothing"}
	}
	return nil
}

// tryExprNow compares the probe document's date with $$NOW in a find's
// $expr and in an aggregation's $project; the date is long past, so a
// server that judges it must find it due.
func tryExprNow(ctx context.Context, state *mongo.Collection) error {
	filter := bson.D{{Key: "_id", Value: probeKey}, {Key: "$expr", Value: bson.D{{Key: "$lte", Value: bson.A{"$at", "$$NOW"}}}}}
	err := state.FindOne(ctx, filter).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &Refusal{Message: "a find with $expr {$lte: [\"$at\", \"$$NOW\"]} did not match a date long past"}
	}
	if err != nil {
		return err
	}
	cur, err := state.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id", Value: probeKey}}}},
		{{Key: "$project", Value: bson.D{{Key: "due", Value: bson.D{{Key: "$lte", Value: bson.A{"$at", "$$NOW"}}}}}}},
	})
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	var rows []struct {
		Due bool `bson:"due"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return err
	}
	if len(rows) != 1 || !rows[0].Due {
		return &Refusal{Message: "an aggregation's $project {$lte: [\"$at\", \"$$NOW\"]} did not find a date long past due"}
	}
	return nil
}

func (r *Refusal) Error() string { return r.Message }

// refused reports whether err is the server's answer to the command (a
// command or write error with a code), rather than a failure to ask it.
func refused(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		// Refused credentials are no capability of the server.
		return ce.Code != 0 && ce.Code != 18
	}
	var we mongo.WriteException
	return errors.As(err, &we) && len(we.WriteErrors) > 0
}

func asRefusal(err error) *Refusal {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return &Refusal{Code: ce.Code, Name: ce.Name, Message: ce.Message}
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return &Refusal{Code: int32(we.WriteErrors[0].Code), Message: we.WriteErrors[0].Message}
	}
	return &Refusal{Message: err.Error()}
}

// Prober runs Probe once it answers and keeps that answer: the source's
// capabilities do not change while the process runs (a server replaced by
// another is a new deployment). Until it answers, every caller asks again.
type Prober struct {
	state *mongo.Collection
	mu    sync.Mutex
	done  bool
	src   Source
}

// NewProber returns a Prober of the source behind state.
func NewProber(state *mongo.Collection) *Prober { return &Prober{state: state} }

// Source returns the probe's answer, probing first if no probe answered
// yet. Calls are serialised, so one probe runs at a time.
func (p *Prober) Source(ctx context.Context) (Source, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return p.src, nil
	}
	s, err := Probe(ctx, p.state)
	if err != nil {
		return s, err
	}
	p.src, p.done = s, true
	return s, nil
}

// Known returns the probe's answer if one answered already, without
// asking the server.
func (p *Prober) Known() (Source, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.src, p.done
}

// Pipelines is a Form: whether the source takes update pipelines and
// $$NOW expressions, probing first if needed.
func (p *Prober) Pipelines(ctx context.Context) (bool, error) {
	s, err := p.Source(ctx)
	if err != nil {
		return false, err
	}
	return s.Pipelines(), nil
}

// Form tells a writer of server times (the leases, presence records,
// requests) which form the source takes: true for update pipelines with
// $$NOW, false for the form without them (a clock read, then plain
// operators). A nil Form means pipelines, as on every MongoDB since 4.2.
type Form func(ctx context.Context) (pipelines bool, err error)

// Pipelines calls f, or says true for a nil Form.
func (f Form) Pipelines(ctx context.Context) (bool, error) {
	if f == nil {
		return true, nil
	}
	return f(ctx)
}

// Now reads the server's own clock: hello's localTime, the same wall clock
// mongod reads for $$NOW and $currentDate (FerretDB's too). It is the
// clock read of the form without pipelines: a time read before a write is
// never later than the server's clock when the write applies.
func Now(ctx context.Context, db *mongo.Database) (time.Time, error) {
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return time.Time{}, fmt.Errorf("read the server's clock (hello): %w", err)
	}
	if hello.LocalTime.IsZero() {
		return time.Time{}, errors.New("read the server's clock: hello has no localTime")
	}
	return hello.LocalTime, nil
}
