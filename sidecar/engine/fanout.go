package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A related change (a document of a collection the job looks up, or a
// relate's namespace) sends again the job's documents that depend on it
// (relatedKeys says which). The follow loop gathers their values as it
// reads the stream, and at each flush hands them to the fan-out reader
// (Fanout) as tasks, one query each ({field: {$in: values}}).
// The reader reads each task's documents in pages between two marks of its
// chain, and the follow loop sends a page at its mark without the
// documents the stream changed meanwhile (onFanMark). Each document's
// lookups are resolved when its batch is prepared, after the related
// change: it goes out with the new related document (or without a deleted
// one).
//
// No position is recorded while a fan-out is outstanding: a crash before
// its last page is durable replays the related change from an earlier
// position, and with it the fan-out.

// startFan starts the fan-out reader (related changes, retries).
func (f *follower) startFan() {
	f.fan = NewFanout(f.source(), f.jc.PageSize)
	f.fan.Begin(f.pctx, f.p.Pipe)
}

// addRelated takes a change to a document of a related collection: the
// values it gives the job's dependencies, to send their dependents again at
// the next flush.
func (f *follower) addRelated(ev bson.Raw, op, coll string) error {
	switch op {
	case "insert", "replace", "update", "delete":
	case "drop":
		f.relatedAll(coll, op)
		return nil
	default:
		return nil
	}
	id, err := ev.LookupErr("documentKey", "_id")
	if err != nil {
		return errs.New(errs.Failed, f.jc.job.Name, "%s event of %s without documentKey._id", op, coll)
	}
	var doc, before bson.Raw
	if fd, err := ev.LookupErr("fullDocument"); err == nil {
		doc, _ = fd.DocumentOK()
	}
	if bd, err := ev.LookupErr("fullDocumentBeforeChange"); err == nil {
		before, _ = bd.DocumentOK()
	}
	if err := f.markUnreached(ev, op, coll, doc, before); err != nil {
		return err
	}
	if f.related == nil {
		f.related = relatedKeys{}
	}
	f.relatedN += f.related.Add(f.deps, coll, doc, before, id)
	f.lastTok = ev.Lookup("_id").Document()
	f.wall = eventWall(ev)
	return nil
}

// relatedAll sends every document of the job again: a related collection
// was dropped or renamed, so none of the job's lookups on it finds anything
// any more.
func (f *follower) relatedAll(coll, op string) {
	f.log.Warn("a related collection was dropped or renamed: sending every document of the job again", "collection", coll, "event", op)
	f.relatedAllPending = true
	f.relatedN++
}

// startFanouts hands the values gathered since the last flush to the
// fan-out reader, one task per query of dependents (relatedKeys.Filters).
func (f *follower) startFanouts() {
	if f.relatedN == 0 || f.fan == nil {
		return
	}
	var tasks []*Task
	for _, filter := range f.related.Filters() {
		tasks = append(tasks, &Task{Filter: filter})
	}
	if f.relatedAllPending {
		tasks = []*Task{{Filter: bson.D{}}}
	}
	f.related, f.relatedN, f.relatedAllPending = nil, 0, false
	f.fanBusy += len(tasks)
	for _, t := range tasks {
		f.fanPending.Add(1)
		f.fan.Tasks() <- t
	}
	f.stats.Update(func(s *status.JobSnapshot) { s.FanOuts += int64(len(tasks)) })
}

// onFanMark acts on a mark of the fan-out reader: the page read before it
// goes to the pipe after the pending changes, without the documents the
// stream changed since the reader's last mark. The last page of a task
// ends it; the last one outstanding records the mark as the position.
func (f *follower) onFanMark(mark string, ev bson.Raw, tok bson.Raw) error {
	c, _ := f.fan.Take(mark)
	changed := f.fan.Changed
	f.fan.Changed = map[string]bool{}
	if c == nil {
		return nil // the opening mark
	}
	if c.Final {
		f.fanBusy--
	}
	if err := f.flush(); err != nil {
		return err
	}
	if c.Task != nil && c.Task.Retry != nil {
		return f.submitRetryPage(c, changed)
	}
	items := notChanged(c.Items, changed)
	jc, stats, e, set := f.jc, f.stats, f.e, f.p.errs
	to, made := f.changeTarget()
	var clear []int
	fl := &pipe.Flight{To: to}
	for _, it := range items {
		fl.Bytes += len(it.Doc)
	}
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		writes, _, bad, err := e.prepareItems(ctx, jc, stats, set, made, items, true, nil)
		if err != nil {
			return err
		}
		fl.Batch = sink.Batch{Writes: writes}
		clear = set.Candidates(writes, failedIDs(bad))
		items = nil
		return nil
	}
	record := f.recordAfter(tok, eventWall(ev))
	fan, final, n := f.fan, c.Final, c.N
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.Cleared(ctx, fl, clear); err != nil {
			return err
		}
		fan.Release(n)
		stats.Update(func(s *status.JobSnapshot) { s.Resent += int64(len(fl.Batch.Writes)) })
		if !final {
			return nil
		}
		f.fanPending.Add(-1)
		return record(ctx, fl)
	}
	return f.p.Submit(fl)
}
