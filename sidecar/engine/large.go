package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/prepare"
	"github.com/meilistream/meilistream/sidecar/status"
)

// Change events over 16 MB (see sidecar/stream, split.go). Where the
// server has $changeStreamSplitLargeEvent the stream asks for it and the
// reader puts the fragments together; nothing here is needed. Where it
// has not (before 7.0 and 6.0.9), the getMore that meets such an event
// fails with BSONObjectTooLarge, and reopening the same stream at the same
// place fails again. The follow loop then reads that stretch of the
// stream lean (stream.Lean): the same events without their documents,
// which it reads itself by _id when it flushes, as fullDocument:
// updateLookup would have (the document as it is when read, or none: a
// delete follows). The stretch lasts until an event later than the
// server's time when the getMore failed (every event up to the large one
// is older), or until the stream is caught up; then the full stream
// reopens after the last event read. A lean stream that fails alike (an
// update description alone over 16 MB, beyond what any server can return)
// stops the job with FAILED saying so: never a silent skip.

// maxFillIDs bounds the _ids of one query reading a lean stretch's
// documents.
const maxFillIDs = 1000

// tooLarge acts on a stream error saying an event was too large: the lean
// stretch begins (nil: reopen), or, when it was already lean, the job
// stops.
func (f *follower) tooLarge(ctx context.Context, err error) error {
	name := f.jc.job.Name
	if f.lean {
		if f.noSplit {
			return errs.Wrap(errs.Failed, name, err,
				"read a change event over 16 MB after the recorded position: even without its documents it is larger than MongoDB can return to a change stream, and this server has no $changeStreamSplitLargeEvent; upgrade MongoDB to 6.0.9 or later (7.0+), where meilistream reads such events in fragments")
		}
		return errs.Wrap(errs.Failed, name, err,
			"read a change event over 16 MB after the recorded position: one of its fields (its update description) is larger than a fragment of $changeStreamSplitLargeEvent can hold, even without its documents; the job cannot go past it: make such updates smaller, then reindex the job from the present")
	}
	f.lean, f.leanUntil, f.leanRead = true, f.e.operationTime(ctx), 0
	f.log.Warn("a change event is too large for MongoDB to return with its documents: reading the stream on without them, and the documents by _id, until past it",
		"split_large_event", !f.noSplit, "error", err)
	f.stats.Update(func(s *status.JobSnapshot) { s.NoteError(err) })
	return nil
}

// leanPast says whether the lean stretch may end after ev: it is later
// than the server's time when the full stream failed.
func (f *follower) leanPast(ev bson.Raw) bool {
	if !f.lean || f.leanUntil.T == 0 {
		return false
	}
	t, i, ok := ev.Lookup("clusterTime").TimestampOK()
	return ok && (t > f.leanUntil.T || t == f.leanUntil.T && i > f.leanUntil.I)
}

// operationTime is the server's latest cluster time (a ping's
// operationTime), zero when it cannot tell.
func (e *Engine) operationTime(ctx context.Context) bson.Timestamp {
	raw, err := e.source.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Raw()
	if err != nil {
		return bson.Timestamp{}
	}
	t, i, ok := raw.Lookup("operationTime").TimestampOK()
	if !ok {
		return bson.Timestamp{}
	}
	return bson.Timestamp{T: t, I: i}
}

// fillDocs reads, by _id, the documents of the items a lean stream left
// without one (prepare.Item.Fill); one left without is no longer in the
// collection (its delete event follows).
func (e *Engine) fillDocs(ctx context.Context, jc jobConfig, items []prepare.Item) error {
	var want []int
	for i := range items {
		if items[i].Fill {
			want = append(want, i)
		}
	}
	coll := e.source.Collection(jc.job.Collection)
	for lo := 0; lo < len(want); lo += maxFillIDs {
		part := want[lo:min(lo+maxFillIDs, len(want))]
		in := make(bson.A, len(part))
		at := make(map[string]int, len(part))
		for k, i := range part {
			in[k] = items[i].ID
			at[keyOf(items[i].ID)] = i
		}
		for attempt := 0; ; attempt++ {
			err := readByID(ctx, coll, in, retryFind(jc.job), func(doc bson.Raw) {
				if i, ok := at[keyOf(doc.Lookup("_id"))]; ok {
					items[i].Doc = doc
				}
			})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if attempt >= 10 {
				return errs.Wrap(errs.Failed, jc.job.Name, err, "read the documents of changes too large for the stream")
			}
			e.log.Warn("reading documents by _id failed; trying again", "job", jc.job.Name, "error", err, "attempt", attempt+1)
			if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
				return err
			}
		}
		for _, i := range part {
			items[i].Fill = false
		}
	}
	return nil
}

// readByID calls fn with each document of coll whose _id is in ids (a
// copy the caller may keep), found with opts (the job's fields, as the
// stream's documents are trimmed).
func readByID(ctx context.Context, coll *mongo.Collection, ids bson.A, opts *options.FindOptionsBuilder, fn func(bson.Raw)) error {
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, opts)
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		fn(append(bson.Raw(nil), cur.Current...))
	}
	return cur.Err()
}

// endLean ends the lean stretch once an event past its end was read, or
// (idle) once the stream is caught up after reading at least one event:
// the full stream reopens after the last event read. A stretch that read
// nothing does not end on an idle batch (an empty first batch says little,
// and the event the full stream failed on is still ahead); its next
// getMore meets that event, or an error that is not one.
func (f *follower) endLean(ctx context.Context, idle bool) error {
	if !f.lean || !f.leanDone && !(idle && f.leanRead > 0) {
		return nil
	}
	f.reader.Close()
	f.lean, f.leanDone, f.leanUntil, f.leanRead = false, false, bson.Timestamp{}, 0
	f.log.Info("past the change event too large to read with its documents: reading the stream with them again")
	return f.open(ctx)
}
