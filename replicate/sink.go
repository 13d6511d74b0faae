// Package replicate is the replica sink of mirror jobs: the job engine
// (sidecar/engine) writes a source collection's documents (after the job's
// optional transform) into a collection of a second MongoDB through it, with
// the same backfill and follow it uses for Meilisearch. What only a mirror
// needs lives here too: the capability check (the source must have change
// streams, the replica must take writes), copying the source's indexes at the
// first backfill, and reporting DDL events that are never applied to the
// replica.
//
// Writes are idempotent: an upsert is replaceOne({_id}, doc, {upsert: true}),
// a delete is deleteOne({_id}), both in unordered bulk writes with majority
// write concern, and the _id keeps its BSON type (the engine passes the source
// _id as a bson.RawValue).
package replicate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/transform"
)

// DefaultWriteTimeout bounds one bulk write (with its majority
// acknowledgement). Driver v2 has no wtimeout; a replica that lost its
// majority would otherwise block a Send forever instead of failing it so the
// engine retries with backoff and reports it. Within it the driver itself
// retries retryable errors (a deadline on the context turns its one retry
// into "until the deadline": x/mongo/driver/operation.go, csot), so a short
// blip (a step-down, dropped connections) never reaches the engine.
const DefaultWriteTimeout = 30 * time.Second

// DefaultKeysPageSize is how many _ids Keys hands to its callback at once.
const DefaultKeysPageSize = 1000

// maxDocumentSize is MongoDB's limit for a stored document
// (maxBsonObjectSize in hello; BSONObjectMaxUserSize in the server). A larger
// document is refused before it is sent: driver v2 only rejects documents
// above maxMessageSizeBytes (48 MB) itself, and then fails the whole batch.
const maxDocumentSize = 16 * 1024 * 1024

// Metrics is what the replica sink counts beyond what the engine does: a
// job's metrics of sidecar/httpapi (Metrics.Job) satisfy it; nil counts
// nothing.
type Metrics interface {
	// DDL counts one drop, rename or dropDatabase seen on the source and not
	// applied to the replica (meilistream_ddl_events_total{job,event}).
	DDL(event string)
}

// Options configures a replica sink.
type Options struct {
	// Job is the job's name, for errors and logs.
	Job string
	// Source is the source collection (its database's client is checked for
	// change streams; its indexes are copied at the first backfill).
	Source *mongo.Collection
	// Replica is the destination collection in the replica MongoDB. The sink
	// writes to it with majority write concern whatever its own options say.
	Replica *mongo.Collection
	// Logger is the job's logger; nil discards.
	Logger hclog.Logger
	// Metrics counts DDL events (the job's metrics); nil counts nothing.
	Metrics Metrics
	// WriteTimeout bounds one bulk write; 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// KeysPageSize is the page size of Keys; 0 means DefaultKeysPageSize.
	KeysPageSize int
}

// Sink writes a mirror job's documents into the replica collection. It
// implements engine.Sink; Stage returns an engine.Staged that writes in
// place (a backfill goes straight into the live replica collection and is
// resumable because every write is an idempotent upsert).
type Sink struct {
	job      string
	source   *mongo.Collection
	replica  *mongo.Collection // with majority write concern
	log      hclog.Logger
	metrics  Metrics
	timeout  time.Duration
	pageSize int
}

var (
	_ engine.Sink        = (*Sink)(nil)
	_ engine.Staged      = (*staged)(nil)
	_ engine.DDLObserver = (*Sink)(nil)
)

// New returns the replica sink of one mirror job. It does not talk to either
// server; Prepare does.
func New(o Options) (*Sink, error) {
	if o.Source == nil || o.Replica == nil {
		return nil, &errs.Error{Code: errs.ConfigInvalid, Job: o.Job, Setting: replicaURI,
			Msg: "a mirror job needs a source and a replica collection (is MEILISTREAM_REPLICA_URI set?)"}
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.KeysPageSize <= 0 {
		o.KeysPageSize = DefaultKeysPageSize
	}
	replica := o.Replica.Database().Collection(o.Replica.Name(),
		options.Collection().SetWriteConcern(writeconcern.Majority()))
	return &Sink{
		job:      o.Job,
		source:   o.Source,
		replica:  replica,
		log:      o.Logger,
		metrics:  o.Metrics,
		timeout:  o.WriteTimeout,
		pageSize: o.KeysPageSize,
	}, nil
}

// ForJob returns the replica sink of a mirror job: its source collection
// (job.Collection) in sourceDB, its destination (job.Mirror) in replicaDB.
// It is what the main package calls when it builds a job's sink; logger and
// metrics (the job's) may be nil.
func ForJob(replicaDB, sourceDB *mongo.Database, job *transform.Job, logger hclog.Logger, metrics Metrics) (*Sink, error) {
	if job == nil || job.Kind != transform.Mirror {
		return nil, errs.New(errs.ConfigInvalid, "", "replicate.ForJob: not a mirror job")
	}
	if replicaDB == nil {
		return nil, &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: replicaURI, Msg: "a mirror job needs MEILISTREAM_REPLICA_URI"}
	}
	if sourceDB == nil || job.Collection == "" || job.Mirror == "" {
		return nil, errs.New(errs.ConfigInvalid, job.Name, "a mirror job needs a source and a destination collection")
	}
	return New(Options{
		Job:     job.Name,
		Source:  sourceDB.Collection(job.Collection),
		Replica: replicaDB.Collection(job.Mirror),
		Logger:  logger,
		Metrics: metrics,
	})
}

