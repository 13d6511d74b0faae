package supervisor

import (
	"context"
	"errors"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// prepSink fails Prepare while fails > 0; the rest of Sink is not used.
type prepSink struct {
	sink.Sink
	fails int
}

func (s *prepSink) Prepare(context.Context) error {
	if s.fails > 0 {
		s.fails--
		return errs.Wrap(errs.Failed, "people", errors.New("connection refused"), "read index people")
	}
	return nil
}

type prepObserver struct {
	prepSink
	events []string
}

func (s *prepObserver) OnDDL(_ context.Context, event string) { s.events = append(s.events, event) }

// A job retrying its destination's preparation shows the error and the
// attempts in /status; the sink keeps its DDLObserver.
func TestReportingSinkPrepare(t *testing.T) {
	st := &SupervisedJob{Name: "people", Kind: "search", Stats: status.NewJobStats(), m: noMetrics{}}
	st.setState(StateRunning)
	inner := &prepObserver{prepSink: prepSink{fails: 2}}
	s := ReportingSink(inner, st.prepared)
	ctx := context.Background()
	for range 2 {
		if err := s.Prepare(ctx); err == nil {
			t.Fatal("Prepare succeeded while failing")
		}
	}
	sup := New(Config{})
	defer sup.Close(ctx)
	js := sup.jobStatus(st)
	if js.State != status.Unavailable || js.Attempts != 2 || js.LastError == nil || js.LastError.Code != "FAILED" ||
		js.LastError.Message != "read index people: connection refused" {
		t.Errorf("while failing: %+v %+v, want unavailable, 2 attempts, the error", js, js.LastError)
	}
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if js := sup.jobStatus(st); js.Attempts != 0 || js.LastError == nil || js.State != StateStarting {
		t.Errorf("after success: %+v, want starting again, no attempts, the last error kept", js)
	}
	o, ok := s.(sink.DDLObserver)
	if !ok {
		t.Fatal("the wrapper lost the sink's DDLObserver")
	}
	o.OnDDL(ctx, "drop")
	if len(inner.events) != 1 {
		t.Errorf("OnDDL not passed on: %v", inner.events)
	}
	if _, ok := ReportingSink(&prepSink{}, st.prepared).(sink.DDLObserver); ok {
		t.Error("a sink without OnDDL became a DDLObserver")
	}
}
