package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/status"
)

// ask writes a request of kind for the job items and waits for its
// answer.
func (e *env) ask(kind, mode string) *jobstate.RetryRequest {
	e.t.Helper()
	id, err := jobstate.RequestOf(e.ctx, e.state, "items", "cli:1:x", time.Minute, kind, mode, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	var got *jobstate.RetryRequest
	until(e.t, kind+" answered", func() bool {
		got, err = jobstate.ReadRequest(e.ctx, e.state, "items", id)
		return err == nil && got != nil && (got.State == jobstate.RequestDone || got.State == jobstate.RequestFailed)
	})
	return got
}

func TestPauseStopsTheJobKeepingItsPositionAndResumeCatchesUp(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.cfg.RetryPoll = 20 * time.Millisecond
	e.cfg.PauseWarnEvery = 50 * time.Millisecond
	var logs testutil.SyncBuffer
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	e.insert(0, 20, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	until(t, "following", func() bool { return r.stats.Snapshot().Phase == status.PhaseFollowing })

	got := e.ask(jobstate.PauseKind, "")
	if got.State != jobstate.RequestDone || got.Holder != "pod-a" || !strings.HasPrefix(got.Note, "paused") {
		t.Fatalf("pause answered %+v, want done by pod-a", got)
	}
	if p, err := jobstate.New(e.state, nil, nil).ReadPause(e.ctx, "items"); err != nil || p == nil || p.PausedBy != "pod-a" {
		t.Fatalf("pause recorded %+v (%v), want by pod-a", p, err)
	}
	if ph := r.stats.Snapshot().Phase; ph != status.PhasePaused {
		t.Fatalf("phase %q, want paused", ph)
	}
	before, err := jobstate.New(e.state, nil, nil).ReadPosition(e.ctx, "items")
	if err != nil || before == nil {
		t.Fatal(before, err)
	}
	e.insert(20, 30, nil)
	until(t, "the paused job's warning", func() bool { return strings.Contains(logs.String(), "still paused") })
	after, err := jobstate.New(e.state, nil, nil).ReadPosition(e.ctx, "items")
	if err != nil || string(after.Token) != string(before.Token) {
		t.Fatalf("the position moved while paused (%v)", err)
	}
	if n := len(e.meili.Documents("items")); n != 20 {
		t.Fatalf("the index holds %d documents while paused, want the 20 from before", n)
	}
	if got := e.ask(jobstate.ReindexKind, ""); got.State != jobstate.RequestFailed || !strings.Contains(got.Error, "paused") {
		t.Fatalf("reindex while paused answered %+v, want refused", got)
	}

	got = e.ask(jobstate.ResumeKind, "")
	if got.State != jobstate.RequestDone || !strings.HasPrefix(got.Note, "resumed after") {
		t.Fatalf("resume answered %+v", got)
	}
	e.settled(job)
	e.equal(job)
	if p, _ := jobstate.New(e.state, nil, nil).ReadPause(e.ctx, "items"); p != nil {
		t.Fatalf("still recorded as paused: %+v", p)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
