package supervisor_test

import (
	"context"
	"errors"
	"fmt"
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

// fakeLease is a held lease whose loss the test triggers.
type fakeLease struct {
	epoch    int64
	mu       sync.Mutex
	lose     context.CancelCauseFunc
	released bool
}

func (l *fakeLease) Keep(ctx context.Context) (context.Context, func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	l.mu.Lock()
	l.lose = cancel
	l.mu.Unlock()
	return kctx, func() { cancel(context.Canceled) }
}

func (l *fakeLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = true
	return nil
}

func (l *fakeLease) Epoch() int64 { return l.epoch }

func (l *fakeLease) loseIt() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lose(errs.New(errs.LeaseLost, "", "taken over"))
}

// fakeDriver grants leases from a gate per job and runs a test-given func.
type fakeDriver struct {
	mu     sync.Mutex
	gate   map[string]chan struct{} // a job's Standby blocks until its gate is closed (nil: free)
	askErr map[string]error         // a job's Standby fails with this (nil: asks fine)
	run    func(ctx context.Context, def supervisor.JobDef, call int) error
	calls  map[string]int
	leases []*fakeLease
	events []string
}

func newFakeDriver(run func(ctx context.Context, def supervisor.JobDef, call int) error) *fakeDriver {
	return &fakeDriver{gate: map[string]chan struct{}{}, askErr: map[string]error{}, run: run, calls: map[string]int{}}
}

func (d *fakeDriver) Standby(ctx context.Context, def supervisor.JobDef, w supervisor.Standing) (supervisor.HeldLease, error) {
	name := def.Name
	d.mu.Lock()
	g, askErr := d.gate[name], d.askErr[name]
	d.mu.Unlock()
	if askErr != nil {
		return nil, askErr
	}
	if g != nil {
		w.Held(errs.New(errs.Running, name, "lease held by other:2:def until 2026-01-01T00:00:00Z (server time)"))
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	l := &fakeLease{epoch: int64(len(d.leases) + 1)}
	d.leases = append(d.leases, l)
	d.events = append(d.events, "acquire "+name)
	return l, nil
}

func (d *fakeDriver) Run(ctx context.Context, def supervisor.JobDef, h supervisor.HeldLease, _ *supervisor.SupervisedJob) error {
	d.mu.Lock()
	d.calls[def.Name]++
	n := d.calls[def.Name]
	d.events = append(d.events, fmt.Sprintf("run %s %s #%d", def.Name, def.Hash, n))
	d.mu.Unlock()
	return d.run(ctx, def, n)
}

// history lists what the driver was asked, in order.
func (d *fakeDriver) history() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprint(d.events)
}

func (d *fakeDriver) callsOf(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[name]
}

func (d *fakeDriver) lease(i int) *fakeLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i >= len(d.leases) {
		return nil
	}
	return d.leases[i]
}

// eventually polls cond until it holds or 5 s pass, then fails with what
// describe says about the last state.
func eventually(t *testing.T, what string, cond func() bool, describe func() string) {
	t.Helper()
	testutil.Until(t, 5*time.Second, what, cond, describe)
}

func jobState(s *supervisor.Supervisor, name string) supervisor.SupervisedSnapshot {
	for _, j := range s.Jobs() {
		if j.Name == name {
			return j
		}
	}
	return supervisor.SupervisedSnapshot{}
}

func newTestSupervisor(d supervisor.JobDriver) *supervisor.Supervisor {
	return supervisor.New(supervisor.Config{
		Driver:     d,
		RestartMin: 5 * time.Millisecond,
		RestartMax: 40 * time.Millisecond,
	})
}

