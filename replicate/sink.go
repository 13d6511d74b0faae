// Package replicate is the replica sink of mirror jobs: the job engine of
// package sidecar writes a source collection's documents (after the job's
// optional transform) into a collection of a second MongoDB through it, with
// the same backfill and follow it uses for Meilisearch. What only a mirror
// needs lives here too: the capability check (the source must have change
// streams, the replica must take writes), copying the source's indexes at the
// first backfill, and reporting DDL events that are never applied to the
// replica.
//
// Writes are idempotent: an upsert is replaceOne({_id}, doc, {upsert: true})
// (an update pipeline replacing the document by itself, {$replaceWith:
// {$literal: doc}}, when it has a top-level $-prefixed field, which a
// replacement may not hold), a delete is deleteOne({_id}); a batch's deletes
// and then its upserts go in unordered bulk writes with majority write
// concern, and the _id keeps its BSON type (the engine passes the source _id
// as a bson.RawValue).
//
// Every answer of the replica is classified (errors.go): sent again with
// backoff, refused per document, or a job failure with CONFIG_INVALID; and
// no text of the replica's leaves the package with a value of a document in
// it (redact.go).
package replicate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
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
// (maxBsonObjectSize in hello; BSONObjMaxUserSize in the server, 16 MiB on
// every version), the limit of a mirror's documents. A larger document is
// refused before it is sent: driver v2 only rejects statements above
// maxMessageSizeBytes (48 MB) itself, and then fails the whole batch.
const maxDocumentSize = jobdef.DefaultMaxMirrorBytes

