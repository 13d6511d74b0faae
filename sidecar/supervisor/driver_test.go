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
