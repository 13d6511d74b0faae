package engine

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// deadLetterGauge is what a deadLetterSet reports its size to, the job's dead-letter gauge
// (Observer has it).
type deadLetterGauge interface {
	ObserveDeadLetters(job string, n int64)
}

// deadLetterSet is the set of a job's documents with an error record, kept while
// the job runs so that a later successful write of one clears its record
// (the record must not outlive the error) and the dead-letter gauge stays
// current. Documents are one by MongoDB's identity of _ids
// (jobdef.IDKey). Safe for concurrent use; a nil *deadLetterSet does nothing.
type deadLetterSet struct {
	store *jobstate.Store
	job   string
	gauge deadLetterGauge
	mu    sync.Mutex
	m     map[string]bool
	// keepOnly: the set only says which records to keep; writes do not
	// clear records (a staged reindex, before its swap).
	keepOnly bool
}

// loadSet reads the documents of job's error records into a deadLetterSet, and shows
// their number on gauge (nil: none).
func loadSet(ctx context.Context, store *jobstate.Store, job string, gauge deadLetterGauge) (*deadLetterSet, error) {
	ids, err := store.DocErrorIDs(ctx, job)
	if err != nil {
		return nil, err
	}
	s := &deadLetterSet{store: store, job: job, gauge: gauge, m: make(map[string]bool, len(ids))}
	for _, id := range ids {
		s.m[jobdef.IDKey(id)] = true
	}
	s.show(int64(len(s.m)))
	return s, nil
}

// keepSet returns a set that only says which records to keep: those a
// reindex makes, starting with from's documents (nil: none), which it
// takes over. A write never clears a record of it (Candidates finds
// none): into a staged index, records are only known stale once the swap
// is done; then ClearOthers deletes the job's other records and Reset
// makes these the job's set.
func keepSet(store *jobstate.Store, job string, gauge deadLetterGauge, from *deadLetterSet) *deadLetterSet {
	s := &deadLetterSet{store: store, job: job, gauge: gauge, m: map[string]bool{}, keepOnly: true}
	if from != nil {
		s.m = from.m
	}
	return s
}

func (s *deadLetterSet) show(n int64) {
	if s.gauge != nil {
		s.gauge.ObserveDeadLetters(s.job, n)
	}
}

// Add notes that the document id has a record now.
func (s *deadLetterSet) Add(id bson.RawValue) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.m[jobdef.IDKey(id)] = true
	n := len(s.m)
	s.mu.Unlock()
	s.show(int64(n))
}

// Has says whether the document id has an error record.
func (s *deadLetterSet) Has(id bson.RawValue) bool {
	if s == nil {
		return false
	}
	k := jobdef.IDKey(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

// Candidates returns the positions of the writes that may clear a record:
// of a recorded document, and not among failed (the documents whose
// transform failed in the same batch).
func (s *deadLetterSet) Candidates(writes []sink.Write, failed []bson.RawValue) []int {
	if s == nil || s.keepOnly {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) == 0 {
		return nil
	}
	var out []int
	for i := range writes {
		k := jobdef.IDKey(writes[i].SourceID)
		if !s.m[k] {
			continue
		}
		isBad := false
		for _, id := range failed {
			if jobdef.IDKey(id) == k {
				isBad = true
				break
			}
		}
		if !isBad {
			out = append(out, i)
		}
	}
	return out
}

// Cleared clears the records of f's writes at positions, now durable (but
// those the destination refused).
func (s *deadLetterSet) Cleared(ctx context.Context, f *pipe.Flight, positions []int) error {
	if s == nil || len(positions) == 0 {
		return nil
	}
	var ids []bson.RawValue
	for _, i := range positions {
		if !f.IsRefused(i) {
			ids = append(ids, f.Batch.Writes[i].SourceID)
		}
	}
	if _, err := s.store.ClearDocErrors(ctx, s.job, ids); err != nil {
		return err
	}
	s.mu.Lock()
	for _, id := range ids {
		delete(s.m, jobdef.IDKey(id))
	}
	n := len(s.m)
	s.mu.Unlock()
	s.show(int64(n))
	return nil
}

// Reset makes s hold what keep holds (after a swap: the records the
// reindex made are the job's records).
func (s *deadLetterSet) Reset(keep *deadLetterSet) {
	if s == nil || keep == nil {
		return
	}
	keep.mu.Lock()
	m := make(map[string]bool, len(keep.m))
	for k := range keep.m {
		m[k] = true
	}
	keep.mu.Unlock()
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// ClearOthers deletes the job's error records that are not in s (the
// records a swap reindex made): the new index was built without error for
// every other document.
func (s *deadLetterSet) ClearOthers(ctx context.Context) error {
	ids, err := s.store.DocErrorIDs(ctx, s.job)
	if err != nil {
		return err
	}
	var stale []bson.RawValue
	s.mu.Lock()
	for _, id := range ids {
		if !s.m[jobdef.IDKey(id)] {
			stale = append(stale, id)
		}
	}
	n := len(s.m)
	s.mu.Unlock()
	if _, err := s.store.ClearDocErrors(ctx, s.job, stale); err != nil {
		return err
	}
	s.show(int64(n))
	return nil
}
