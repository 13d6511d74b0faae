package supervisor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

func TestFairShare(t *testing.T) {
	for _, c := range []struct{ jobs, pods, want int }{
		{6, 1, 6}, {6, 2, 3}, {6, 3, 2}, {7, 3, 3}, {1, 3, 1}, {0, 2, 0}, {6, 0, 6}, {5, 10, 1},
	} {
		if got := supervisor.FairShare(c.jobs, c.pods); got != c.want {
			t.Errorf("FairShare(%d jobs, %d pods) = %d, want %d", c.jobs, c.pods, got, c.want)
		}
	}
}

// shareDriver is one pod of a deployment whose other pods the test plays:
// a job's lease is free to take unless the test gave it to another pod;
// Standby honours HoldOff as the production driver does, and notes it.
type shareDriver struct {
	mu       sync.Mutex
	others   map[string]bool // held by another pod
	holdOffs map[string]int  // Standby attempts held off, per job
	running  map[string]bool
	run      func(ctx context.Context, def supervisor.JobDef, st *supervisor.SupervisedJob) error
}

func newShareDriver() *shareDriver {
	d := &shareDriver{others: map[string]bool{}, holdOffs: map[string]int{}, running: map[string]bool{}}
	d.run = func(ctx context.Context, def supervisor.JobDef, st *supervisor.SupervisedJob) error {
		st.Stats.SetPhase(status.PhaseFollowing)
		<-ctx.Done()
		st.Stats.SetPhase(status.PhaseIdle)
		return nil
	}
	return d
}

func (d *shareDriver) Standby(ctx context.Context, def supervisor.JobDef, w supervisor.Standing) (supervisor.HeldLease, error) {
	for {
		if off := w.HoldOff(); off > 0 {
			d.mu.Lock()
			d.holdOffs[def.Name]++
			d.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(off):
			}
		}
		d.mu.Lock()
		other := d.others[def.Name]
		d.mu.Unlock()
		if !other {
			return &fakeLease{epoch: 1}, nil
		}
		w.Held(errs.New(errs.Running, def.Name, "lease held by other:1:x"))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (d *shareDriver) Run(ctx context.Context, def supervisor.JobDef, h supervisor.HeldLease, st *supervisor.SupervisedJob) error {
	d.mu.Lock()
	d.running[def.Name] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.running[def.Name] = false
		d.mu.Unlock()
	}()
	return d.run(ctx, def, st)
}

// giveToOthers hands every job this pod does not run to the other pods,
// as a standby of theirs would take a free lease first.
func (d *shareDriver) giveToOthers(names []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range names {
		if !d.running[n] {
			d.others[n] = true
		}
	}
}

func heldCount(s *supervisor.Supervisor) int {
	n := 0
	for _, j := range s.Jobs() {
		if j.Held {
			n++
		}
	}
	return n
}

func jobDefs(names ...string) []supervisor.JobDef {
	var defs []supervisor.JobDef
	for _, n := range names {
		defs = append(defs, supervisor.JobDef{Name: n, Hash: "1"})
	}
	return defs
}

func TestPodsShareTheJobs(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f"}
	var pods atomic.Int32
	pods.Store(1)
	d := newShareDriver()
	s := supervisor.New(supervisor.Config{
		Driver:          d,
		RestartMin:      5 * time.Millisecond,
		RestartMax:      40 * time.Millisecond,
		Peers:           func(context.Context) (int, error) { return int(pods.Load()), nil },
		BalanceInterval: 5 * time.Millisecond,
		HoldOff:         time.Hour, // only the test's pods take the jobs given back
	})
	defer closeSupervisor(t, s)
	s.Apply(jobDefs(names...))
	describe := func() string { return fmt.Sprintf("%+v", s.Jobs()) }
	eventually(t, "alone, the pod holds every job", func() bool { return heldCount(s) == 6 }, describe)

	// A second pod: this one gives back down to ceil(6/2) = 3, and never
	// below; a third: down to 2.
	for _, c := range []struct{ pods, want int }{{2, 3}, {3, 2}} {
		pods.Store(int32(c.pods))
		eventually(t, fmt.Sprintf("with %d pods, %d jobs held", c.pods, c.want), func() bool {
			d.giveToOthers(names)
			return heldCount(s) == c.want
		}, describe)
		for range 20 { // a few more rounds: no more is given back
			time.Sleep(5 * time.Millisecond)
			d.giveToOthers(names)
		}
		if n := heldCount(s); n != c.want {
			t.Fatalf("with %d pods, %d jobs held after more rounds, want %d: %s", c.pods, n, c.want, describe())
		}
	}
	// What it gave back, it stands by for (another pod holds it).
	for _, j := range s.Jobs() {
		if !j.Held && j.State != supervisor.StateStandby {
			t.Errorf("%s: %s, want standby", j.Name, j.State)
		}
	}
}

