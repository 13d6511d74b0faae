package supervisor

import (
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A job that fails (a bad definition) gets its error and the "failed"
// state in one step: /status never shows "starting" with CONFIG_INVALID.
func TestSupervisedJobFailedIsOneStep(t *testing.T) {
	bad := errs.New(errs.ConfigInvalid, "people", "a mirror job needs a replica")
	for i := 0; i < 200; i++ {
		st := &SupervisedJob{Name: "people", Kind: "search", Stats: status.NewJobStats(), m: noMetrics{}}
		st.setState(StateStarting)
		done := make(chan struct{})
		go func() {
			defer close(done)
			st.failed(bad)
		}()
		for {
			sn := st.Snapshot()
			if sn.State == StateStarting && sn.LastError != "" {
				t.Fatalf("run %d: state %q shown with error %q", i, sn.State, sn.LastError)
			}
			if sn.State == StateFailed {
				if sn.Code != string(errs.ConfigInvalid) || sn.LastErrorAt.IsZero() {
					t.Fatalf("run %d: failed with code %q at %v", i, sn.Code, sn.LastErrorAt)
				}
				break
			}
		}
		<-done
	}
}
