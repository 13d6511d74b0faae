package meili_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// Once the guard of the context (the lease's own-clock check) says the
// lease lapsed, no request of the sink reaches Meilisearch, neither its
// own (documents, task polls) nor meilisearch-go's (index creation,
// version): the guard's LEASE_LOST comes back instead.
func TestNoRequestGoesOutOnceTheGuardSaysTheLeaseLapsed(t *testing.T) {
	f := startFront(t, meilitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := meili.NewClientWithOptions(f.URL, "", short)
	dst := meili.NewSink(client, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, nil)
	var lapsed atomic.Bool
	lost := errs.New(errs.LeaseLost, "items", "lease lost: no renewal succeeded for 23s (the process was paused or starved)")
	gctx := sink.WithGuard(ctx, func() error {
		if lapsed.Load() {
			return lost
		}
		return nil
	})
	if err := dst.Prepare(gctx); err != nil {
		t.Fatal(err)
	}
	r, err := dst.Send(gctx, sink.Batch{Writes: []sink.Write{write(1, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	f.reset()
	lapsed.Store(true)
	if _, err := dst.Wait(gctx, r); !errors.Is(err, errs.ErrLeaseLost) {
		t.Errorf("wait: %v, want LEASE_LOST", err)
	}
	if _, err := dst.Send(gctx, sink.Batch{Writes: []sink.Write{write(2, "b")}}); !errors.Is(err, errs.ErrLeaseLost) {
		t.Errorf("send: %v, want LEASE_LOST", err)
	}
	if _, err := dst.Stage(gctx, false); err == nil {
		t.Error("stage: no error")
	}
	if _, err := client.Version(gctx); err == nil {
		t.Error("meilisearch-go's version: no error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.seen {
		t.Errorf("%s %s reached Meilisearch after the lease lapsed", r.Method, r.URL.Path)
	}
}
