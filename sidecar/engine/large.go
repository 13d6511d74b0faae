package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
)

// Change events over 16 MB: where the server cannot split them, the
// follow loop reads a stretch of the stream lean (stream.Large), and the
// documents of its events by _id when it flushes (fillDocs).

// maxFillIDs bounds the _ids of one query reading a lean stretch's
// documents.
const maxFillIDs = 1000

// tooLarge acts on a stream error saying an event was too large: the lean
// stretch begins (nil: reopen), or, when it was already lean, the job
// stops.
func (f *follower) tooLarge(ctx context.Context, err error) error {
	if err := f.large.TooLarge(ctx, f.e.source, f.jc.job.Name, err); err != nil {
		return err
	}
	f.log.Warn("a change event is too large for MongoDB to return with its documents: reading the stream on without them, and the documents by _id, until past it",
		"split_large_event", f.large.Split(), "error", err)
	f.stats.Update(func(s *status.JobSnapshot) { s.NoteError(err) })
	return nil
}

// fillDocs reads, by _id, the documents of the items a lean stream left
// without one (Item.Fill); one left without is no longer in the
// collection (its delete event follows).
func (e *Engine) fillDocs(ctx context.Context, jc jobConfig, items []Item) error {
	var want []int
	for i := range items {
		if items[i].Fill {
			want = append(want, i)
		}
	}
	coll := jobColl(e.source, &jc.job.Job)
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

// endLean ends the lean stretch when it may end (stream.Large.End): the
// full stream reopens after the last event read.
func (f *follower) endLean(ctx context.Context, idle bool) error {
	if !f.large.End(idle) {
		return nil
	}
	f.reader.Close()
	f.log.Info("past the change event too large to read with its documents: reading the stream with them again")
	return f.open(ctx)
}