func closeSupervisor(t *testing.T, s *supervisor.Supervisor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestSupervisor(t *testing.T) {
	t.Run("a failing job restarts with backoff and shows its restarts and last error", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			if call < 4 {
				return errs.New(errs.Failed, def.Name, "boom %d", call)
			}
			<-ctx.Done()
			return nil
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
		eventually(t, "the fourth run is running", func() bool {
			j := jobState(s, "a")
			return d.callsOf("a") == 4 && j.State == supervisor.StateRunning
		}, func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
		j := jobState(s, "a")
		if j.Restarts != 3 || j.Code != "FAILED" || j.LastError == "" {
			t.Errorf("snapshot = %+v, want 3 restarts and the last FAILED error", j)
		}
		closeSupervisor(t, s)
		for i := 0; i < 4; i++ {
			if !d.lease(i).released {
				t.Errorf("lease %d not released", i)
			}
		}
	})

	t.Run("a lost lease sends the job back to standby without counting a restart", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			<-ctx.Done()
			if c := context.Cause(ctx); errors.Is(c, errs.ErrLeaseLost) {
				return errs.Wrap(errs.LeaseLost, def.Name, c, "stop")
			}
			return nil
		})
		gate := make(chan struct{})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
		eventually(t, "the job runs", func() bool { return d.callsOf("a") == 1 }, d.history)
		d.mu.Lock()
		d.gate["a"] = gate // the next Standby waits: another process holds it
		d.mu.Unlock()
		d.lease(0).loseIt()
		eventually(t, "the job stands by", func() bool { return jobState(s, "a").State == supervisor.StateStandby },
			func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
		if j := jobState(s, "a"); j.Restarts != 0 || j.Code != "LEASE_LOST" || j.Held {
			t.Errorf("snapshot = %+v, want no restart, LEASE_LOST, not held", j)
		}
		close(gate)
		eventually(t, "the job runs again", func() bool { return d.callsOf("a") == 2 }, d.history)
		closeSupervisor(t, s)
	})

	t.Run("a job with a bad definition fails alone", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			<-ctx.Done()
			return nil
		})
		s := newTestSupervisor(d)
		bad := errs.New(errs.ConfigInvalid, "bad", "collection must be a string")
		s.Apply([]supervisor.JobDef{{Name: "bad", Hash: "x", Err: bad}, {Name: "good", Hash: "1"}})
		eventually(t, "good runs", func() bool { return jobState(s, "good").State == supervisor.StateRunning },
			func() string { return fmt.Sprintf("%+v", s.Jobs()) })
		// bad's goroutine is independent of good's: good running says nothing
		// about whether bad has reached "failed" yet, so wait for it too.
		eventually(t, "bad fails with CONFIG_INVALID", func() bool {
			j := jobState(s, "bad")
			return j.State == supervisor.StateFailed && j.Code == "CONFIG_INVALID"
		}, func() string { return fmt.Sprintf("%+v", jobState(s, "bad")) })
		if d.callsOf("bad") != 0 {
			t.Errorf("bad ran %d times", d.callsOf("bad"))
		}
		// Fixing the definition starts it.
		s.Apply([]supervisor.JobDef{{Name: "bad", Hash: "y"}, {Name: "good", Hash: "1"}})
		eventually(t, "the fixed job runs", func() bool { return jobState(s, "bad").State == supervisor.StateRunning },
			func() string { return fmt.Sprintf("%+v", s.Jobs()) })
		if d.callsOf("good") != 1 {
			t.Errorf("good ran %d times, want 1 (unchanged jobs keep running)", d.callsOf("good"))
		}
		closeSupervisor(t, s)
	})

	t.Run("a run that panics is restarted like a failure, the others go on", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			if def.Name == "bad" && call == 1 {
				panic("boom")
			}
			<-ctx.Done()
			return nil
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "bad", Hash: "1"}, {Name: "good", Hash: "1"}})
		eventually(t, "bad runs again and good runs", func() bool {
			return d.callsOf("bad") == 2 && jobState(s, "good").State == supervisor.StateRunning
		}, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
		if j := jobState(s, "bad"); j.Restarts != 1 || !strings.Contains(j.LastError, "panic: boom") {
			t.Errorf("bad = %+v, want 1 restart after the panic", j)
		}
		closeSupervisor(t, s)
	})

	t.Run("a CONFIG_INVALID run error is not retried", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			return errs.New(errs.ConfigInvalid, def.Name, "index uid invalid")
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
		eventually(t, "the job is failed", func() bool { return jobState(s, "a").State == supervisor.StateFailed },
			func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
		if d.callsOf("a") != 1 {
			t.Errorf("ran %d times", d.callsOf("a"))
		}
		closeSupervisor(t, s)
	})

	t.Run("a FAILED error around a CONFIG_INVALID is CONFIG_INVALID: not retried either", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			return errs.Wrap(errs.Failed, def.Name, errs.New(errs.ConfigInvalid, def.Name, "index uid invalid"), "prepare the destination")
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
		eventually(t, "the job is failed", func() bool { return jobState(s, "a").State == supervisor.StateFailed },
			func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
		if j := jobState(s, "a"); d.callsOf("a") != 1 || j.Restarts != 0 || j.Code != "CONFIG_INVALID" {
			t.Errorf("ran %d times, state %+v; want one run, no restart, CONFIG_INVALID", d.callsOf("a"), j)
		}
		closeSupervisor(t, s)
	})

	t.Run("changed definitions restart their job, removed ones stop, new ones start", func(t *testing.T) {
		var mu sync.Mutex
		stopped := map[string]int{}
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			<-ctx.Done()
			mu.Lock()
			stopped[def.Name+"@"+def.Hash]++
			mu.Unlock()
			return nil
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}, {Name: "b", Hash: "1"}})
		eventually(t, "both run", func() bool { return d.callsOf("a") == 1 && d.callsOf("b") == 1 }, d.history)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "2"}, {Name: "c", Hash: "1"}})
		eventually(t, "a restarted and c started", func() bool { return d.callsOf("a") == 2 && d.callsOf("c") == 1 }, d.history)
		mu.Lock()
		if stopped["a@1"] != 1 || stopped["b@1"] != 1 {
			t.Errorf("stopped = %v, want a@1 and b@1 stopped once", stopped)
		}
		mu.Unlock()
		names := []string{}
		for _, j := range s.Jobs() {
			names = append(names, j.Name)
		}
		if fmt.Sprint(names) != "[a c]" {
			t.Errorf("jobs = %v, want [a c]", names)
		}
		closeSupervisor(t, s)
	})

	t.Run("Close stops every job, each releasing its lease, and is idempotent", func(t *testing.T) {
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			<-ctx.Done()
			return nil
		})
		gate := make(chan struct{})
		d.gate["waiting"] = gate
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}, {Name: "waiting", Hash: "1"}})
		eventually(t, "a runs and waiting stands by", func() bool {
			return jobState(s, "a").State == supervisor.StateRunning && jobState(s, "waiting").State == supervisor.StateStandby
		}, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
		closeSupervisor(t, s)
		closeSupervisor(t, s)
		if !d.lease(0).released {
			t.Error("lease of a not released")
		}
		for _, j := range s.Jobs() {
			if j.State != supervisor.StateStopped {
				t.Errorf("%s state %s after Close", j.Name, j.State)
			}
		}
	})

	t.Run("Close gives up when its context ends", func(t *testing.T) {
		release := make(chan struct{})
		d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
			<-release // a stuck flush
			return nil
		})
		s := newTestSupervisor(d)
		s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
		eventually(t, "a runs", func() bool { return d.callsOf("a") == 1 }, d.history)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := s.Close(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "jobs not finished: a (") ||
			!strings.Contains(err.Error(), "no position recorded yet") {
			t.Errorf("Close = %v, want deadline exceeded naming job a and what it left", err)
		}
		close(release)
		closeSupervisor(t, s)
	})
}