// Prepare runs the capability check (Check): the source must be a replica set
// or a sharded cluster and the replica must accept majority writes. Its
// errors are CONFIG_INVALID when only the configuration can fix them, FAILED
// when a server could not be reached (try again later).
func (s *Sink) Prepare(ctx context.Context) error {
	return Check(ctx, s.job, s.source, s.replica)
}

// receipt carries the documents the replica refused: a replica's writes are
// durable (majority-acknowledged) when Send returns, so Wait has nothing left
// to wait for.
type receipt struct {
	failures []engine.DocFailure
}

// Send writes b to the replica in one unordered bulk write and returns once
// the replica acknowledged it with majority write concern.
//
// Documents the replica refuses for a reason of their own (too large,
// document validation, a unique index of the replica) do not fail the batch:
// they come back from Wait as DocFailures. A transient failure (network,
// NotWritablePrimary, a write concern error, a timeout) is returned as a
// plain error so the engine sends the whole batch again: every write is
// idempotent, so writes that did land before the failure are harmless to
// repeat. Unauthorized is CONFIG_INVALID: retrying will not help.
func (s *Sink) Send(ctx context.Context, b engine.Batch) (engine.Receipt, error) {
	rc := &receipt{}
	if len(b.Writes) == 0 {
		return rc, nil
	}
	models := make([]mongo.WriteModel, 0, len(b.Writes))
	pos := make([]int, 0, len(b.Writes)) // position in b.Writes of models[i]
	for i, w := range b.Writes {
		m, fail := s.model(w)
		if fail != nil {
			fail.Writes = []int{i}
			rc.failures = append(rc.failures, *fail)
			continue
		}
		models = append(models, m)
		pos = append(pos, i)
	}
	failed, err := s.bulk(ctx, models)
	if err != nil {
		return nil, err
	}
	// A unique index of the replica (copied from the source) can refuse a
	// write only because the bulk applied it before another write of the
	// same batch that frees the value: unordered bulks run all replaces
	// before all deletes, and the source's order between different _ids is
	// lost when the engine coalesces. More passes over those writes, after
	// the rest of the batch landed, sort that out (a chain of swaps takes one
	// pass per link); what still fails once a pass frees nothing is the
	// document's own conflict.
	for {
		var again []int
		for i, we := range failed {
			if we.Code == codeDuplicateKey {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		slices.Sort(again)
		retry := make([]mongo.WriteModel, len(again))
		for j, i := range again {
			retry[j] = models[i]
		}
		failedAgain, err := s.bulk(ctx, retry)
		if err != nil {
			return nil, err
		}
		for _, i := range again {
			delete(failed, i)
		}
		for j, we := range failedAgain {
			failed[again[j]] = we
		}
		if len(failedAgain) == len(again) {
			break // no progress
		}
	}
	for i, we := range failed {
		rc.failures = append(rc.failures, docFailure(pos[i], we))
	}
	slices.SortFunc(rc.failures, func(a, b engine.DocFailure) int { return a.Writes[0] - b.Writes[0] })
	return rc, nil
}

// Wait returns the documents the replica refused in the Send that made r.
// The writes are already durable.
func (s *Sink) Wait(_ context.Context, r engine.Receipt) ([]engine.DocFailure, error) {
	rc, ok := r.(*receipt)
	if !ok || rc == nil {
		return nil, nil
	}
	return rc.failures, nil
}

// model builds the write model of w, or the reason w cannot be written.
func (s *Sink) model(w engine.Write) (mongo.WriteModel, *engine.DocFailure) {
	key := w.SourceID
	if key.Type == 0 {
		return nil, &engine.DocFailure{Code: "INVALID_KEY", Message: "a replica write needs the source _id"}
	}
	filter := bson.D{{Key: "_id", Value: key}}
	if w.Delete {
		return mongo.NewDeleteOneModel().SetFilter(filter), nil
	}
	doc, err := rawDoc(w.Doc)
	if err != nil {
		return nil, &engine.DocFailure{Code: string(errs.NotADocument),
			Message: err.Error()}
	}
	if len(doc) > maxDocumentSize {
		return nil, &engine.DocFailure{Code: "BSONObjectTooLarge",
			Message: fmt.Sprintf("document is %d bytes, the replica stores at most %d", len(doc), maxDocumentSize)}
	}
	// The transform may drop fields, never change _id: the replica must
	// hold each document under its source _id. A replacement without _id
	// keeps the filter's.
	if id, err := doc.LookupErr("_id"); err == nil && !sameValue(id, key) {
		return nil, &engine.DocFailure{Code: string(errs.IDMismatch),
			Message: fmt.Sprintf("the transform changed _id (a %s where the source has a %s); a mirror keeps the source's _id", id.Type, key.Type)}
	}
	return mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(doc).SetUpsert(true), nil
}

// bulk runs models as one unordered bulk write. It returns the writes the
// replica refused for a reason of their own, by index in models; any other
// failure is the error.
func (s *Sink) bulk(ctx context.Context, models []mongo.WriteModel) (map[int]mongo.WriteError, error) {
	if len(models) == 0 {
		return nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.replica.BulkWrite(wctx, models, options.BulkWrite().SetOrdered(false))
	if err == nil {
		return nil, nil
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return nil, s.writeError(err)
	}
	if bwe.WriteConcernError != nil || hasTransientLabel(bwe.Labels) {
		// Applied but not known to be majority-committed: send again.
		return nil, s.writeError(err)
	}
	failed := make(map[int]mongo.WriteError, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if transientCodes[we.Code] {
			return nil, s.writeError(err)
		}
		failed[we.Index] = we.WriteError
	}
	return failed, nil
}

// writeError wraps a failed bulk write: CONFIG_INVALID when only the
// configuration can fix it, otherwise a plain error the engine retries.
func (s *Sink) writeError(err error) error {
	if isConfigError(err) {
		return &errs.Error{Code: errs.ConfigInvalid, Job: s.job, Err: err, Setting: replicaURI,
			Msg: fmt.Sprintf("the replica refuses writes to %s (check the user's roles in MEILISTREAM_REPLICA_URI)", s.namespace())}
	}
	return fmt.Errorf("write to replica %s: %w", s.namespace(), err)
}

func (s *Sink) namespace() string {
	return s.replica.Database().Name() + "." + s.replica.Name()
}

// Keys calls fn with every _id the replica collection holds (the source's
// _ids, the replica keeps them as they are), in pages of KeysPageSize, for the
// sweep after a backfill (only when the job says sweep: true). fn may keep
// the page.
func (s *Sink) Keys(ctx context.Context, fn func(ids []bson.RawValue) error) error {
	cur, err := s.replica.Find(ctx, bson.D{},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(s.pageSize)))
	if err != nil {
		return fmt.Errorf("list replica ids in %s: %w", s.namespace(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	page := make([]bson.RawValue, 0, s.pageSize)
	for cur.Next(ctx) {
		id, err := cur.Current.LookupErr("_id")
		if err != nil {
			continue
		}
		// The cursor reuses its buffer: keep a copy.
		page = append(page, bson.RawValue{Type: id.Type, Value: append([]byte(nil), id.Value...)})
		if len(page) == s.pageSize {
			if err := fn(page); err != nil {
				return err
			}
			page = make([]bson.RawValue, 0, s.pageSize)
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("list replica ids in %s: %w", s.namespace(), err)
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}

// Stage returns the target of a backfill: the live replica collection itself
// (in place), since a replica cannot swap collections atomically across
// clusters and every write is idempotent. Before the first backfill (the
// replica collection empty) it creates the source's indexes on it; later it
// reports indexes that differ, without changing them (see SyncIndexes).
func (s *Sink) Stage(ctx context.Context, resume bool) (engine.Staged, error) {
	if _, err := SyncIndexes(ctx, s.log, s.source, s.replica); err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, errs.Wrap(errs.Failed, s.job, err, "copy indexes to the replica")
	}
	return &staged{Sink: s}, nil
}

// OnDDL reports a drop, rename or dropDatabase seen on the source: a warn log
// naming the event and a metric. The replica is left as it is, by design (a
// replica that outlives an accidental drop is the point of a mirror); the
// engine then stops the job as invalidated and the restart backfills what the
// source holds.
func (s *Sink) OnDDL(_ context.Context, event string) {
	s.log.Warn("source collection changed by DDL; not applied to the replica, the replica keeps its documents and the job restarts with a backfill",
		"event", event, "source", s.source.Database().Name()+"."+s.source.Name(), "replica", s.namespace())
	if s.metrics != nil {
		s.metrics.DDL(event)
	}
}

// staged is the in-place target of a backfill: the live sink, with nothing
// to commit or discard.
type staged struct {
	*Sink
}

// InPlace is true: a mirror's backfill writes into the live replica
// collection, and the engine sweeps after it only when the job says
// sweep: true.
func (*staged) InPlace() bool { return true }

// Commit does nothing: the backfill wrote in place.
func (*staged) Commit(context.Context) error { return nil }

// Discard does nothing: a mirror never drops what the replica holds.
func (*staged) Discard(context.Context) error { return nil }
