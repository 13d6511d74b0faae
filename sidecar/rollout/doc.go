// Package rollout keeps a rollout of a new transform from being undone by
// the pods that do not have it yet: each process keeps a presence record
// of every job it runs, holder or standby, with its transform's hash
// (Presence, refreshed by the server's clock), and the rule (Older) makes
// a process whose transform is the one the recorded transform replaced
// stand by while a live process runs the newer one (ErrTransformOlder).
// With no such process, going back to the older transform is a revert,
// honoured at once.
//
// The engine (sidecar/engine) keeps the records and applies the rule; the
// supervisor stands a job by on ErrTransformOlder. It imports jobstate
// (the records), transform and errs; never the engine, the supervisor, a
// sink, the configuration, the HTTP server or Prometheus.
package rollout
