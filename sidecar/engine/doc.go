// Package engine runs a job: it reindexes the job's collection into a
// destination and follows the collection's change stream, through the
// job's transform, over a Sink (the Meilisearch sink of sidecar/meili, the
// replica sink of replicate), under the job's lease. It keeps the job's
// position, reindex checkpoint and per-document error records through
// sidecar/jobstate, and its live figures in a status.JobStats.
//
// It owns the defaults of its Config and declares the small interfaces it
// needs of others: Sink and Staged (the destinations), Lease (the job's
// lease), Observer (its metrics). It imports transform, jobstate, status,
// errs and the MongoDB driver; never the configuration, the supervisor, the
// HTTP server, a sink or Prometheus.
package engine
