// Package engine runs a job: it follows the job's change stream
// (sidecar/stream) from its first second and, when the job needs one,
// interleaves a reindex of the collection into it (DBLog's watermarks:
// sidecar/watermark reads the chunks, the follow loop hands each to the
// pipe at its mark), writing everything through the job's transform and
// one ordered pipe (sidecar/pipe) into a sink.Sink (the Meilisearch sink
// of sidecar/meili, the replica sink of replicate), under the job's lease.
// It records the job's position and commits a reindex (the swap, then the
// position with the new transform's hash), keeps its per-document error
// records through sidecar/jobstate (the set of documents with a record
// through sidecar/deadletter), and its live figures in a status.JobStats.
// Beside a run it keeps this process's presence record of each job and
// applies the rule that reads them (sidecar/rollout), and a following
// holder serves `meilistream retry` requests (deadletter.Requests) inside
// the running job (retrylive.go). Each position it records carries the
// job's durable cluster time, told to Config.Durable too (read your
// writes: a waiter's wait document in the stream makes it prompt).
//
// A batch's documents are joined with what the job looks up through
// sidecar/lookup, which also says which documents a related change sends
// again (read in pages by watermark.Fanout), and turned into writes by
// sidecar/prepare (the transform, and the updates that cannot change the
// destination left unsent).
//
// It owns the defaults of its Config and declares the small interfaces it
// needs of others: Lease (the job's lease) and Observer (its metrics). It
// imports transform, jobstate, status, stream, lookup, prepare,
// deadletter, watermark, rollout, pipe, sink, errs and the MongoDB driver; never
// the configuration, the supervisor, the HTTP server, a sink's
// implementation or Prometheus. None of those packages imports the
// engine.
package engine
