// Package deadletter is what a job does with its per-document error
// records (the dead letters, kept by sidecar/jobstate): the set of its
// documents that have one (Set), kept in step as writes become durable so
// that a document written without error clears its record and the
// dead-letter gauge stays current; the `meilistream retry` requests the
// job's holder takes, hands to the follow loop and answers (Requests);
// and the retry of the recorded documents by a process that holds the
// job's lease itself (Retry).
//
// The engine (sidecar/engine) records the errors, transforms the
// documents and retries them inside a running job; this package keeps the
// bookkeeping around them. It imports jobstate, pipe (a flight and its
// refused writes), sink (a write), transform (the identity of an _id) and
// errs; never the engine, the stream, the configuration, the supervisor, a
// sink's implementation, the HTTP server or Prometheus.
package deadletter
