// Package supervisor runs every job of a sidecar: one goroutine per job
// that stands by while another process holds the job's lease (or runs a
// newer transform of it, engine.ErrTransformOlder), runs the engine while
// it holds it, restarts it with backoff after a failure, parks a job whose
// definition is unusable until it changes, and reports a job that failed
// for good. It builds the jobs' status for /status and /readyz
// (status.Source), probing the servers the jobs need.
//
// It imports the engine (EngineDriver runs jobs with it), rollout (the
// error a standby waits on), lease, status, transform, errs and mongoerr.
// It declares the metrics it reports (Metrics) and the sinks it is given
// (SinkFactory) as small interfaces: it never imports the HTTP server,
// Prometheus, the configuration or a sink.
package supervisor