func TestRestartDelay(t *testing.T) {
	for _, tc := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{3, 0, 4 * time.Second},
		{7, 0, time.Minute},
		{100, 0, time.Minute},
		{1, 0.5, 900 * time.Millisecond},
	} {
		if got := supervisor.RestartDelay(time.Second, time.Minute, tc.n, tc.r); got != tc.want {
			t.Errorf("RestartDelay(1s, 1m, %d, %v) = %v, want %v", tc.n, tc.r, got, tc.want)
		}
	}
}

// A changed file that fails to load leaves the previous version running,
// shown as transform_error on the job, counted, and logged with the job.
func TestSupervisorTransformError(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		<-ctx.Done()
		return nil
	})
	metrics := httpapi.NewMetrics(prometheus.NewRegistry())
	var logs testutil.SyncBuffer
	s := supervisor.New(supervisor.Config{
		Driver:  d,
		Metrics: metrics,
		Logger:  hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true}),
	})
	defer closeSupervisor(t, s)
	s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
	eventually(t, "a runs", func() bool { return jobState(s, "a").State == supervisor.StateRunning },
		func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
	bad := errs.New(errs.TransformFailed, "a", "a.js:7:25: syntax error")
	s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1", LoadErr: bad}})
	s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1", LoadErr: bad}}) // another file changed: not counted again
	st := s.Status()[0]
	if st.State == "stopped" || d.callsOf("a") != 1 {
		t.Errorf("state %s after %d runs, want the first run kept", st.State, d.callsOf("a"))
	}
	if te := st.TransformError; te == nil || te.Code != "TRANSFORM_FAILED" || te.Message != "a.js:7:25: syntax error" {
		t.Errorf("transform_error = %+v", st.TransformError)
	}
	var mm dto.Metric
	if err := metrics.TransformErrors.WithLabelValues("a", "unknown").Write(&mm); err != nil {
		t.Fatal(err)
	}
	if n := mm.GetCounter().GetValue(); n != 1 {
		t.Errorf("reload errors = %v, want 1", n)
	}
	out := logs.String()
	if strings.Count(out, "previous version keeps running") != 1 || !strings.Contains(out, `"job":"a"`) {
		t.Errorf("log = %s, want one line with the job", out)
	}
	s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
	if st := s.Status()[0]; st.TransformError != nil {
		t.Errorf("transform_error after a good load = %+v", st.TransformError)
	}
}

// A job refused for a process-wide setting says to fix it and restart.
func TestSupervisorRestartHint(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		return &errs.Error{Code: errs.ConfigInvalid, Job: def.Name, Setting: "MEILISTREAM_MEILI_API_KEY",
			Msg: fmt.Sprintf("read index %s: Meilisearch refused the API key (MEILISTREAM_MEILI_API_KEY): 403", def.Name)}
	})
	s := newTestSupervisor(d)
	defer closeSupervisor(t, s)
	s.Apply([]supervisor.JobDef{{Name: "a", Hash: "1"}})
	eventually(t, "a failed", func() bool { return jobState(s, "a").State == supervisor.StateFailed },
		func() string { return fmt.Sprintf("%+v", jobState(s, "a")) })
	st := s.Status()[0]
	if st.LastError == nil || st.LastError.Code != "CONFIG_INVALID" ||
		!strings.HasSuffix(st.LastError.Message, "; fix MEILISTREAM_MEILI_API_KEY (or MEILISTREAM_MEILI_API_KEY_FILE) and restart meilistream: it is read only at start") ||
		!strings.HasPrefix(st.LastError.Message, "read index a: Meilisearch refused") {
		t.Errorf("last_error = %+v", st.LastError)
	}
}
