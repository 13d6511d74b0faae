package sidecar

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DRAFT (owned by the engine; the replica sink in replicate/ implements it
// too). Change it when the engine needs to, and keep replicate/ compiling.

// Write is one change for one document, after the transform: an upsert of
// Doc or a delete of Key.
type Write struct {
	// Key is the destination's id for the document: the Meilisearch id
	// (string or int64, see transform's IndexID) or, for a replica, the
	// source _id itself (bson.RawValue), so its BSON type is kept.
	Key any
	// SourceID is the source document's _id, for error records.
	SourceID bson.RawValue
	// Delete removes Key; otherwise Doc replaces whatever Key holds.
	Delete bool
	// Doc is the document to write: map[string]any (JSON-ready) for
	// Meilisearch, bson.Raw for a replica. Nil when Delete.
	Doc any
}

// Batch is a set of writes with distinct keys (the engine coalesces per id
// before it builds one), sent as one unit.
type Batch struct {
	Writes []Write
}

// Receipt identifies a sent batch until it is durable (Meilisearch: its task
// uids; a replica: nothing, its writes are durable when Send returns).
type Receipt any

// DocFailure is one document the destination refused for a reason of its own
// (too large, invalid field, validation): it goes to the per-document error
// path, never into a retry loop.
type DocFailure struct {
	Key      any
	SourceID bson.RawValue
	Code     string // the destination's own error code, e.g. invalid_document_fields
	Message  string
}

// Sink is a destination the engine writes to. Sends happen in order, one at a
// time: the engine never calls Send again before the previous Send returned
// nil, so the destination sees batches in change order.
type Sink interface {
	// Prepare makes the destination ready (index created with its primary
	// key, declared settings applied; replica writable). Idempotent.
	Prepare(ctx context.Context) error
	// Send hands b to the destination and returns once the destination has
	// accepted it (enqueued in order). An error means nothing of b may be
	// assumed accepted and the engine retries the same batch; errors the
	// engine must not retry are *errs.Error with a code other than FAILED.
	Send(ctx context.Context, b Batch) (Receipt, error)
	// Wait blocks until what r stands for is durable. Documents refused for
	// a reason of their own come back as failures with a nil error; a non-nil
	// error means durability is unknown and the batch must be sent again.
	Wait(ctx context.Context, r Receipt) ([]DocFailure, error)
	// Keys calls fn with every key the destination holds, in pages, for the
	// sweep of an in-place reindex.
	Keys(ctx context.Context, fn func(keys []any) error) error
	// Stage returns a sink for a rebuild from scratch. For a swap reindex it
	// writes into a temporary target (fresh, or kept as it is when resume is
	// true, so a reindex continues from its checkpoint); in place it is the
	// live destination.
	Stage(ctx context.Context, resume bool) (Staged, error)
}

// Staged is the target of a reindex or backfill.
type Staged interface {
	Sink
	// Commit makes the rebuilt target the live one atomically (Meilisearch:
	// swap-indexes, then delete the old index). In place: nothing to do.
	Commit(ctx context.Context) error
	// Discard drops the temporary target (after a failure that restarts
	// from scratch). In place: nothing to do.
	Discard(ctx context.Context) error
}
