package sidecar

import (
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// The engine's Prometheus hooks; each is a no-op without metrics.

func (e *Engine) jm(job string) *JobMetrics {
	if e.metrics == nil {
		return nil
	}
	return e.metrics.Job(job, e.kinds(job))
}

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

func (e *Engine) observeBatch(job string, d time.Duration, writes int) { e.jm(job).Batch(d, writes) }
func (e *Engine) observeRetry(job string, err error) {
	e.jm(job).Error(string(errs.CodeOf(err)))
}
func (e *Engine) observeDocError(job, code string)   { e.jm(job).Error(code) }
func (e *Engine) observeSkipped(job string, n int64) { e.jm(job).Skipped(int(n)) }
func (e *Engine) observeWrites(job string, up, del int64) {
	j := e.jm(job)
	j.Indexed(int(up))
	j.Deleted(int(del))
}
func (e *Engine) observeLag(job string, lag float64) {
	e.jm(job).Lag(time.Duration(lag * float64(time.Second)))
}
func (e *Engine) observePosition(job string, t time.Time)    { e.jm(job).Position(t) }
func (e *Engine) observeReindex(job string, d time.Duration) { e.jm(job).ReindexDone() }
func (e *Engine) observeProgress(job string, done, est int64) {
	e.jm(job).ReindexProgress(done, est)
}
func (e *Engine) observeDeadLetters(job string, n int64) { e.jm(job).DeadLetters(n) }
