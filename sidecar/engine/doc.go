// Package engine runs a job: it follows the job's change stream
// (sidecar/stream) from its first second and, when the job needs one,
// interleaves a reindex of the collection into it (DBLog's watermarks,
// below: watermark_*.go read the chunks, the follow loop hands each to the
// pipe at its mark), writing everything through the job's transform and
// one ordered pipe (sidecar/pipe) into a sink.Sink (the Meilisearch sink
// of sidecar/meili, the replica sink of replicate), under the job's lease.
// It records the job's position and commits a reindex (the swap, then the
// position with the new transform's hash), keeps its per-document error
// records (the dead letters) through sidecar/jobstate, and its live
// figures in a status.JobStats. The deadletter_*.go files keep the
// bookkeeping around those records: the set of the job's documents that
// have one, kept in step as writes become durable so that a document
// written without error clears its record and the dead-letter gauge stays
// current; the `meilistream retry` requests a following holder takes and
// answers inside the running job (retrylive.go); and the retry of the
// recorded documents by a process that holds the job's lease itself.
// Beside a run it keeps this process's presence record of each job and
// applies the rule that reads them (presence.go, rollout.go). Each
// position it records carries the job's durable cluster time, told to
// Config.Durable too (read your writes: a waiter's wait document in the
// stream makes it prompt).
//
// Verify (verify.go, verifycmp.go) compares a job's destination with what
// its transform makes of the collection, by the reindex's walk and the
// sink's read-back (sink.Fetch, sink.Keys), re-checking what differs past
// the holder's durable time, which the job's wait document makes the
// holder record at once (as GET /wait); a repair goes through the holder as a
// retry's request does. A following holder of a job with verify: true
// runs it in the background, checkpointed (verifybg.go).
//
// A batch's documents are joined with what the job looks up
// (lookup_resolve.go), which also says which documents a related change
// sends again (lookup_related.go; read in pages by Fanout), and turned
// into writes on the job's transform runtimes in parallel and in order
// (prepare.go: Item, Transform): what the transform keeps out becomes a
// delete or no write, a document it fails on a DocError for the
// per-document error path, and an update that cannot change what the
// destination holds no write at all (unchanged.go). Monstache-style
// scripts read the source through lookup_reader.go.
//
// It owns the defaults of its Config and declares the small interfaces it
// needs of others: Lease (the job's lease) and Observer (its metrics).
//
// The watermark files read a job's collection beside its change stream,
// each read between two watermarks the stream follows, so that what it
// read lands in change order: a reindex (Reindex: resume or stage, the
// chunks, an in-place reindex's sweep, the checkpoint, the progress) and
// the pages a fan-out sends again (Fanout: a related change's dependents,
// a retry's recorded documents). The follow loop takes each read at its
// mark and hands it to the pipe.
//
// # Reading between watermarks
//
// A reindex is work interleaved into the job's change stream, never a
// phase before it: the watermark algorithm of DBLog (Andreakis and
// Papapanagiotou, "DBLog: A Watermark Based Change-Data-Capture
// Framework", 2020), which Debezium ships as incremental snapshots.
//
// The reindex's goroutine reads the collection in _id-ordered chunks.
// Before each read it has written a watermark (a unique mark in the job's
// watermark document of the state collection, which the job's stream
// follows), and after it the next one: chunk k is read between marks k-1
// and k. The follow loop, reading the stream in order, collects the _ids
// the stream changed since the last mark; when it reaches mark k it drops
// those from chunk k (the stream's version is as new or newer) and hands
// the rest to the pipe right there, between the changes before the mark and
// the ones after. A row not changed between the marks had at mark k the
// value it was read with, so every write lands in change order and the
// destination converges to the collection, however long the whole read
// takes: the change history only has to cover the stream, not the reindex.
//
// Where this differs from DBLog: the stream is never paused (the changed
// _ids are collected as a set from mark k-1 on and applied at mark k; the
// chunk is read by then, since mark k is written after the read); mark k
// closes chunk k's window and opens chunk k+1's, so there is one write per
// chunk; and each chunk is its own query (a find with a limit, never a
// getMore of an older cursor, whose documents may have been read before the
// mark). From Debezium's MongoDB incremental snapshot: the signal
// collection watched by the same stream, and chunks by _id with a limit.
//
// Each read must see every write before the mark that opened it: marks are
// written with majority write concern and chunks read with majority read
// concern in one causally consistent session, so the read carries the
// mark's operation time as afterClusterTime (also behind mongos, where the
// stream merges the shards' events in cluster time order).
//
// A swap reindex writes chunks to the staged index and every followed
// change to both the live and the staged index (search stays fresh); in
// place, both go to the live destination. A sweep (in place) lists the
// destination's ids the same way, between marks: an id absent from the
// collection when read, and not changed by the stream since, is deleted at
// the end unless the stream changes it before then.
package engine
