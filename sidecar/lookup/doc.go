// Package lookup reads, from the source MongoDB, what a job's documents
// are joined with: the job's declared lookups, resolved for a whole batch
// at once (Resolver), the values a change of a looked-up document gives
// the documents that depend on it (Related: the queries of a fan-out),
// and what monstache-style scripts read themselves (NewReader: their
// findId, findOne, find and pipe).
//
// The engine (sidecar/engine) calls it on a batch's prepare stage and as
// it reads the stream. It imports transform, errs and the MongoDB driver:
// nothing under sidecar/ (not the engine, the pipe, a sink, the job's
// state, the supervisor or the HTTP server).
package lookup