func TestAPodAtItsShareHoldsOffAFreeLeaseButTakesItInTheEnd(t *testing.T) {
	var pods atomic.Int32
	pods.Store(2)
	d := newShareDriver()
	d.others["b"] = true // the other pod holds b: this one holds its share (1 of 2) with a
	s := supervisor.New(supervisor.Config{
		Driver:          d,
		RestartMin:      5 * time.Millisecond,
		RestartMax:      40 * time.Millisecond,
		Peers:           func(context.Context) (int, error) { return int(pods.Load()), nil },
		BalanceInterval: 5 * time.Millisecond,
		HoldOff:         20 * time.Millisecond,
	})
	defer closeSupervisor(t, s)
	s.Apply(jobDefs("a"))
	eventually(t, "a is held", func() bool { return heldCount(s) == 1 }, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	// The other pod dies: b's lease is free. This pod, at its share,
	// holds off before each try, and takes b all the same: no job is left
	// without a holder.
	s.Apply(jobDefs("a", "b"))
	time.Sleep(20 * time.Millisecond) // a few balance rounds: the pods are known
	d.mu.Lock()
	d.others["b"] = false
	d.mu.Unlock()
	eventually(t, "b is taken", func() bool { return heldCount(s) == 2 }, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	d.mu.Lock()
	held := d.holdOffs["b"]
	d.mu.Unlock()
	if held == 0 {
		t.Errorf("b was taken with no hold-off, though this pod held its share")
	}
}

func TestAJobThatIsReindexingIsNotGivenBackForBalance(t *testing.T) {
	var pods atomic.Int32
	pods.Store(1)
	d := newShareDriver()
	d.run = func(ctx context.Context, def supervisor.JobDef, st *supervisor.SupervisedJob) error {
		st.Stats.SetPhase(status.PhaseReindexing)
		<-ctx.Done()
		return nil
	}
	s := supervisor.New(supervisor.Config{
		Driver: d, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond,
		Peers:           func(context.Context) (int, error) { return int(pods.Load()), nil },
		BalanceInterval: 5 * time.Millisecond, HoldOff: time.Hour,
	})
	defer closeSupervisor(t, s)
	s.Apply(jobDefs("a", "b"))
	eventually(t, "both held", func() bool { return heldCount(s) == 2 }, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	pods.Store(2)
	for range 20 {
		time.Sleep(5 * time.Millisecond)
	}
	if n := heldCount(s); n != 2 {
		t.Errorf("%d held, want both: reindexing jobs are not given back", n)
	}
}

func TestAHolderThatMakesNoProgressWhileFailingHandsTheJobOver(t *testing.T) {
	d := newShareDriver()
	var runs atomic.Int32
	d.run = func(ctx context.Context, def supervisor.JobDef, st *supervisor.SupervisedJob) error {
		if runs.Add(1) > 1 {
			// Taken again after the hold-off: it works now.
			st.Stats.SetPhase(status.PhaseFollowing)
			<-ctx.Done()
			return nil
		}
		// Following, and every send fails: retries, no batch durable.
		st.Stats.SetPhase(status.PhaseFollowing)
		for {
			st.Stats.Update(func(s *status.JobSnapshot) {
				s.Retries++
				s.LastError, s.LastErrAt = "send batch: dial tcp: i/o timeout", time.Now()
			})
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Millisecond):
			}
		}
	}
	m := &stallMetrics{}
	s := supervisor.New(supervisor.Config{
		Driver: d, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond,
		BalanceInterval: 5 * time.Millisecond, HoldOff: 100 * time.Millisecond,
		StallTimeout: 30 * time.Millisecond, Metrics: m,
	})
	defer closeSupervisor(t, s)
	s.Apply(jobDefs("a"))
	eventually(t, "the job is handed over and shows stalled", func() bool {
		j := jobState(s, "a")
		return j.State == supervisor.StateStalled && !j.Held
	}, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	j := jobState(s, "a")
	if !strings.Contains(j.LastError, "no progress for 30ms while its sends or reads kept being retried (last: send batch: dial tcp: i/o timeout)") {
		t.Errorf("last error %q", j.LastError)
	}
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "job a stalled") {
		t.Errorf("Ready = %v, want the stall named", err)
	}
	if m.stalls.Load() != 1 {
		t.Errorf("%d stalls counted, want 1", m.stalls.Load())
	}
	// Nobody else took it: after the hold-off this pod tries again.
	eventually(t, "the job runs again", func() bool { return runs.Load() == 2 && jobState(s, "a").Held },
		func() string { return fmt.Sprintf("%+v", s.Jobs()) })
}

func TestAQuietJobIsNotStalled(t *testing.T) {
	d := newShareDriver()
	m := &stallMetrics{}
	s := supervisor.New(supervisor.Config{
		Driver: d, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond,
		BalanceInterval: time.Millisecond, StallTimeout: 5 * time.Millisecond, Metrics: m,
	})
	defer closeSupervisor(t, s)
	s.Apply(jobDefs("a"))
	eventually(t, "a is held", func() bool { return heldCount(s) == 1 }, func() string { return fmt.Sprintf("%+v", s.Jobs()) })
	for range 30 {
		time.Sleep(2 * time.Millisecond)
	}
	if m.stalls.Load() != 0 || heldCount(s) != 1 {
		t.Errorf("a quiet job was handed over: %d stalls, %+v", m.stalls.Load(), s.Jobs())
	}
}

type stallMetrics struct {
	noopMetrics
	stalls atomic.Int32
}

func (m *stallMetrics) ObserveStall(string) { m.stalls.Add(1) }

type noopMetrics struct{}

func (noopMetrics) ObserveJob(string, string)          {}
func (noopMetrics) ObserveState(string, string)        {}
func (noopMetrics) ObserveLease(string, bool, int64)   {}
func (noopMetrics) ObserveRestart(string)              {}
func (noopMetrics) ObserveTransformError(string, bool) {}
func (noopMetrics) ObserveError(string, string)        {}
func (noopMetrics) Forget(string)                      {}
