package supervisor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// olderDriver plays a pod whose transform is older than the one a live pod
// runs. The first Standby takes the lease at once and the first Run finds
// the newer pod (it appeared between the check and the lease); later
// Standbys find it at every poll (held with ErrTransformOlder) until free
// is closed; the next Run runs until stopped. It keeps
// presence records and counts what the supervisor reports.
type olderDriver struct {
	free chan struct{}
	why  error

	mu       sync.Mutex
	standbys int
	runs     int
	leases   []*fakeLease
	waiting  []string // what the presence record was told, in order
	closed   bool
	errCodes []string
}

func (d *olderDriver) Standby(ctx context.Context, def supervisor.JobDef, w supervisor.Standing) (supervisor.HeldLease, error) {
	d.mu.Lock()
	d.standbys++
	n := d.standbys
	d.mu.Unlock()
	if n > 1 {
		for range 5 { // every poll finds the newer pod live
			w.Held(d.why)
		}
		select {
		case <-d.free:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	l := &fakeLease{epoch: int64(len(d.leases) + 1)}
	d.leases = append(d.leases, l)
	return l, nil
}

func (d *olderDriver) Run(ctx context.Context, def supervisor.JobDef, h supervisor.HeldLease, _ *supervisor.SupervisedJob) error {
	d.mu.Lock()
	d.runs++
	n := d.runs
	d.mu.Unlock()
	if n == 1 {
		return d.why
	}
	<-ctx.Done()
	return nil
}

func (d *olderDriver) KeepPresence(def supervisor.JobDef) supervisor.Presence {
	return (*olderPresence)(d)
}

type olderPresence olderDriver

func (p *olderPresence) Waiting(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.waiting); n == 0 || p.waiting[n-1] != reason {
		p.waiting = append(p.waiting, reason)
	}
}

func (p *olderPresence) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// The supervisor.Metrics of the test: only errors are looked at.
func (d *olderDriver) ObserveJob(string, string)          {}
func (d *olderDriver) ObserveState(string, string)        {}
func (d *olderDriver) ObserveLease(string, bool, int64)   {}
func (d *olderDriver) ObserveStall(string)                {}
func (d *olderDriver) ObserveRestart(string)              {}
func (d *olderDriver) ObserveTransformError(string, bool) {}
func (d *olderDriver) Forget(string)                      {}
func (d *olderDriver) ObserveError(job, code string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errCodes = append(d.errCodes, code)
}

func TestWaitingForANewerTransformIsAStandbyNotAFailure(t *testing.T) {
	why := errs.Wrap(errs.Failed, "books", engine.ErrTransformOlder, "this process's transform books.js (hash aaa) is the one replaced by the recorded transform (hash bbb), which pod-b runs: standing by")
	d := &olderDriver{free: make(chan struct{}), why: why}
	var logs testutil.SyncBuffer
	s := supervisor.New(supervisor.Config{
		Driver: d, Metrics: d, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs}),
	})
	s.Apply([]supervisor.JobDef{{Name: "books", Hash: "aaa"}})
	eventually(t, "standing by for the newer pod", func() bool {
		j := jobState(s, "books")
		return j.State == supervisor.StateStandby && j.Waiting != ""
	}, func() string { return fmt.Sprintf("%+v", jobState(s, "books")) })
	j := jobState(s, "books")
	st := s.Status()[0]
	if j.Restarts != 0 || j.LastError != "" || st.Waiting != j.Waiting || !strings.Contains(st.Waiting, "which pod-b runs") || st.LastError != nil {
		t.Fatalf("snapshot %+v, status %+v: want standby, waiting for pod-b, no error and no restart", j, st)
	}

	// Its file updates (or pod-b goes): it takes the lease and runs.
	close(d.free)
	eventually(t, "running", func() bool { return jobState(s, "books").State == supervisor.StateRunning },
		func() string { return fmt.Sprintf("%+v", jobState(s, "books")) })
	if j := jobState(s, "books"); j.Waiting != "" {
		t.Fatalf("running and still waiting: %+v", j)
	}
	closeSupervisor(t, s)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errCodes) != 0 {
		t.Errorf("errors counted while waiting: %v", d.errCodes)
	}
	if n := strings.Count(logs.String(), "standing by for a process with a newer transform"); n != 1 {
		t.Errorf("the wait is logged %d times, want once:\n%s", n, logs.String())
	}
	if !slices.Contains(d.waiting, st.Waiting) || d.waiting[len(d.waiting)-1] != "" || !d.closed {
		t.Errorf("presence told %q, closed %v: want the reason, then none once running, closed at the end", d.waiting, d.closed)
	}
}
