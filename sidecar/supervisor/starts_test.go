package supervisor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// startDriver grants every lease at once and runs a job in two phases: a
// start, which it counts (inStart now, most at the worst), then following
// until its context ends.
type startDriver struct {
	inStart, most atomic.Int32
	// starting is the start of a job's call-th run (nil: none, it follows
	// at once).
	starting func(ctx context.Context, name string, call int) error

	mu     sync.Mutex
	calls  map[string]int
	leases map[string]*fakeLease // each job's last
}

func newStartDriver(starting func(ctx context.Context, name string, call int) error) *startDriver {
	return &startDriver{starting: starting, calls: map[string]int{}, leases: map[string]*fakeLease{}}
}

func (d *startDriver) Standby(_ context.Context, def supervisor.JobDef, _ supervisor.Standing) (supervisor.HeldLease, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := &fakeLease{epoch: 1}
	d.leases[def.Name] = l
	return l, nil
}

func (d *startDriver) Run(ctx context.Context, def supervisor.JobDef, _ supervisor.HeldLease, st *supervisor.SupervisedJob) error {
	d.mu.Lock()
	d.calls[def.Name]++
	call := d.calls[def.Name]
	d.mu.Unlock()
	n := d.inStart.Add(1)
	for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
	}
	var err error
	func() {
		defer d.inStart.Add(-1) // a start that panics ends too
		if d.starting != nil {
			err = d.starting(ctx, def.Name, call)
		}
	}()
	if err != nil || ctx.Err() != nil {
		return err
	}
	st.Stats.SetPhase(status.PhaseFollowing)
	<-ctx.Done()
	st.Stats.SetPhase(status.PhaseIdle)
	return nil
}

func (d *startDriver) lease(name string) *fakeLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leases[name]
}

// states counts the jobs of s by their /status state.
func states(s *supervisor.Supervisor) map[string]int {
	n := map[string]int{}
	for _, j := range s.Status() {
		n[j.State]++
	}
	return n
}

func defsNamed(names ...string) []supervisor.JobDef {
	var defs []supervisor.JobDef
	for _, n := range names {
		defs = append(defs, supervisor.JobDef{Name: n, Hash: "1"})
	}
	return defs
}

// Twenty jobs, three start slots: each start waits for the test to let it
// go on, one at a time, so every job that could start at once would be
// counted at once.
func TestAtMostMaxStartsJobsStartAtOnce(t *testing.T) {
	proceed := make(chan struct{})
	d := newStartDriver(func(ctx context.Context, _ string, _ int) error {
		select {
		case <-proceed:
		case <-ctx.Done():
		}
		return nil
	})
	s := supervisor.New(supervisor.Config{Driver: d, MaxStarts: 3, Holder: "pod-a", RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond})
	defer closeSupervisor(t, s)
	var names []string
	for i := range 20 {
		names = append(names, fmt.Sprintf("job%02d", i))
	}
	s.Apply(defsNamed(names...))
	describe := func() string {
		return fmt.Sprintf("in start %d (most %d), states %v", d.inStart.Load(), d.most.Load(), states(s))
	}
	testutil.Until(t, 10*time.Second, "3 jobs starting, 17 queued with their leases", func() bool {
		return d.inStart.Load() == 3 && states(s)[status.Queued] == 17
	}, describe)
	for _, j := range s.Status() {
		if j.State == status.Queued && (j.Holder != "pod-a" || j.Epoch != 1) {
			t.Errorf("queued job %s does not show its lease held: %+v", j.Name, j)
		}
	}
	for i := range 20 {
		select {
		case proceed <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("start %d never came: %s", i+1, describe())
		}
	}
	testutil.Until(t, 10*time.Second, "every job follows", func() bool { return states(s)[status.Following] == 20 }, describe)
	if m := d.most.Load(); m != 3 {
		t.Errorf("at most %d jobs were starting at once, want 3", m)
	}
}

// However a start ends (a failure, a panic, the job removed, the lease
// lost while the run does not even return), its slot goes to the job
// queued for it.
func TestAStartSlotIsFreedWhateverEndsTheStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// start is job a's first start, which goes on once released
		// (or, hanging, only once unstuck at the test's end); end makes
		// it end (nil: release it).
		start func(ctx context.Context, release, unstick <-chan struct{}) error
		end   func(s *supervisor.Supervisor, d *startDriver)
	}{
		{
			name: "a start that fails",
			start: func(_ context.Context, release, _ <-chan struct{}) error {
				<-release
				return errs.New(errs.Failed, "a", "open change stream: boom")
			},
		},
		{
			name: "a start that panics",
			start: func(_ context.Context, release, _ <-chan struct{}) error {
				<-release
				panic("boom")
			},
		},
		{
			name: "a job removed while it starts",
			start: func(ctx context.Context, _, _ <-chan struct{}) error {
				<-ctx.Done()
				return nil
			},
			end: func(s *supervisor.Supervisor, _ *startDriver) { s.Apply(defsNamed("b")) },
		},
		{
			name: "a lease lost while the start hangs past its context",
			start: func(ctx context.Context, _, unstick <-chan struct{}) error {
				<-ctx.Done()
				<-unstick
				return context.Cause(ctx)
			},
			end: func(_ *supervisor.Supervisor, d *startDriver) { d.lease("a").loseIt() },
		},
	} {
		t.Run(tc.name+" frees its slot", func(t *testing.T) {
			began := make(chan struct{})
			release, unstick := make(chan struct{}), make(chan struct{})
			d := newStartDriver(func(ctx context.Context, name string, call int) error {
				if name != "a" || call > 1 {
					return nil
				}
				close(began)
				return tc.start(ctx, release, unstick)
			})
			s := supervisor.New(supervisor.Config{Driver: d, MaxStarts: 1, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond})
			defer closeSupervisor(t, s)
			defer close(unstick)
			s.Apply(defsNamed("a"))
			<-began
			s.Apply(defsNamed("a", "b"))
			testutil.Until(t, 10*time.Second, "b queued behind a", func() bool { return jobState(s, "b").State == supervisor.StateQueued },
				func() string { return fmt.Sprintf("%v", s.Status()) })
			if tc.end != nil {
				tc.end(s, d)
			} else {
				close(release)
			}
			testutil.Until(t, 10*time.Second, "b follows", func() bool {
				for _, j := range s.Status() {
					if j.Name == "b" {
						return j.State == status.Following
					}
				}
				return false
			}, func() string { return fmt.Sprintf("%v", s.Status()) })
		})
	}
}