// Metrics is what the replica sink counts beyond what the engine does: a
// job's metrics of sidecar/httpapi (Metrics.Job) satisfy it; nil counts
// nothing.
type Metrics interface {
	// DDL counts one drop, rename or dropDatabase seen on the source and not
	// applied to the replica (meilistream_ddl_events_total{pipeline,event}).
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
	// Scans says the job may read its source without a change stream
	// (mode scan or auto): a standalone source is then no reason to refuse.
	Scans bool
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
// implements sink.Sink; Stage returns an sink.Staged that writes in
// place (a backfill goes straight into the live replica collection and is
// resumable because every write is an idempotent upsert).
type Sink struct {
	job      string
	scans    bool // Options.Scans
	source   *mongo.Collection
	replica  *mongo.Collection // with majority write concern
	log      hclog.Logger
	metrics  Metrics
	timeout  time.Duration
	pageSize int
	guard    sink.Guard // checked right before each write to the replica
}

var (
	_ sink.Sink   = (*Sink)(nil)
	_ sink.Staged = (*staged)(nil)
)

// New returns the replica sink of one mirror job, which checks guard (the
// job's lease) right before each write to the replica. It does not talk to
// either server; Prepare does.
func New(o Options, guard sink.Guard) (*Sink, error) {
	if o.Source == nil || o.Replica == nil {
		return nil, errs.New(errs.ConfigInvalid, o.Job, "a mirror job needs a source and a replica collection (is MEILISTREAM_REPLICA_URI set?)")
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
		scans:    o.Scans,
		source:   o.Source,
		replica:  replica,
		log:      o.Logger,
		metrics:  o.Metrics,
		timeout:  o.WriteTimeout,
		pageSize: o.KeysPageSize,
		guard:    guard,
	}, nil
}

// ForJob returns the replica sink of a mirror job: its source collection
// (job.Collection) in its database (job.Database, else sourceDB), its
// destination (job.Mirror) in replicaDB.
// It is what the main package calls when it builds a job's sink; logger and
// metrics (the job's) may be nil.
func ForJob(replicaDB, sourceDB *mongo.Database, job *jobdef.Job, guard sink.Guard, logger hclog.Logger, metrics Metrics) (*Sink, error) {
	if job == nil || job.Kind != jobdef.Mirror {
		return nil, errs.New(errs.ConfigInvalid, "", "replicate.ForJob: not a mirror job")
	}
	if replicaDB == nil {
		return nil, &errs.Error{Code: errs.ConfigInvalid, Job: job.Name, Setting: replicaURI, Msg: "a mirror job needs MEILISTREAM_REPLICA_URI"}
	}
	if sourceDB == nil || job.Collection == "" || job.Mirror == "" {
		return nil, errs.New(errs.ConfigInvalid, job.Name, "a mirror job needs a source and a destination collection")
	}
	if job.Database != "" && job.Database != sourceDB.Name() {
		// The job's own source database; the replica's stays one.
		sourceDB = sourceDB.Client().Database(job.Database)
	}
	return New(Options{
		Job:     job.Name,
		Source:  sourceDB.Collection(job.Collection),
		Replica: replicaDB.Collection(job.Mirror),
		Scans:   job.Mode == jobdef.ModeScan || job.Mode == jobdef.ModeAuto,
		Logger:  logger,
		Metrics: metrics,
	}, guard)
}

// Prepare runs the capability check (Check): the source must be a replica set
// or a sharded cluster and the replica must accept majority writes. Its
// errors are CONFIG_INVALID when only the configuration can fix them, FAILED
// when a server could not be reached (try again later).
func (s *Sink) Prepare(ctx context.Context) error {
	return check(ctx, s.job, s.source, s.replica, s.scans)
}

// receipt carries the documents the replica refused: a replica's writes are
// durable (majority-acknowledged) when Send returns, so Wait has nothing left
// to wait for.
type receipt struct {
	failures []sink.DocFailure
}

// Send writes b to the replica and returns once the replica acknowledged it
// with majority write concern.
//
// The deletes go first, then the upserts, each kind in one unordered bulk
// write: a delete only frees what an upsert of the same batch may take (a
// unique value, or the _id itself when the source replaced a document by
// one whose _id is equal in value but of another type: int32 1, int64 1 and
// 1.0 are one _id to MongoDB, and the batch holds the delete of one and the
// upsert of the other). Unique-index conflicts between the batch's own
// writes are then settled (see settle).
//
// Documents the replica refuses for a reason of their own (too large,
// document validation, a unique index only the replica has) do not fail the
// batch: they come back from Wait as DocFailures. A transient failure
// (network, NotWritablePrimary, a write concern error, a timeout) is
// returned as a plain error so the engine sends the whole batch again:
// every write is idempotent, so writes that did land before the failure
// are harmless to repeat. What only the configuration can fix is
// CONFIG_INVALID. Every message is redacted: no value of a document.
func (s *Sink) Send(ctx context.Context, b sink.Batch) (sink.Receipt, error) {
	rc := &receipt{}
	if len(b.Writes) == 0 {
		return rc, nil
	}
	var dels, ups []write
	for i, w := range b.Writes {
		m, fail := s.model(w)
		if fail != nil {
			fail.Writes = []int{i}
			rc.failures = append(rc.failures, *fail)
			continue
		}
		if w.Delete {
			dels = append(dels, write{pos: i, model: m, id: w.SourceID})
		} else {
			ups = append(ups, write{pos: i, model: m, id: w.SourceID})
		}
	}
	refused := map[int]mongo.WriteError{} // by position in b.Writes
	for _, kind := range [][]write{dels, ups} {
		out, err := s.bulk(ctx, kind)
		if err != nil {
			return nil, err
		}
		if out.all != nil {
			// The replica refused a whole command for one of its documents:
			// name every write, the engine bisects.
			all := *out.all
			all.Writes = all.Writes[:0]
			for i := range b.Writes {
				all.Writes = append(all.Writes, i)
			}
			return &receipt{failures: []sink.DocFailure{all}}, nil
		}
		for i, we := range out.refused {
			refused[kind[i].pos] = we
		}
	}
	if err := s.settle(ctx, ups, refused); err != nil {
		return nil, err
	}
	for pos, we := range refused {
		rc.failures = append(rc.failures, docFailure(pos, we))
	}
	slices.SortFunc(rc.failures, func(a, b sink.DocFailure) int { return a.Writes[0] - b.Writes[0] })
	return rc, nil
}

// write is one write model of a Send, with its position in the batch.
type write struct {
	pos   int
	model mongo.WriteModel
	id    bson.RawValue
}

// conflict reports whether a refused upsert may have met another write of
// its own batch rather than a problem of its document: a unique index
// holding the value the batch moves (11000), or the _id of another type
// that the batch replaces (66). Settling sends it again.
func conflict(we mongo.WriteError) bool {
	return we.Code == codeDuplicateKey || we.Code == codeImmutableField
}

// settle writes again the upserts of ups the replica refused in refused
// (by batch position) because of the batch's own writes, and updates
// refused with what still fails.
//
// The replica's unique indexes see every intermediate state of a batch,
// while the batch holds only each _id's last state: a value moving from
// one document to another fails if the new holder is written before the
// old one lets go. Passes over the refused upserts, while each pass lands
// some (a chain of moves takes one pass per link), settle chains. A cycle
// (A takes B's value while B takes A's: a swap through a temporary value,
// coalesced) never progresses: then the replica's versions of the stuck
// documents are deleted — the batch rewrites them, so their final state is
// known — and they are written again, in passes. What still fails after
// that cannot be written given the batch's final state (a unique index
// only the replica has, a document outside the batch holding the value):
// it is that document's refusal, and no other document was touched.
func (s *Sink) settle(ctx context.Context, ups []write, refused map[int]mongo.WriteError) error {
	byPos := make(map[int]write, len(ups))
	for _, w := range ups {
		byPos[w.pos] = w
	}
	pending := func() []write {
		var out []write
		for pos, we := range refused {
			if w, ok := byPos[pos]; ok && conflict(we) {
				out = append(out, w)
			}
		}
		slices.SortFunc(out, func(a, b write) int { return a.pos - b.pos })
		return out
	}
	stuck := pending()
	cleared := false
	for len(stuck) > 0 {
		out, err := s.bulk(ctx, stuck)
		if err != nil {
			return err
		}
		if out.all != nil {
			return nil // the writes keep their first refusal
		}
		for i, w := range stuck {
			if we, ok := out.refused[i]; ok {
				refused[w.pos] = we
			} else {
				delete(refused, w.pos)
			}
		}
		if len(out.refused) < len(stuck) {
			stuck = pending()
			continue
		}
		if cleared {
			return nil
		}
		// A cycle: delete every refused upsert's replica version (those
		// refused for another reason too: the engine leaves them out of
		// the replica anyway, and their old versions may hold a value a
		// stuck document takes), then write the stuck ones again.
		var gone []write
		for pos := range refused {
			if w, ok := byPos[pos]; ok {
				gone = append(gone, write{pos: pos, model: mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: w.id}}), id: w.id})
			}
		}
		if _, err := s.bulk(ctx, gone); err != nil {
			return err
		}
		cleared = true
	}
	return nil
}

