package engine

import (
	"github.com/meilistream/meilistream/sidecar/status"
)

// Updates that cannot change what the destination holds are not sent
// (skipUnchanged: the rule is Unchanged's). The follow loop
// judges its batches but while the destination may not hold the result of
// the version before an update:
//   - while a reindex runs: its chunks drop the rows the stream changed in
//     their window, so the staged index (or, in place, the live one, which
//     holds the old transform's results until the reindex rewrites them)
//     has that document only from the stream;
//   - while a fan-out runs (a related change sending its dependents
//     again): its pages drop the rows the stream changed in their window
//     alike, so a dependent has the related change only through the
//     stream's write.

// unchangedCheck gives the items of a batch about to be flushed their
// judge, and returns it; nil when none of them may be spared (see above).
func (f *follower) unchangedCheck(items []Item) *Unchanged {
	if f.snap != nil || f.fanPending.Load() > 0 || !f.jc.job.SkipUnchanged {
		return nil
	}
	return JudgeUnchanged(items, f.p.errs, f.stale.update())
}

// reportUnchanged counts the batch's unchanged updates in the job's
// figures and metrics (on the prepare stage, once per batch).
func (e *Engine) reportUnchanged(u *Unchanged, job string, stats *status.JobStats) {
	n := u.Take()
	if n == 0 {
		return
	}
	stats.Update(func(s *status.JobSnapshot) { s.SkippedUnchanged += n })
	if o, ok := e.obs.(UnchangedObserver); ok {
		o.ObserveUnchanged(job, e.kinds(job), int(n))
	}
}

// UnchangedObserver is implemented by an Observer that counts the updates
// not sent because they could not change the destination's document
// (skipUnchanged).
type UnchangedObserver interface {
	ObserveUnchanged(job, kind string, n int)
}
