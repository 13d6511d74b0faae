package engine

import (
	"context"
	"slices"
	"sort"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// A related change whose dependents cannot all be found (a lookup keyed
// on a field other than _id, and no pre-image of the related document:
// unreached) sends only the new value's dependents; the documents
// that matched the old value keep the old join. The docs promise they
// keep it until their own next change or a reindex, so from then on
// every update of the job is judged as if it also touched that
// dependency's field (JudgeUnchanged's stale fields): a document
// whose transform read the lookup (and so its localField) is sent on its
// next change, whatever the change touched. The fields are recorded
// beside the position before anything after the related change is, so a
// restart or another holder keeps the promise too; a reindex started
// after them rewrites every document with its joins of then, and its
// commit forgets them.

// staleJoins are the job's dependency fields whose dependents may hold an
// old join, each with the sequence number of its last mark. The follow
// loop marks them, a reindex's commit (on the pipe) forgets the older
// ones; each change is recorded under mu, so the record is never older
// than what the judge has been told.
type staleJoins struct {
	mu     sync.Mutex
	seq    int64
	fields map[string]int64
	upd    bson.Raw // the judge's updateDescription of fields; nil for none
}

// loadStaleJoins returns the fields recorded beside the job's position.
// They count as marked before any reindex of this run began (a resumed
// reindex may have read its earlier chunks before they were marked).
func (e *Engine) loadStaleJoins(ctx context.Context, job string) (*staleJoins, error) {
	s := &staleJoins{seq: 1, fields: map[string]int64{}}
	pos, err := e.store.ReadPosition(ctx, job)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read position")
	}
	if pos != nil {
		for _, f := range pos.StaleJoins {
			s.fields[f] = s.seq
		}
	}
	s.build()
	return s, nil
}

// since is the sequence number a reindex starting now forgets the marks
// up to when it commits.
func (s *staleJoins) since() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// update is the updateDescription the judge adds to every update (nil:
// none).
func (s *staleJoins) update() bson.Raw {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upd
}

// mark notes fields, recording them (through store, fenced by l) when one
// is new.
func (s *staleJoins) mark(ctx context.Context, store *jobstate.Store, job string, l jobstate.Fence, fields []string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	added := false
	for _, f := range fields {
		if _, ok := s.fields[f]; !ok {
			added = true
		}
		s.fields[f] = s.seq
	}
	if !added {
		return false, nil
	}
	s.build()
	return true, store.RecordStaleJoins(ctx, job, l, s.list())
}

// forget drops the fields last marked at or before seq (a reindex that
// began then committed), recording what is left.
func (s *staleJoins) forget(ctx context.Context, store *jobstate.Store, job string, l jobstate.Fence, seq int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.fields)
	for f, at := range s.fields {
		if at <= seq {
			delete(s.fields, f)
		}
	}
	if len(s.fields) == n {
		return nil
	}
	s.build()
	return store.RecordStaleJoins(ctx, job, l, s.list())
}

func (s *staleJoins) list() []string {
	out := make([]string, 0, len(s.fields))
	for f := range s.fields {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// build makes upd: {updatedFields: {<field>: null, ...}}, the change the
// judge counts every update as also making.
func (s *staleJoins) build() {
	if len(s.fields) == 0 {
		s.upd = nil
		return
	}
	var set bson.D
	for _, f := range s.list() {
		set = append(set, bson.E{Key: f, Value: nil})
	}
	s.upd, _ = bson.Marshal(bson.D{{Key: "updatedFields", Value: set}})
}

// markUnreached marks the dependency fields a related change could not
// find every dependent of (unreached), and says so in the log once
// per new field.
func (f *follower) markUnreached(ev bson.Raw, op, coll string, doc, before bson.Raw) error {
	var upd bson.Raw
	if op == "update" {
		upd, _ = ev.Lookup("updateDescription").DocumentOK()
	}
	fields := unreached(f.deps, coll, op, doc, before, upd)
	if len(fields) == 0 {
		return nil
	}
	added, err := f.stale.mark(f.pctx, f.e.store, f.jc.job.Name, f.l, fields)
	if err != nil {
		return err
	}
	if added {
		f.log.Warn("a related change came without the related document's previous version (no pre-image): the documents that matched its old value keep their old join until their own next change, which is sent whatever it touches, or a reindex; enable changeStreamPreAndPostImages on the related collection to send them at once",
			"collection", coll, "event", op, "fields", slices.Clone(fields))
	}
	return nil
}
