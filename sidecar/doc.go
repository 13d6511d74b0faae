// Package sidecar groups the parts of the running sidecar, one package
// each, and holds no code of its own. Imports point one way, from the top
// of this list down; the rules are kept in one place, imports_test.go:
//
//   - config: the MEILISTREAM_* configuration and the root logger; only the
//     main package imports it.
//   - supervisor: one goroutine per job (standby, run, restart, park) and
//     the jobs' status; uses the engine.
//   - httpapi: /healthz, /readyz, /status and /metrics, and the Prometheus
//     collectors that implement the engine's and the supervisor's metrics
//     interfaces.
//   - meili: the Meilisearch sink, a sibling of the replica sink
//     (../replicate); both implement sink.Sink.
//   - engine: one job: the change stream followed from its first second,
//     a reindex and fan-outs interleaved into it at their watermarks, the
//     positions recorded, over a sink.Sink; in its files, the reads
//     between watermarks, the lookups, a batch's prepare stage, the
//     per-document error records and retries, presence records and the
//     rollout rule.
//   - stream: the job's change stream and the goroutine that reads it.
//   - pipe: batches carried to the sinks in order, retried, bisected.
//   - sink: the contract between the engine and a destination; a leaf.
//   - jobstate: what the engine keeps in MongoDB (positions, checkpoints,
//     per-document error records).
//   - status: the jobs' live figures and the /status types; a leaf.
package sidecar
