package pipe_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
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

func (s *fakeSink) Send(_ context.Context, b sink.Batch) (sink.Receipt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSends > 0 {
		s.failSends--
		return nil, errors.New("503")
	}
	s.sends++
	r := &fakeReceipt{n: s.sends}
	for _, w := range b.Writes {
		if m, ok := w.Doc.(map[string]any); ok && m["bad"] == true {
			for j := range b.Writes {
				if !b.Writes[j].Delete {
					r.fail = append(r.fail, j)
				}
			}
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

func (s *fakeSink) Wait(ctx context.Context, r sink.Receipt) ([]sink.DocFailure, error) {
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
		return []sink.DocFailure{{Writes: fr.fail, Code: "invalid_document_fields", Message: "bad"}}, nil
	}
	return nil, nil
}

func (s *fakeSink) Keys(context.Context, func([]bson.RawValue) error) error { return nil }
func (s *fakeSink) Fetch(_ context.Context, ids []bson.RawValue) ([][]byte, error) {
	return make([][]byte, len(ids)), nil
}
func (s *fakeSink) Stage(context.Context, bool) (sink.Staged, error) { return nil, sink.ErrNoStage }
func (s *fakeSink) DiscardStage(context.Context, string) error       { return nil }
func (s *fakeSink) OnDDL(context.Context, string)                    {}
func (s *fakeSink) Enqueued() (int, int64, bool)                     { return 0, 0, false }

func (s *fakeSink) doc(id string) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.docs[rawID(id).String()]
}

func rawID(s string) bson.RawValue {
	t, v, _ := bson.MarshalValue(s)
	return bson.RawValue{Type: t, Value: v}
}

func put(id string, v any) sink.Write {
	return sink.Write{SourceID: rawID(id), Doc: map[string]any{"v": v}}
}

// hooks counts what the pipe reports.
type hooks struct {
	mu               sync.Mutex
	retries, refused int
	upserts, deletes int64
	failOnRefusal    bool
}

func (h *hooks) Retried(string, error, int) { h.mu.Lock(); h.retries++; h.mu.Unlock() }
func (h *hooks) Refused(_ context.Context, id bson.RawValue, code, msg string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused++
	if h.failOnRefusal {
		return fmt.Errorf("document %s refused: %s", id, code)
	}
	return nil
}
func (h *hooks) Settled(_ *pipe.Flight, up, del int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.upserts += up
	h.deletes += del
}

func testPipe(t *testing.T, live sink.Sink, track bool) (*pipe.Pipe, *hooks) {
	t.Helper()
	h := &hooks{}
	p := pipe.New(context.Background(), pipe.Config{
		MaxInFlight: 4,
		QueueBytes:  1 << 20,
		Track:       track,
		Key:         func(id bson.RawValue) string { return string(id.Value) },
		Backoff:     func(int) time.Duration { return time.Millisecond },
	}, live, sink.Unguarded, h)
	t.Cleanup(func() { p.Abort(pipe.Closed) })
	return p, h
}

func TestPipeSendsInOrderRetriesAndRecordsInOrder(t *testing.T) {
	dst := newFakeSink()
	dst.failSends = 3
	p, h := testPipe(t, dst, true)
	var mu sync.Mutex
	var recorded []int
	for i := 0; i < 20; i++ {
		f := &pipe.Flight{Batch: sink.Batch{Writes: []sink.Write{put("k", i), put(fmt.Sprint("d", i), i)}}}
		f.Durable = func(context.Context, *pipe.Flight) error {
			mu.Lock()
			recorded = append(recorded, i)
			mu.Unlock()
			return nil
		}
		if err := p.Submit(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range recorded {
		if r != i {
			t.Fatalf("recorded out of order: %v", recorded)
		}
	}
	if len(recorded) != 20 || dst.doc("k") != 19 {
		t.Fatalf("recorded %d, k=%v", len(recorded), dst.doc("k"))
	}
	if h.retries != 3 || h.upserts != 40 {
		t.Fatalf("retries %d, upserts %d", h.retries, h.upserts)
	}
}

func TestPipeBisectsARefusedTaskToTheBadDocument(t *testing.T) {
	dst := newFakeSink()
	p, h := testPipe(t, dst, true)
	var w []sink.Write
	for i := 0; i < 8; i++ {
		w = append(w, put(fmt.Sprint("d", i), i))
	}
	w[5].Doc = map[string]any{"v": 5, "bad": true}
	if err := p.Submit(&pipe.Flight{Batch: sink.Batch{Writes: w}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(dst.docs) != 7 {
		t.Fatalf("want the 7 good documents, have %v", dst.docs)
	}
	if dst.doc("d5") != nil {
		t.Fatal("bad document written")
	}
	if h.refused != 1 || h.upserts != 7 {
		t.Fatalf("refused %d, upserts %d", h.refused, h.upserts)
	}
}

func TestPipeStopsWhenTheOwnerRefusesARefusal(t *testing.T) {
	dst := newFakeSink()
	p, h := testPipe(t, dst, true)
	h.failOnRefusal = true
	w := []sink.Write{put("a", 1), {SourceID: rawID("bad"), Doc: map[string]any{"v": 0, "bad": true}}}
	if err := p.Submit(&pipe.Flight{Batch: sink.Batch{Writes: w}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err == nil {
		t.Fatal("the pipe went on after its owner refused a refused document")
	}
}

func TestPipeNeverResendsAWriteALaterBatchSuperseded(t *testing.T) {
	dst := newFakeSink()
	release := make(chan struct{})
	dst.hold[1] = release
	p, _ := testPipe(t, dst, true)
	// Batch 1: k=old and a bad document (the task fails whole); batch 2:
	// k=new, sent before batch 1's failure is known. Bisecting batch 1
	// must not send k=old again after k=new.
	b1 := []sink.Write{put("k", "old"), put("x", 1), {SourceID: rawID("bad"), Doc: map[string]any{"v": 0, "bad": true}}}
	if err := p.Submit(&pipe.Flight{Batch: sink.Batch{Writes: b1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Submit(&pipe.Flight{Batch: sink.Batch{Writes: []sink.Write{put("k", "new")}}}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "the second batch sent", func() bool {
		dst.mu.Lock()
		defer dst.mu.Unlock()
		return dst.sends >= 2
	}, nil)
	close(release)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dst.doc("k"); got != "new" {
		t.Fatalf("k = %v, want new; log %v", got, dst.log)
	}
	if got := dst.doc("x"); got != 1 {
		t.Fatalf("x = %v, want 1 (bisected and written); log %v", got, dst.log)
	}
}

// A flight to both destinations lands in both; a staged-only flight in the
// staged one; a control flight runs once everything before it is durable,
// and after it switches the staged destination off, ToBoth means the live
// destination alone.
func TestPipeRoutesFlightsAndRunsControlFlightsAfterEverythingBefore(t *testing.T) {
	live, staged := newFakeSink(), newFakeSink()
	release := make(chan struct{})
	staged.hold[2] = release // the staged-only flight stays in flight
	p, h := testPipe(t, live, true)
	p.SetStaged(staged)
	submit := func(f *pipe.Flight) {
		t.Helper()
		if err := p.Submit(f); err != nil {
			t.Fatal(err)
		}
	}
	submit(&pipe.Flight{To: pipe.ToBoth, Batch: sink.Batch{Writes: []sink.Write{put("a", 1)}}})
	submit(&pipe.Flight{To: pipe.ToStaged, Batch: sink.Batch{Writes: []sink.Write{put("b", 2)}}})
	ran := make(chan struct{})
	submit(&pipe.Flight{Ctl: func(context.Context) error {
		if staged.doc("b") != 2 {
			t.Error("the control flight ran before the flight before it was durable")
		}
		p.SetStaged(nil)
		close(ran)
		return nil
	}})
	submit(&pipe.Flight{To: pipe.ToBoth, Batch: sink.Batch{Writes: []sink.Write{put("c", 3)}}})
	close(release)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	default:
		t.Fatal("the control flight never ran")
	}
	if live.doc("a") != 1 || staged.doc("a") != 1 {
		t.Fatalf("a ToBoth flight: live %v staged %v", live.doc("a"), staged.doc("a"))
	}
	if live.doc("b") != nil || staged.doc("b") != 2 {
		t.Fatalf("a ToStaged flight: live %v staged %v", live.doc("b"), staged.doc("b"))
	}
	if live.doc("c") != 3 || staged.doc("c") != nil {
		t.Fatalf("ToBoth after the switch: live %v staged %v", live.doc("c"), staged.doc("c"))
	}
	// The flight to both counts once.
	if h.upserts != 3 {
		t.Fatalf("upserts %d, want 3", h.upserts)
	}
}

// A lease whose own-clock deadline passed between a batch's prepare and
// its send (a process frozen in between and continued) sends nothing: the
// guard the pipe is given is checked right before the request,
// whatever the sink, and its LEASE_LOST stops the pipe.
func TestPipeSendsNothingOnceTheGuardSaysTheLeaseLapsed(t *testing.T) {
	dst := newFakeSink()
	var lapsed atomic.Bool
	lost := errs.New(errs.LeaseLost, "job", "lease lost: no renewal succeeded for 23s (the process was paused or starved)")
	guard := sink.NewGuard(func() error {
		if lapsed.Load() {
			return lost
		}
		return nil
	})
	p := pipe.New(context.Background(), pipe.Config{MaxInFlight: 4, QueueBytes: 1 << 20, Backoff: func(int) time.Duration { return time.Millisecond }}, dst, guard, &hooks{})
	defer p.Abort(pipe.Closed)
	first := &pipe.Flight{Batch: sink.Batch{Writes: []sink.Write{put("a", 1)}}}
	frozen := &pipe.Flight{Prepare: func(context.Context, *pipe.Flight) error {
		lapsed.Store(true) // the freeze: prepared before, sent after
		return nil
	}, Batch: sink.Batch{Writes: []sink.Write{put("b", 2)}}}
	for _, f := range []*pipe.Flight{first, frozen} {
		if err := p.Submit(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("pipe ended with %v, want LEASE_LOST", err)
	}
	if dst.doc("b") != nil {
		t.Fatal("the batch prepared before the lease lapsed was sent after it")
	}
}