// Wait returns the documents the replica refused in the Send that made r.
// The writes are already durable.
func (s *Sink) Wait(_ context.Context, r sink.Receipt) ([]sink.DocFailure, error) {
	rc, ok := r.(*receipt)
	if !ok || rc == nil {
		return nil, nil
	}
	return rc.failures, nil
}

// statementSlack is how much larger than maxBsonObjectSize a statement the
// server parses may be (BSONObjMaxInternalSize = BSONObjMaxUserSize + 16
// KiB, src/mongo/bson/util/builder.h). An update statement holds its
// document, its _id again (q) and a few bytes of its own.
const statementSlack = 16 * 1024

// model builds the write model of w, or the reason w cannot be written.
func (s *Sink) model(w sink.Write) (mongo.WriteModel, *sink.DocFailure) {
	key := w.SourceID
	if key.Type == 0 {
		return nil, &sink.DocFailure{Code: "INVALID_KEY", Message: "a replica write needs the source _id"}
	}
	filter := bson.D{{Key: "_id", Value: key}}
	if w.Delete {
		return mongo.NewDeleteOneModel().SetFilter(filter), nil
	}
	doc, err := rawDoc(w.Doc)
	if err != nil {
		return nil, &sink.DocFailure{Code: string(errs.NotADocument), Message: err.Error()}
	}
	// The transform may drop fields, never change _id (DESIGN.md "Mirror
	// jobs").
	if id, err := doc.LookupErr("_id"); err == nil && !sameValue(id, key) {
		return nil, &sink.DocFailure{Code: string(errs.IDMismatch),
			Message: fmt.Sprintf("the transform changed _id (a %s where the source has a %s); a mirror keeps the source's _id", id.Type, key.Type)}
	}
	doc, dollar, err := stored(doc, key)
	if err != nil {
		return nil, &sink.DocFailure{Code: string(errs.NotADocument), Message: err.Error()}
	}
	// Measured on the document as the replica stores it, against the
	// replica's own limit: one larger would fail its statement anyway, and
	// one whose _id and document together make a statement the replica does
	// not parse would fail its whole command.
	if len(doc) > maxDocumentSize {
		return nil, &sink.DocFailure{Code: "BSONObjectTooLarge",
			Message: fmt.Sprintf("the document is %d bytes of BSON, more than the replica stores (%d, maxBsonObjectSize)", len(doc), maxDocumentSize)}
	}
	if len(doc)+len(key.Value) > maxDocumentSize+statementSlack-512 {
		return nil, &sink.DocFailure{Code: "BSONObjectTooLarge",
			Message: fmt.Sprintf("the document (%d bytes of BSON) and its %d-byte _id, which an update statement holds twice, are more than the replica parses in one statement", len(doc), len(key.Value))}
	}
	if dollar {
		// A replacement may not hold a top-level $-prefixed field once it
		// replaces a stored document (52 DollarPrefixedFieldName; an
		// upsert's insert may): storage_validation.cpp and
		// object_replace_executor.cpp allow them only to pipeline updates.
		// A pipeline replacing the document by the literal document is the
		// documented way ("Dollar-Prefixed Field Names", MongoDB 5.0+);
		// $literal keeps the document from being read as expressions.
		pipe := bson.A{bson.D{{Key: "$replaceWith", Value: bson.D{{Key: "$literal", Value: doc}}}}}
		return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(pipe).SetUpsert(true), nil
	}
	return mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(doc).SetUpsert(true), nil
}

