package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// fakeSink behaves like a Meilisearch index for the pipe: a Send is a task
// applied at once, in order, unless it holds a document marked bad (then
// the whole task fails and nothing of it is applied, as Meilisearch does).
type fakeSink struct {
	mu        sync.Mutex
	docs      map[string]any
	sends     int
	failSends int                   // fail this many Sends (transient) first
	hold      map[int]chan struct{} // Wait of the n-th send (1-based) blocks until closed
	log       []string
}

type fakeReceipt struct {
	n    int
	fail []int
}

func newFakeSink() *fakeSink { return &fakeSink{docs: map[string]any{}, hold: map[int]chan struct{}{}} }

func (s *fakeSink) Prepare(context.Context) error { return nil }

func (s *fakeSink) Send(_ context.Context, b Batch) (Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSends > 0 {
		s.failSends--
		return nil, errors.New("503")
	}
	s.sends++
	r := &fakeReceipt{n: s.sends}
	for i, w := range b.Writes {
		if m, ok := w.Doc.(map[string]any); ok && m["bad"] == true {
			for j := range b.Writes {
				if !b.Writes[j].Delete {
					r.fail = append(r.fail, j)
				}
			}
			_ = i
			return r, nil
		}
	}
	for _, w := range b.Writes {
		k := w.SourceID.String()
		if w.Delete {
			delete(s.docs, k)
			s.log = append(s.log, "del "+k)
		} else {
			s.docs[k] = w.Doc.(map[string]any)["v"]
			s.log = append(s.log, fmt.Sprintf("put %s=%v", k, s.docs[k]))
		}
	}
	return r, nil
}

func (s *fakeSink) Wait(ctx context.Context, r Receipt) ([]DocFailure, error) {
	fr := r.(*fakeReceipt)
	s.mu.Lock()
	ch := s.hold[fr.n]
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if len(fr.fail) > 0 {
		return []DocFailure{{Writes: fr.fail, Code: "invalid_document_fields", Message: "bad"}}, nil
	}
	return nil, nil
}

func (s *fakeSink) Keys(context.Context, func([]bson.RawValue) error) error { return nil }
func (s *fakeSink) Stage(context.Context, bool) (Staged, error)             { return nil, ErrNoStage }

func rawID(s string) bson.RawValue {
	t, v, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: t, Value: v}
}

func put(id string, v any) Write {
	return Write{SourceID: rawID(id), Doc: map[string]any{"v": v}}
}

func testPipe(t *testing.T, sink Sink, track bool) (*pipe, *status.JobStats) {
	t.Helper()
	e := New(nil, nil, nil, Config{RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond}, nil, nil)
	st := status.NewJobStats()
	p := e.newPipe(context.Background(), e.jobCfg(&transform.Job{Name: "t"}), sink, st, e.log, track)
	t.Cleanup(func() { p.abort(errPipeClosed) })
	return p, st
}

func TestPipeSendsInOrderRetriesAndRecordsInOrder(t *testing.T) {
	sink := newFakeSink()
	sink.failSends = 3
	p, st := testPipe(t, sink, true)
	var mu sync.Mutex
	var recorded []int
	for i := 0; i < 20; i++ {
		i := i
		f := &flight{batch: Batch{Writes: []Write{put("k", i), put(fmt.Sprint("d", i), i)}}}
		f.durable = func(context.Context, *flight) error {
			mu.Lock()
			recorded = append(recorded, i)
			mu.Unlock()
			return nil
		}
		if err := p.submit(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range recorded {
		if r != i {
			t.Fatalf("recorded out of order: %v", recorded)
		}
	}
	if len(recorded) != 20 || sink.docs[rawID("k").String()] != 19 {
		t.Fatalf("recorded %d, k=%v", len(recorded), sink.docs[rawID("k").String()])
	}
	if s := st.Snapshot(); s.Retries != 3 || s.Indexed != 40 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPipeBisectsARefusedTaskToTheBadDocument(t *testing.T) {
	sink := newFakeSink()
	p, st := testPipe(t, sink, true)
	var w []Write
	for i := 0; i < 8; i++ {
		w = append(w, put(fmt.Sprint("d", i), i))
	}
	w[5].Doc = map[string]any{"v": 5, "bad": true}
	if err := p.submit(&flight{batch: Batch{Writes: w}}); err != nil {
		t.Fatal(err)
	}
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if len(sink.docs) != 7 {
		t.Fatalf("want the 7 good documents, have %v", sink.docs)
	}
	if _, ok := sink.docs[rawID("d5").String()]; ok {
		t.Fatal("bad document written")
	}
	if s := st.Snapshot(); s.Errors != 1 || s.Indexed != 7 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPipeNeverResendsAWriteALaterBatchSuperseded(t *testing.T) {
	sink := newFakeSink()
	release := make(chan struct{})
	sink.hold[1] = release
	p, _ := testPipe(t, sink, true)
	// Batch 1: k=old and a bad document (the task fails whole); batch 2:
	// k=new, sent before batch 1's failure is known. Bisecting batch 1
	// must not send k=old again after k=new.
	b1 := []Write{put("k", "old"), put("x", 1), {SourceID: rawID("bad"), Doc: map[string]any{"v": 0, "bad": true}}}
	if err := p.submit(&flight{batch: Batch{Writes: b1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.submit(&flight{batch: Batch{Writes: []Write{put("k", "new")}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sink.mu.Lock()
		n := sink.sends
		sink.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("second batch never sent")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.docs[rawID("k").String()]; got != "new" {
		t.Fatalf("k = %v, want new; log %v", got, sink.log)
	}
	if got := sink.docs[rawID("x").String()]; got != 1 {
		t.Fatalf("x = %v, want 1 (bisected and written); log %v", got, sink.log)
	}
}
