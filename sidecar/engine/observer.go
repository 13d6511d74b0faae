package engine

import (
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// Observer receives what the engine measures of each job, for the metrics
// (the Prometheus collectors of sidecar/httpapi in production). kind is the
// job's kind, "search" or "mirror". The methods must be cheap and safe for
// concurrent use. New takes nil for an engine that observes nothing.
type Observer interface {
	// ObserveBatch: a batch of writes became durable d after it was first
	// sent.
	ObserveBatch(job, kind string, d time.Duration, writes int)
	// ObserveWrites: upserts and deletes made durable.
	ObserveWrites(job, kind string, upserts, deletes int)
	// ObserveSkipped: documents the transform kept out.
	ObserveSkipped(job, kind string, n int)
	// ObserveError: one error of code (errs.CodeOf of a retried error, or
	// the code of a refused document).
	ObserveError(job, code string)
	// ObserveLag: how far the durable position is behind the change stream.
	ObserveLag(job string, lag time.Duration)
	// ObservePosition: the wall time of the position just recorded.
	ObservePosition(job string, t time.Time)
	// ObserveReindexProgress: documents the running reindex read so far,
	// of the collection's estimated count.
	ObserveReindexProgress(job string, done, estimated int64)
	// ObserveReindexDone: a reindex completed.
	ObserveReindexDone(job string)
	// ObserveDeadLetters: the job's documents in the errors collection.
	ObserveDeadLetters(job string, n int64)
	// ObserveVerify: a background verify pass ended at done, finding
	// these differing documents.
	ObserveVerify(job string, missing, stale, extra int64, done time.Time)
	// ObserveWatchdog: the job's pending work stopped moving for longer
	// than its watchdog's bound (stalled), or moves again.
	ObserveWatchdog(job string, stalled bool)
}

// noObserver observes nothing.
type noObserver struct{}

func (noObserver) ObserveBatch(string, string, time.Duration, int)      {}
func (noObserver) ObserveWrites(string, string, int, int)               {}
func (noObserver) ObserveSkipped(string, string, int)                   {}
func (noObserver) ObserveError(string, string)                          {}
func (noObserver) ObserveLag(string, time.Duration)                     {}
func (noObserver) ObservePosition(string, time.Time)                    {}
func (noObserver) ObserveReindexProgress(string, int64, int64)          {}
func (noObserver) ObserveReindexDone(string)                            {}
func (noObserver) ObserveDeadLetters(string, int64)                     {}
func (noObserver) ObserveWatchdog(string, bool)                         {}
func (noObserver) ObserveVerify(string, int64, int64, int64, time.Time) {}

// kinds returns the kind label of job; the engine does not keep jobs, so
// it is looked up in what Run registered (search by default).
func (e *Engine) kinds(job string) string {
	e.kindMu.Lock()
	defer e.kindMu.Unlock()
	if k, ok := e.kind[job]; ok {
		return k
	}
	return "search"
}

func (e *Engine) setKind(job, kind string) {
	e.kindMu.Lock()
	defer e.kindMu.Unlock()
	if e.kind == nil {
		e.kind = map[string]string{}
	}
	e.kind[job] = kind
}

func (e *Engine) observeBatch(job string, d time.Duration, writes int) {
	e.obs.ObserveBatch(job, e.kinds(job), d, writes)
}
func (e *Engine) observeRetry(job string, err error) {
	e.obs.ObserveError(job, string(errs.CodeOf(err)))
}
func (e *Engine) observeDocError(job, code string)   { e.obs.ObserveError(job, code) }
func (e *Engine) observeSkipped(job string, n int64) { e.obs.ObserveSkipped(job, e.kinds(job), int(n)) }
func (e *Engine) observeWrites(job string, up, del int64) {
	e.obs.ObserveWrites(job, e.kinds(job), int(up), int(del))
}
func (e *Engine) observeLag(job string, lag float64) {
	e.obs.ObserveLag(job, time.Duration(lag*float64(time.Second)))
}
func (e *Engine) observePosition(job string, t time.Time) { e.obs.ObservePosition(job, t) }
