// Package prepare is the work of a batch's prepare stage: it turns the
// source documents of a batch (Item: a document, its _id, the change's
// operation) into the writes a sink takes, on the job's transform runtimes
// in parallel and in order (Transform). What the transform keeps out
// becomes a delete or no write; a document it fails on is set apart as a
// DocError for the per-document error path; an update that cannot change
// what the destination holds is no write at all (skipUnchanged: Unchanged,
// with the changes Coalesce folded into it).
//
// It imports transform, sink (a write) and errs; never the engine, the
// pipe, the stream, the job's state, a sink's implementation, the
// supervisor or the HTTP server.
package prepare
