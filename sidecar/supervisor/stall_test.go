package supervisor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// A job whose engine found its pending work not moving (the watchdog) is
// "stalled" in /status, with what is pending, and /readyz fails naming
// it; once the work moves again it is following and ready.
func TestAStalledJobIsShownAndFailsReadiness(t *testing.T) {
	d := statsDriver{fakeDriver: newFakeDriver(nil), step: make(chan func(*status.JobStats))}
	s := supervisor.New(supervisor.Config{Driver: d})
	defer closeSupervisor(t, s)
	s.Apply([]supervisor.JobDef{{Name: "books", Kind: "search", Hash: "1"}})
	d.step <- func(st *status.JobStats) {
		st.SetPhase(status.PhaseFollowing)
		st.LagReset()
	}
	eventually(t, "books following", func() bool { return s.Status()[0].State == status.Following }, func() string { return s.Status()[0].State })
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("following: not ready: %v", err)
	}
	since := time.Now().Add(-time.Minute)
	d.step <- func(st *status.JobStats) {
		st.Update(func(s *status.JobSnapshot) {
			s.Stall = &status.Stall{Pending: "2 changes or related values waiting for a flush", Since: since, BoundSeconds: 30}
		})
	}
	eventually(t, "books stalled", func() bool { return s.Status()[0].State == status.Stalled }, func() string { return s.Status()[0].State })
	js, _ := json.Marshal(s.Status()[0])
	if !strings.Contains(string(js), `"pending":"2 changes or related values waiting for a flush"`) || !strings.Contains(string(js), `"bound_seconds":30`) {
		t.Errorf("stalled job's status says not what is pending: %s", js)
	}
	err := s.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "job books stalled") || !strings.Contains(err.Error(), "waiting for a flush") {
		t.Fatalf("stalled: Ready says %v; want the job named with what is pending", err)
	}
	d.step <- func(st *status.JobStats) { st.Update(func(s *status.JobSnapshot) { s.Stall = nil }) }
	eventually(t, "books following again", func() bool { return s.Status()[0].State == status.Following }, func() string { return s.Status()[0].State })
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("moving again: not ready: %v", err)
	}
}
