package engine

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/deadletter"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// Updates that cannot change what the destination holds are not sent
// (skipUnchanged, on by default). A transform is a function of what it
// reads: a call on the document before an update that touched none of
// the fields it read takes the same path, reads the same values and
// returns the same result, which is what the destination holds already
// (transform.Reads.UnchangedBy). The transform still runs (its reads on
// the new document decide); only the write is spared, and the change's
// position is recorded with its batch as any other.
//
// The reads are those of the call on the new document, never of an
// earlier call: what an earlier version made the transform read is not
// what this one makes it read. With fullDocument: updateLookup the new
// document may already hold later changes; each of those comes with its
// own event and is judged on its own, so whatever the last change sent
// is, every later one left the result as it was.
//
// An update is sent anyway when the destination may not hold the result
// of the version before it:
//   - while a reindex runs: its chunks drop the rows the stream changed in
//     their window, so the staged index (or, in place, the live one, which
//     holds the old transform's results until the reindex rewrites them)
//     has that document only from the stream;
//   - while a fan-out runs (a related change sending its dependents
//     again): its pages drop the rows the stream changed in their window
//     alike, so a dependent has the related change only through the
//     stream's write;
//   - when the document has an error record (the transform failed on it,
//     or the destination refused it): the destination does not hold it;
//   - when it replaced, in its batch, an insert, a replace or a delete of
//     the same document (never sent), and when any update it replaced
//     touched a field read;
//   - when the call read ctx.operation or ctx.updateDescription, read
//     another collection (monstache's findId...), or the job's transform
//     ever asked for the clock or chance.
//
// Lookups: a call that read a lookup's matches (ctx.lookups, or the field
// they are set to) read its localField too, so an update moving the
// reference is sent; a change of the related document itself sends its
// dependents again through a fan-out, never judged here.
//
// A refusal found after an update was spared (the destination refusing
// the version sent before it) records the document, which the
// destination then lacks, as it would have refused the same result again.

// unchanged judges the items of one follow batch: nil judges none.
type unchanged struct {
	errs *deadletter.Set
	n    atomic.Int64 // updates judged unchanged, not yet reported
}

// unchangedCheck gives the items of a batch about to be flushed their
// judge, and returns it; nil when none of them may be spared (see above).
func (f *follower) unchangedCheck(items []item) *unchanged {
	if f.snap != nil || f.fanPending.Load() > 0 || !f.jc.job.SkipUnchanged {
		return nil
	}
	u := &unchanged{errs: f.p.errs}
	for i := range items {
		items[i].skip = u
	}
	return u
}

// unchanged says whether it, transformed into r, may be left unsent, and
// counts it. Called by the transform workers, concurrently.
func (u *unchanged) unchanged(it *item, r transform.Result) bool {
	if u == nil || it.op != transform.OpUpdate || it.doc == nil || !r.Reads.UnchangedBy(it.upd) {
		return false
	}
	for _, prev := range it.coalesced {
		if !r.Reads.UnchangedBy(prev) { // nil: an earlier change that was no update
			return false
		}
	}
	if u.errs.Has(it.id) {
		return false
	}
	u.n.Add(1)
	return true
}

// report counts the batch's unchanged updates in the job's figures and
// metrics (on the prepare stage, once per batch).
func (u *unchanged) report(e *Engine, job string, stats *status.JobStats) {
	if u == nil {
		return
	}
	n := u.n.Swap(0)
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

// unjudged is the coalesced list of an update that replaced a change that
// was no update: it is never spared.
var unjudged = []bson.Raw{nil}

// coalesce returns it, which replaces prev (an earlier change of the same
// document in the pending batch, never sent), with what the judge must
// know of prev: every update description it replaced, or that one of them
// was no update.
func coalesce(prev, it item) item {
	if it.op != transform.OpUpdate {
		return it
	}
	switch {
	case prev.op != transform.OpUpdate || prev.upd == nil || len(prev.coalesced) == 1 && prev.coalesced[0] == nil:
		it.coalesced = unjudged
	default:
		it.coalesced = append(prev.coalesced, prev.upd)
	}
	return it
}
