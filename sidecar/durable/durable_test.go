package durable_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/durable"
)

func TestParse(t *testing.T) {
	good := []struct {
		in   string
		want bson.Timestamp
	}{
		{"1764633600.17", bson.Timestamp{T: 1764633600, I: 17}},
		{"1764633600.017", bson.Timestamp{T: 1764633600, I: 17}},
		{" 1.0 ", bson.Timestamp{T: 1}},
		{"4294967295.4294967295", bson.Timestamp{T: 4294967295, I: 4294967295}},
		{`{"$timestamp":{"t":1764633600,"i":17}}`, bson.Timestamp{T: 1764633600, I: 17}},
		{`{"$timestamp": {"i": 2, "t": 3}}`, bson.Timestamp{T: 3, I: 2}},
	}
	for _, c := range good {
		got, err := durable.Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if err == nil && !strings.HasPrefix(c.in, "{") {
			if again, _ := durable.Parse(durable.Format(got)); again != got {
				t.Errorf("Format(%v) = %q does not parse back", got, durable.Format(got))
			}
		}
	}
	bad := []string{"", "1764633600", "1764633600.", ".17", "1.2.3", "-1.0", "+1.0", "1.-2", "1e3.0", "0x10.0",
		"4294967296.0", "1.4294967296", "yesterday", "1,2",
		`{"$timestamp":{"t":1}}`, `{"$timestamp":{"t":-1,"i":0}}`, `{"$timestamp":{"t":1.5,"i":0}}`,
		`{"$timestamp":{"t":1,"i":0,"x":1}}`, `{"$timestamp":{"t":1,"i":0}} {}`, `{"t":1,"i":0}`, `{"$timestamp":{"t":"1","i":0}}`,
		strings.Repeat("9", 10000) + ".1"}
	for _, in := range bad {
		_, err := durable.Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) accepted it", in)
			continue
		}
		if !strings.Contains(err.Error(), "SECONDS.INCREMENT") || len(err.Error()) > 400 {
			t.Errorf("Parse(%q): %v: want what is accepted, in a short message", in, err)
		}
	}
}

// fakeJobs: every job in known; held says which this process holds.
type fakeJobs struct {
	mu    sync.Mutex
	known map[string]bool
	held  map[string]bool
}

func (f *fakeJobs) Job(name string) (bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.known[name], f.held[name]
}

// fakeSource is a cluster: a clock that every Mark ticks, a recorded
// durable time and whether a lease holder exists.
type fakeSource struct {
	mu      sync.Mutex
	now     bson.Timestamp
	rec     bson.Timestamp
	holder  bool
	markErr error
	marks   atomic.Int64
	reads   atomic.Int64
	// marked, when set, is called with each wait document's time (the
	// holder seeing it in its stream).
	marked func(ts bson.Timestamp)
}

func (f *fakeSource) tick() bson.Timestamp {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now.I++
	return f.now
}

func (f *fakeSource) Mark(ctx context.Context, job string) (bson.Timestamp, error) {
	f.marks.Add(1)
	if f.markErr != nil {
		return bson.Timestamp{}, f.markErr
	}
	ts := f.tick()
	if f.marked != nil {
		f.marked(ts)
	}
	return ts, nil
}

func (f *fakeSource) Recorded(ctx context.Context, job string) (bson.Timestamp, bool, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec, f.holder, nil
}

func (f *fakeSource) record(ts bson.Timestamp) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ts.After(f.rec) {
		f.rec = ts
	}
}

func newWaiter(t *testing.T, jobs *fakeJobs, src *fakeSource, max int) *durable.Waiter {
	w := durable.New(durable.Options{Jobs: jobs, Source: src, MaxWaiters: max, Poll: time.Millisecond})
	t.Cleanup(w.Close)
	return w
}

func justBefore(ts bson.Timestamp) bson.Timestamp { return bson.Timestamp{T: ts.T, I: ts.I - 1} }

func TestWaitOnTheHolderAnswersFromMemory(t *testing.T) {
	jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{"books": true}}
	src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
	w := newWaiter(t, jobs, src, 0)
	// The holder makes a wait document durable once it has seen it: its
	// durable time passes everything before it.
	src.marked = func(ts bson.Timestamp) { go w.Advance("books", justBefore(ts)) }
	write := src.tick()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := w.Wait(ctx, "books", write)
	if err != nil || d.Before(write) {
		t.Fatalf("Wait = %v, %v; want at or after %v", d, err, write)
	}
	if n := src.reads.Load(); n != 0 {
		t.Errorf("the holder read MongoDB %d times; it answers from memory", n)
	}
	// Covered already: no wait document at all.
	before := src.marks.Load()
	if d2, err := w.Wait(ctx, "books", write); err != nil || d2 != d {
		t.Fatalf("second Wait = %v, %v", d2, err)
	}
	if src.marks.Load() != before {
		t.Errorf("a covered wait wrote a wait document")
	}
}

func TestWaitOnAStandbyReadsTheRecordedTime(t *testing.T) {
	jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{}}
	src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
	src.marked = func(ts bson.Timestamp) { src.record(justBefore(ts)) }
	w := newWaiter(t, jobs, src, 0)
	write := src.tick()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := w.Wait(ctx, "books", write)
	if err != nil || d.Before(write) {
		t.Fatalf("Wait = %v, %v; want at or after %v", d, err, write)
	}
	if src.reads.Load() == 0 {
		t.Errorf("the standby never read the recorded time")
	}
}

func TestWaitErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("an unknown job is ErrUnknownJob", func(t *testing.T) {
		w := newWaiter(t, &fakeJobs{}, &fakeSource{}, 0)
		if _, err := w.Wait(ctx, "nosuch", bson.Timestamp{T: 1}); !errors.Is(err, durable.ErrUnknownJob) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a job no process holds is ErrNoHolder, with the recorded time", func(t *testing.T) {
		src := &fakeSource{rec: bson.Timestamp{T: 5, I: 1}}
		w := newWaiter(t, &fakeJobs{known: map[string]bool{"books": true}}, src, 0)
		d, err := w.Wait(ctx, "books", bson.Timestamp{T: 9})
		if !errors.Is(err, durable.ErrNoHolder) || d != src.rec {
			t.Fatalf("Wait = %v, %v", d, err)
		}
		// What is durable is durable, holder or not.
		if d, err := w.Wait(ctx, "books", bson.Timestamp{T: 5}); err != nil || d != src.rec {
			t.Fatalf("covered Wait = %v, %v", d, err)
		}
	})
	t.Run("a deadline is ErrTimeout, with the durable time then", func(t *testing.T) {
		src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true, rec: bson.Timestamp{T: 50}}
		w := newWaiter(t, &fakeJobs{known: map[string]bool{"books": true}}, src, 0)
		tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer tcancel()
		d, err := w.Wait(tctx, "books", bson.Timestamp{T: 60})
		if !errors.Is(err, durable.ErrTimeout) || d != src.rec {
			t.Fatalf("Wait = %v, %v", d, err)
		}
	})
	t.Run("waits beyond MaxWaiters are ErrBusy", func(t *testing.T) {
		src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
		jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{"books": true}}
		w := newWaiter(t, jobs, src, 2)
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Until it has its place (the test's own waits take one).
				for wctx.Err() == nil {
					_, _ = w.Wait(wctx, "books", bson.Timestamp{T: 200})
				}
			}()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			tctx, tcancel := context.WithTimeout(ctx, 5*time.Millisecond)
			_, err := w.Wait(tctx, "books", bson.Timestamp{T: 200})
			tcancel()
			if errors.Is(err, durable.ErrBusy) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a third wait was never refused: %v", err)
			}
		}
		wcancel()
		wg.Wait()
	})
	t.Run("Close ends the waits", func(t *testing.T) {
		src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
		jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{"books": true}}
		w := durable.New(durable.Options{Jobs: jobs, Source: src})
		done := make(chan error, 1)
		go func() { _, err := w.Wait(ctx, "books", bson.Timestamp{T: 200}); done <- err }()
		for src.marks.Load() == 0 {
			select {
			case err := <-done:
				t.Fatalf("Wait returned early: %v", err)
			default:
				time.Sleep(time.Millisecond)
			}
		}
		w.Close()
		if err := <-done; !errors.Is(err, durable.ErrClosed) {
			t.Fatalf("err = %v", err)
		}
	})
}

// A flood of waits writes wait documents one at a time per job, not one
// per waiter, and a time ahead of the cluster's present does not make it
// write them in a loop.
func TestAFloodOfWaitsIsCoalesced(t *testing.T) {
	jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{"books": true}}
	src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
	w := newWaiter(t, jobs, src, 0)
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	src.marked = func(ts bson.Timestamp) {
		if n := inFlight.Add(1); n > most.Load() {
			most.Store(n)
		}
		<-release
		inFlight.Add(-1)
		go w.Advance("books", justBefore(ts))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 500
	write := src.tick()
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.Wait(ctx, "books", write); err != nil {
				errc <- err
			}
		}()
	}
	close(release)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if m := src.marks.Load(); m > 10 {
		t.Errorf("%d waits wrote %d wait documents; want a few", n, m)
	}
	if most.Load() > 1 {
		t.Errorf("%d wait documents were written at once; want one at a time", most.Load())
	}

	before := src.marks.Load()
	fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer fcancel()
	if _, err := w.Wait(fctx, "books", bson.Timestamp{T: 4000000000}); !errors.Is(err, durable.ErrTimeout) {
		t.Fatalf("a wait for a time ahead of the present: %v", err)
	}
	if m := src.marks.Load() - before; m > 10 {
		t.Errorf("a wait for a time ahead of the present wrote %d wait documents in 300ms; want a few", m)
	}
}

// A wait document the holder never sees (written before its stream
// opened) is followed by another while the wait goes on.
func TestAWaitDocumentNotSeenIsWrittenAgain(t *testing.T) {
	jobs := &fakeJobs{known: map[string]bool{"books": true}, held: map[string]bool{"books": true}}
	src := &fakeSource{now: bson.Timestamp{T: 100}, holder: true}
	w := newWaiter(t, jobs, src, 0)
	var seen atomic.Int64
	src.marked = func(ts bson.Timestamp) {
		if seen.Add(1) > 1 {
			go w.Advance("books", justBefore(ts))
		}
	}
	write := src.tick()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, err := w.Wait(ctx, "books", write); err != nil || d.Before(write) {
		t.Fatalf("Wait = %v, %v", d, err)
	}
	if n := src.marks.Load(); n < 2 {
		t.Fatalf("%d wait documents written; want the lost one written again", n)
	}
}
