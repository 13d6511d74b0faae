package supervisor

import (
	"context"
	"errors"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A job retrying its destination's preparation shows the error and the
// attempts in /status: the engine passes each attempt's outcome to the
// job's prepared (Engine.Run's callback).
func TestPreparedAttemptsShowInStatus(t *testing.T) {
	st := &SupervisedJob{Name: "people", Kind: "search", Stats: status.NewJobStats(), m: noMetrics{}}
	st.setState(StateRunning)
	ctx := context.Background()
	refused := errs.Wrap(errs.Failed, "people", errors.New("connection refused"), "read index people")
	for range 2 {
		st.prepared(refused)
	}
	sup := New(Config{})
	defer sup.Close(ctx)
	js := sup.jobStatus(st)
	if js.State != status.Unavailable || js.Attempts != 2 || js.LastError == nil || js.LastError.Code != "FAILED" ||
		js.LastError.Message != "read index people: connection refused" {
		t.Errorf("while failing: %+v %+v, want unavailable, 2 attempts, the error", js, js.LastError)
	}
	st.prepared(nil)
	if js := sup.jobStatus(st); js.Attempts != 0 || js.LastError == nil || js.State != StateStarting {
		t.Errorf("after success: %+v, want starting again, no attempts, the last error kept", js)
	}
}

// A job whose destination fails to prepare gives its start slot up while
// the engine retries: a Meilisearch that is down must not keep the
// process's other jobs queued.
func TestAFailedPrepareFreesTheStartSlot(t *testing.T) {
	st := &SupervisedJob{Name: "people", Kind: "search", Stats: status.NewJobStats(), m: noMetrics{}}
	sup := New(Config{MaxStarts: 1})
	defer sup.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sup.takeStart(ctx, st); err != nil {
		t.Fatal(err)
	}
	st.prepared(nil)
	if n := len(sup.starts); n != 1 {
		t.Fatalf("after a prepare that succeeded: %d slots taken, want 1 (the job still starts)", n)
	}
	st.prepared(errs.Wrap(errs.Failed, "people", errors.New("connection refused"), "read index people"))
	if n := len(sup.starts); n != 0 {
		t.Errorf("after a prepare that failed: %d slots taken, want 0", n)
	}
	st.prepared(errors.New("again"))
	if n := len(sup.starts); n != 0 {
		t.Errorf("after a second failure: %d slots taken, want 0", n)
	}
}
