// Package supervisor runs every job of a sidecar: one goroutine per job
// that stands by while another process holds the job's lease (or runs a
// newer transform of it, engine.ErrTransformOlder), runs the engine while
// it holds it, restarts it with backoff after a failure, parks a job whose
// definition is unusable until it changes, and reports a job that failed
// for good. It builds the jobs' status for /status and /readyz
// (status.Source), probing the servers the jobs need.
//
// EngineDriver runs jobs with the engine. The supervisor declares the
// metrics it reports (Metrics) and the sinks it is given (SinkFactory) as
// small interfaces, which the main package fills.
package supervisor
