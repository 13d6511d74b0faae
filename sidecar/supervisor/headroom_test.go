package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// headroomFeed hands the supervisor the reading the test sets.
type headroomFeed struct {
	mu    sync.Mutex
	h     supervisor.Headroom
	reads int
}

func (f *headroomFeed) set(h supervisor.Headroom) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

func (f *headroomFeed) read(context.Context) (supervisor.Headroom, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.h, nil
}

// waitJob polls the supervisor's status until job satisfies ok.
func waitJob(t *testing.T, s *supervisor.Supervisor, job string, what string, ok func(status.Job) bool) status.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last status.Job
	for time.Now().Before(deadline) {
		for _, j := range s.Status() {
			if j.Name == job {
				last = j
				if ok(j) {
					return j
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("job %s: %s not seen; last status %+v", job, what, last)
	return last
}

func TestHeadroomIsTheWindowMinusThePositionsAge(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		<-ctx.Done()
		return nil
	})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feed := &headroomFeed{h: supervisor.Headroom{
		Oldest: base, Newest: base.Add(4 * time.Hour),
		Positions: map[string]time.Time{"books": base.Add(3 * time.Hour), "gone": base},
	}}
	var logs testutil.SyncBuffer
	s := supervisor.New(supervisor.Config{
		Driver:           d,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true}),
		Headroom:         feed.read,
		HeadroomInterval: time.Millisecond,
	})
	t.Cleanup(func() { s.Close(context.Background()) })
	s.Apply([]supervisor.JobDef{{Name: "books", Kind: "search", Hash: "1"}})

	j := waitJob(t, s, "books", "a headroom", func(j status.Job) bool { return j.HeadroomSeconds != nil })
	if *j.PositionAgeSeconds != 3600 || *j.HeadroomSeconds != 3*3600 {
		t.Errorf("position age %v headroom %v, want 3600 and 10800", *j.PositionAgeSeconds, *j.HeadroomSeconds)
	}
	if w, ok := s.OplogWindow(); !ok || w != 4*3600 {
		t.Errorf("OplogWindow() = %v, %v; want 14400, true", w, ok)
	}
	if strings.Contains(logs.String(), "under a quarter") {
		t.Errorf("warned with three quarters of the window left:\n%s", logs.String())
	}

	t.Run("a job whose headroom falls under a quarter of the window is warned about once", func(t *testing.T) {
		feed.set(supervisor.Headroom{
			Oldest: base.Add(2*time.Hour + 30*time.Minute), Newest: base.Add(6 * time.Hour),
			Positions: map[string]time.Time{"books": base.Add(3 * time.Hour)},
		})
		waitJob(t, s, "books", "the fallen headroom", func(j status.Job) bool {
			return j.HeadroomSeconds != nil && *j.HeadroomSeconds == 1800
		})
		// Several readings later, still one warning.
		feed.mu.Lock()
		seen := feed.reads
		feed.mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		for {
			feed.mu.Lock()
			n := feed.reads
			feed.mu.Unlock()
			if n >= seen+3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if n := strings.Count(logs.String(), "under a quarter of the window"); n != 1 {
			t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), `"headroom":"30m0s"`) {
			t.Errorf("the warning does not give the headroom:\n%s", logs.String())
		}
		if strings.Contains(logs.String(), `"job":"gone"`) {
			t.Errorf("warned about a job this process does not run:\n%s", logs.String())
		}
	})

	t.Run("an oplog the user may not read leaves the headroom unknown and says why", func(t *testing.T) {
		feed.set(supervisor.Headroom{
			WindowErr: errors.New(`read the oplog window: not authorized (give the user the "read" role on the "local" database)`),
			Positions: map[string]time.Time{"books": base},
		})
		waitJob(t, s, "books", "no headroom", func(j status.Job) bool { return j.HeadroomSeconds == nil && j.PositionAgeSeconds == nil })
		if _, ok := s.OplogWindow(); ok {
			t.Error("OplogWindow() known without a window")
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), `\"read\" role on the \"local\" database`) {
			if time.Now().After(deadline) {
				t.Fatalf("no warning naming the privilege:\n%s", logs.String())
			}
			time.Sleep(time.Millisecond)
		}
	})
}
