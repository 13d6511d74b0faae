// Package watermark reads a job's collection beside its change stream,
// each read between two watermarks the stream follows, so that what it
// read lands in change order: a reindex (Reindex: resume or stage, the
// chunks, an in-place reindex's sweep, the checkpoint, the progress) and
// the pages a fan-out sends again (Fanout: a related change's dependents,
// a retry's recorded documents). The engine's follow loop takes each read
// at its mark and hands it to the pipe.
//
// It imports prepare (a read's items), deadletter (a reindex's error
// records, a retry's request), jobstate (the checkpoint), pipe, sink,
// status, stream (the job's projection), transform, errs and the MongoDB
// driver; never the engine, the configuration, the supervisor, a sink's
// implementation, the HTTP server or Prometheus.
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
package watermark
