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

// statsDriver runs a job by handing its stats to step, then waiting.
type statsDriver struct {
	*fakeDriver
	step chan func(*status.JobStats)
}

func (d statsDriver) Run(ctx context.Context, _ supervisor.JobDef, _ supervisor.HeldLease, j *supervisor.SupervisedJob) error {
	for {
		select {
		case fn := <-d.step:
			fn(j.Stats)
		case <-ctx.Done():
			return nil
		}
	}
}

// TestReindexRateAndETAAreNullUntilKnown: before the first progress
// measure, /status says null, not 0 (which reads as stalled, or done);
// the lag is null while the job does not follow its stream.
func TestReindexRateAndETAAreNullUntilKnown(t *testing.T) {
	d := statsDriver{fakeDriver: newFakeDriver(nil), step: make(chan func(*status.JobStats))}
	s := supervisor.New(supervisor.Config{Driver: d})
	defer closeSupervisor(t, s)
	s.Apply([]supervisor.JobDef{{Name: "books", Kind: "search", Hash: "1"}})
	d.step <- func(st *status.JobStats) {
		st.SetPhase(status.PhaseReindexing)
		st.Update(func(s *status.JobSnapshot) {
			s.Reindex = status.ReindexProgress{Done: 0, Estimated: 1000, Started: time.Now()}
		})
	}
	eventually(t, "books reindexing", func() bool { return s.Status()[0].State == status.Reindexing }, func() string { return s.Status()[0].State })
	js, _ := json.Marshal(s.Status()[0])
	for _, want := range []string{`"rate":null`, `"eta_seconds":null`, `"lag_seconds":null`, `"total_estimate":1000`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("before the first measure: %s lacks %s", js, want)
		}
	}
	d.step <- func(st *status.JobStats) {
		st.Update(func(s *status.JobSnapshot) { s.Reindex.Done, s.Reindex.Rate, s.Reindex.ETA = 200, 100, 8*time.Second })
		st.LagReset() // the engine follows the stream meanwhile
	}
	eventually(t, "the rate shows", func() bool { return s.Status()[0].Reindex.Rate != nil }, func() string { return "" })
	r := s.Status()[0]
	if *r.Reindex.Rate != 100 || r.Reindex.ETASeconds == nil || *r.Reindex.ETASeconds != 8 || r.LagSeconds == nil || *r.LagSeconds != 0 {
		t.Errorf("after a measure: %+v lag %v", *r.Reindex, r.LagSeconds)
	}
}
