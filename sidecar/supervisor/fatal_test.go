package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// A run that fails for good (HISTORY_LOST with onHistoryLost: fail, marked
// by the driver) is not restarted: the job shows failed with its error,
// its lease is released, the error comes out of Fatal once, and the other
// jobs run on until Close stops them as on SIGTERM.
func TestSupervisorFatal(t *testing.T) {
	lost := errs.New(errs.HistoryLost, "books", "the recorded position is older than the server's change history (onHistoryLost: fail); to repair it, run `meilistream reindex books`")
	var stoppedMu sync.Mutex
	stopped := map[string]bool{}
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		if def.Name == "books" {
			return supervisor.MarkFatal(lost)
		}
		<-ctx.Done()
		stoppedMu.Lock()
		stopped[def.Name] = true // flushed and recorded, as on SIGTERM
		stoppedMu.Unlock()
		return nil
	})
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	var logs testutil.SyncBuffer
	s := supervisor.New(supervisor.Config{
		Driver:     d,
		Metrics:    metrics,
		RestartMin: 5 * time.Millisecond,
		RestartMax: 40 * time.Millisecond,
		Logger:     hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true}),
	})
	// As in production: job_state is read from the supervisor's status.
	metrics.SetStatus(s)
	s.Apply([]supervisor.JobDef{{Name: "books", Kind: "search", Hash: "1"}, {Name: "people", Kind: "search", Hash: "1"}})

	var fatal error
	select {
	case fatal = <-s.Fatal():
	case <-time.After(5 * time.Second):
		t.Fatalf("no error on Fatal after 5s; jobs: %+v", s.Jobs())
	}
	if !errors.Is(fatal, supervisor.ErrFatal) || errs.CodeOf(fatal) != errs.HistoryLost || !strings.Contains(errs.Format(fatal), "HISTORY_LOST books:") {
		t.Errorf("Fatal gave %v, want books' HISTORY_LOST", fatal)
	}
	// The supervisor records the state before it reports: no wait needed.
	j := jobState(s, "books")
	if j.State != supervisor.StateFailed || j.Code != "HISTORY_LOST" || j.Restarts != 0 || j.Held ||
		!strings.Contains(j.LastError, "meilistream reindex books") {
		t.Errorf("books = %+v, want failed with HISTORY_LOST and the fix, never restarted, lease not held", j)
	}
	released := 0
	for i := 0; d.lease(i) != nil; i++ {
		l := d.lease(i)
		l.mu.Lock()
		if l.released {
			released++
		}
		l.mu.Unlock()
	}
	if released != 1 {
		t.Errorf("%d leases released before Close, want books' alone: a standby takes it", released)
	}
	err := s.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "job books failed: HISTORY_LOST: ") {
		t.Errorf("Ready = %v, want books failed with HISTORY_LOST", err)
	}
	var m dto.Metric
	if err := metrics.Errors.WithLabelValues("books", "search", "HISTORY_LOST").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("meilistream_errors_total{books,HISTORY_LOST} = %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	if v := gauge(t, reg, "meilistream_job_state", map[string]string{"pipeline": "books", "state": "failed"}); v != 1 {
		t.Errorf("meilistream_job_state{books,failed} = %v, want 1", v)
	}
	eventually(t, "people runs", func() bool { return jobState(s, "people").State == supervisor.StateRunning },
		func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	select {
	case again := <-s.Fatal():
		t.Errorf("Fatal gave a second error: %v", again)
	default:
	}

	closeSupervisor(t, s)
	if d.callsOf("books") != 1 {
		t.Errorf("books ran %d times, want once: a job failed for good is not restarted", d.callsOf("books"))
	}
	stoppedMu.Lock()
	if !stopped["people"] {
		t.Error("people was not stopped cleanly by Close")
	}
	stoppedMu.Unlock()
	for i := 0; d.lease(i) != nil; i++ {
		if !d.lease(i).released {
			t.Errorf("lease %d not released", i)
		}
	}
	out := logs.String()
	if !strings.Contains(out, `"@level":"error","@message":"job failed for good, not restarting it; meilistream shuts down"`) ||
		!strings.Contains(out, `"job":"books"`) || strings.Contains(out, "job failed, restarting") {
		t.Errorf("log = %s, want one error line for books and no restart", out)
	}
}

// The same HISTORY_LOST not marked fatal (the engine's "oplog window shorter
// than a reindex" under onHistoryLost: reindex) is an ordinary failure:
// restarted with backoff, nothing on Fatal.
func TestSupervisorHistoryLostUnmarkedRestarts(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		if call < 3 {
			return errs.New(errs.HistoryLost, def.Name, "the change history (oplog window) is shorter than a reindex of books takes; enlarge the oplog")
		}
		<-ctx.Done()
		return nil
	})
	s := newTestSupervisor(d)
	s.Apply([]supervisor.JobDef{{Name: "books", Hash: "1"}})
	eventually(t, "the third run is running", func() bool {
		return d.callsOf("books") == 3 && jobState(s, "books").State == supervisor.StateRunning
	}, func() string { return fmt.Sprintf("%+v", jobState(s, "books")) })
	if j := jobState(s, "books"); j.Restarts != 2 || j.Code != "HISTORY_LOST" {
		t.Errorf("books = %+v, want 2 restarts after HISTORY_LOST", j)
	}
	select {
	case err := <-s.Fatal():
		t.Errorf("Fatal gave %v for an unmarked error", err)
	default:
	}
	closeSupervisor(t, s)
}

// gauge returns the value of the series of family name whose labels
// include want (NaN when there is none).
func gauge(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return math.NaN()
}
