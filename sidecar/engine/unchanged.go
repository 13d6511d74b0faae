package engine

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"

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
//   - when the batch is not judged at all (JudgeUnchanged is not called:
//     the engine says when, a reindex or a fan-out running);
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
// dependents again through a fan-out, never judged here. A fan-out that
// could not find every dependent (a related change without its pre-image)
// leaves some with an old join: the job then judges every update as if it
// also touched that localField (the stale fields of JudgeUnchanged), so
// such a dependent is sent on its next change.
//
// A refusal found after an update was spared (the destination refusing
// the version sent before it) records the document, which the
// destination then lacks, as it would have refused the same result again.

// Records says which documents have an error record
// (deadLetterSet has it).
type Records interface {
	Has(id bson.RawValue) bool
}

// Unchanged judges the items of one batch; a nil *Unchanged judges none.
type Unchanged struct {
	records Records
	stale   bson.Raw
	n       atomic.Int64 // updates judged unchanged, not yet taken
}

// JudgeUnchanged gives the items of a batch about to be transformed their
// judge, and returns it: Transform leaves out the writes of the updates
// it finds unchanged. records are the job's documents with an error
// record (nil: none). stale (nil: none) is an updateDescription of the
// fields whose values may not be what the destination's documents were
// made with: every update is judged as if it also made that change.
func JudgeUnchanged(items []Item, records Records, stale bson.Raw) *Unchanged {
	u := &Unchanged{records: records, stale: stale}
	for i := range items {
		items[i].judge = u
	}
	return u
}

// Take returns how many updates were judged unchanged since the last
// Take (the prepare stage reports them once per batch).
func (u *Unchanged) Take() int64 {
	if u == nil {
		return 0
	}
	return u.n.Swap(0)
}

// unchanged says whether it, transformed into r, may be left unsent, and
// counts it. Called by the transform workers, concurrently.
func (u *Unchanged) unchanged(it *Item, r transform.Result) bool {
	if u == nil || it.Op != transform.OpUpdate || it.Doc == nil || !r.Reads.UnchangedBy(it.Upd) {
		return false
	}
	if u.stale != nil && !r.Reads.UnchangedBy(u.stale) {
		return false
	}
	for _, prev := range it.coalesced {
		if !r.Reads.UnchangedBy(prev) { // nil: an earlier change that was no update
			return false
		}
	}
	if u.records != nil && u.records.Has(it.ID) {
		return false
	}
	u.n.Add(1)
	return true
}

// unjudged is the coalesced list of an update that replaced a change that
// was no update: it is never spared.
var unjudged = []bson.Raw{nil}

// Coalesce returns it, which replaces prev (an earlier change of the same
// document in the pending batch, never sent), with what the judge must
// know of prev: every update description it replaced, or that one of them
// was no update.
func Coalesce(prev, it Item) Item {
	if it.Op != transform.OpUpdate {
		return it
	}
	switch {
	case prev.Op != transform.OpUpdate || prev.Upd == nil || len(prev.coalesced) == 1 && prev.coalesced[0] == nil:
		it.coalesced = unjudged
	default:
		it.coalesced = append(prev.coalesced, prev.Upd)
	}
	return it
}
