// Package sink is the contract between the engine and a destination: a
// Sink takes batches of writes in order and says when they are durable,
// and stages a target for a reindex. The Meilisearch sink (sidecar/meili)
// and the replica sink (replicate) implement it side by side; the pipe
// (sidecar/pipe), the engine and the supervisor use it. It is a package of
// its own, not a file of the engine, because both sinks implement it and
// use its types (Write, Batch, DocFailure) while neither may link the
// engine; it is a leaf.
package sink

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Write is one change for one document, after the transform: an upsert of
// Doc or a delete.
type Write struct {
	// SourceID is the source document's _id (its BSON type kept). The sink
	// derives its own key from it; the engine coalesces on it.
	SourceID bson.RawValue
	// Delete removes the document; otherwise Doc replaces whatever the
	// destination holds for SourceID.
	Delete bool
	// Doc is the document to write: the transform's Result.JSON (as a
	// json.RawMessage; any value jobdef.AppendJSON takes will do) for
	// Meilisearch, its Result.Raw (bson.Raw, _id included) for a mirror.
	// Nil when Delete.
	Doc any
}

// Batch is a set of writes with distinct SourceIDs (the engine coalesces per
// id before it builds one), sent as one unit.
type Batch struct {
	Writes []Write
}

// Receipt identifies a sent batch until it is durable (Meilisearch: its task
// uids; a replica: nothing, its writes are durable when Send returns).
type Receipt any

// DocFailure is a refusal by the destination of some writes of a batch for
// a reason of the documents (too large, invalid field, validation): it goes
// to the per-document error path, never into a retry loop. A destination
// that refuses a whole request for one bad document (a Meilisearch task)
// names every write of that request; the engine then bisects to find it.
type DocFailure struct {
	Writes  []int  // positions in Batch.Writes of the refused writes; one position names the document
	Code    string // the destination's own error code, e.g. invalid_document_id
	Message string
}

// ErrNoStage is returned (wrapped) by Sink.Stage when resume is true but
// there is no staged target to resume into; the engine then stages afresh.
var ErrNoStage = errors.New("no staged target to resume")

// Sink is a destination the engine writes to: every method a sink has is
// here, and each sink implements each one (one with nothing to do for a
// method says so in its body), so that the engine never asks a sink what
// else it does and nothing wraps a sink to pass methods on. Sends happen
// in order, one at a time: the engine never calls Send concurrently, and
// sends batches in change order, so the destination sees writes in change
// order.
type Sink interface {
	// Prepare makes the destination ready (index created with its primary
	// key, declared settings applied; replica writable). Idempotent.
	Prepare(ctx context.Context) error
	// Send hands b to the destination and returns once the destination has
	// accepted it (enqueued in order). An error means nothing of b may be
	// assumed accepted and the engine sends the same batch again (with
	// backoff); an *errs.Error with a code other than FAILED stops the job.
	Send(ctx context.Context, b Batch) (Receipt, error)
	// Wait blocks until what r stands for is durable. Writes refused for a
	// reason of their documents come back as failures with a nil error
	// (everything else of the batch is then durable). A non-nil error means
	// durability is unknown and the engine sends the batch again; an
	// *errs.Error with a code other than FAILED stops the job. Transient
	// errors while polling are retried by Wait itself until ctx ends.
	Wait(ctx context.Context, r Receipt) ([]DocFailure, error)
	// Keys calls fn with the source _ids of every document the destination
	// holds, in pages: the one walk of a destination's ids, for the sweep
	// of an in-place reindex and for verify's extra documents.
	Keys(ctx context.Context, fn func(ids []bson.RawValue) error) error
	// Fetch reads back what the destination holds for ids, for verify:
	// docs[i] is the stored document of ids[i] in the destination's own
	// form (Meilisearch: its JSON as the documents API returns it; a
	// replica: its BSON), nil when the destination holds none. An error
	// means nothing was read (the destination refused or did not answer).
	Fetch(ctx context.Context, ids []bson.RawValue) (docs [][]byte, err error)
	// Stage returns a sink for a rebuild from scratch. For a swap reindex it
	// writes into a temporary target: a fresh one when resume is false
	// (any leftover is dropped first), the existing one when resume is true
	// (so a reindex continues from its checkpoint; ErrNoStage when there is
	// none). In place it is the live destination itself.
	Stage(ctx context.Context, resume bool) (Staged, error)
	// DiscardStage deletes the target a swap reindex of destination staged
	// beside it (Meilisearch: <uid>__reindex), which outlives the run that
	// made it: a reindex that starts over for another destination (the
	// index uid changed) or in place would leave the one an unfinished
	// reindex staged behind. Deleting a target that is not there is no
	// error; a sink that stages in place has nothing to delete.
	DiscardStage(ctx context.Context, destination string) error
	// OnDDL hears of a drop, rename or dropDatabase of the source
	// collection, before the engine stops the job as invalidated (the
	// replica sink logs and counts it, and never applies it to the
	// replica).
	OnDDL(ctx context.Context, event string)
	// Enqueued is what the sink has enqueued at its destination and not
	// yet seen processed (the Meilisearch sink: its tasks and their
	// request bytes, which it keeps under a bound); counted is false for a
	// destination whose writes are durable when Send returns, which has no
	// queue to show.
	Enqueued() (tasks int, bytes int64, counted bool)
}

// Staged is the target of a reindex or backfill.
type Staged interface {
	Sink
	// InPlace reports whether writes land in the live destination (then the
	// engine sweeps unwanted documents instead of committing a swap).
	InPlace() bool
	// Commit makes the rebuilt target the live one atomically (Meilisearch:
	// swap-indexes, then delete the old index). In place: nothing to do.
	Commit(ctx context.Context) error
	// Discard drops the temporary target (after a failure that restarts
	// from scratch). In place: nothing to do.
	Discard(ctx context.Context) error
}

// Guard is the check a Sink makes right before each request it sends to
// its destination: when Check returns an error, the Sink sends nothing and
// returns that error as it is (a LEASE_LOST stops the job). A sink is
// built with one (its constructor takes it), so a sink without the check
// does not compile; the zero Guard, one nobody made, refuses every
// request rather than let one through unguarded.
//
// Whoever holds a job's lease (the supervisor, `meilistream reindex` and
// `retry`) builds the job's sink with the lease's own-clock check
// (lease.Lease.Held), which the engine also makes before each send:
// these writes cannot be fenced by the epoch, so a holder frozen past its
// lease (SIGSTOP, a stalled node) then sends nothing once it is
// continued, instead of one more batch before a renewal tells it the
// lease is gone.
type Guard struct {
	held func() error
}

// NewGuard returns the guard that runs held before each request.
func NewGuard(held func() error) Guard {
	if held == nil {
		panic("sink.NewGuard: no check")
	}
	return Guard{held: held}
}

// Unguarded lets every request through: for a sink under no lease (a
// test of the sink itself, or `meilistream verify`'s reads; its repairs
// take the lease and a guarded sink).
var Unguarded = Guard{held: func() error { return nil }}

// errNoGuard is what the zero Guard answers.
var errNoGuard = errors.New("the sink was given no lease guard: nothing is sent (a defect of meilistream)")

// Check runs the guard: nil when the request may go.
func (g Guard) Check() error {
	if g.held == nil {
		return errNoGuard
	}
	return g.held()
}
