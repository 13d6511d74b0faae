package meili_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// Once the sink's guard (the lease's own-clock check) says the lease
// lapsed, no request of the sink reaches Meilisearch (documents, task
// polls, index creation): the guard's LEASE_LOST comes back instead.
func TestNoRequestGoesOutOnceTheGuardSaysTheLeaseLapsed(t *testing.T) {
	f := startFront(t, meilitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := meili.NewClientWithOptions(f.URL, "", short)
	var lapsed atomic.Bool
	lost := errs.New(errs.LeaseLost, "items", "lease lost: no renewal succeeded for 23s (the process was paused or starved)")
	guard := sink.NewGuard(func() error {
		if lapsed.Load() {
			return lost
		}
		return nil
	})
	dst := meili.NewSink(client, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, guard, nil)
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(1, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	f.reset()
	lapsed.Store(true)
	if _, err := dst.Wait(ctx, r); !errors.Is(err, errs.ErrLeaseLost) {
		t.Errorf("wait: %v, want LEASE_LOST", err)
	}
	if _, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(2, "b")}}); !errors.Is(err, errs.ErrLeaseLost) {
		t.Errorf("send: %v, want LEASE_LOST", err)
	}
	if _, err := dst.Stage(ctx, false); err == nil {
		t.Error("stage: no error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.seen {
		t.Errorf("%s %s reached Meilisearch after the lease lapsed", r.Method, r.URL.Path)
	}
}

// A sink given no guard (the zero sink.Guard) sends nothing at all: a
// defect that forgot the lease fails at once instead of writing unfenced.
func TestASinkWithoutAGuardSendsNothing(t *testing.T) {
	f := startFront(t, meilitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dst := meili.NewSink(meili.NewClientWithOptions(f.URL, "", short), &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Guard{}, nil)
	if err := dst.Prepare(ctx); err == nil || !strings.Contains(err.Error(), "no lease guard") {
		t.Errorf("prepare: %v, want the missing guard named", err)
	}
	if _, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(1, "a")}}); err == nil {
		t.Error("send: no error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.seen {
		t.Errorf("%s %s reached Meilisearch from a sink without a guard", r.Method, r.URL.Path)
	}
}