// stored returns doc as the replica stores it, _id first (the key's when
// doc has none), and whether it holds a top-level $-prefixed field. The
// driver refuses a replacement whose first key starts with $, and the
// server puts _id first anyway.
func stored(doc bson.Raw, key bson.RawValue) (bson.Raw, bool, error) {
	els, err := doc.Elements()
	if err != nil {
		return nil, false, fmt.Errorf("invalid BSON document: %w", err)
	}
	dollar := false
	for _, el := range els {
		if k := el.Key(); k != "_id" && strings.HasPrefix(k, "$") {
			dollar = true
		}
	}
	if len(els) > 0 && els[0].Key() == "_id" {
		return doc, dollar, nil
	}
	idx, out := bsoncore.AppendDocumentStart(make([]byte, 0, len(doc)+len(key.Value)+8))
	out = bsoncore.AppendValueElement(out, "_id", bsoncore.Value{Type: bsoncore.Type(key.Type), Data: key.Value})
	for _, el := range els {
		if el.Key() != "_id" {
			out = append(out, el...)
		}
	}
	out, err = bsoncore.AppendDocumentEnd(out, idx)
	return out, dollar, err
}

// bulk runs ws as one unordered bulk write and classifies what the replica
// answered; refused writes are by index in ws.
func (s *Sink) bulk(ctx context.Context, ws []write) (outcome, error) {
	if len(ws) == 0 {
		return outcome{}, nil
	}
	models := make([]mongo.WriteModel, len(ws))
	for i, w := range ws {
		models[i] = w.model
	}
	if err := s.guard.Check(); err != nil {
		return outcome{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.replica.BulkWrite(wctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil && ctx.Err() != nil {
		return outcome{}, context.Cause(ctx)
	}
	return s.classify(err)
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
func (s *Sink) Stage(ctx context.Context, resume bool) (sink.Staged, error) {
	if _, err := SyncIndexes(ctx, s.log, s.source, s.replica); err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if why := indexRefusal(err); why != "" {
			return nil, errs.Wrap(errs.ConfigInvalid, s.job, err, "copy indexes to the replica: %s", why)
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

// DiscardStage has nothing to delete: a backfill stages in place, in the
// live replica collection, and leaves no target of its own behind.
func (s *Sink) DiscardStage(context.Context, string) error { return nil }

// Enqueued counts nothing: the replica's writes are durable (majority
// write concern) when Send returns, so nothing waits at the destination.
func (s *Sink) Enqueued() (tasks int, bytes int64, counted bool) { return 0, 0, false }

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
