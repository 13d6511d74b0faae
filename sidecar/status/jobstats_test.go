package status_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meilistream/meilistream/sidecar/status"
)

// TestLagIsTheAgeOfTheOldestChangeNotYetDurable pins the one definition
// of lag that /status, the metric and the log share.
func TestLagIsTheAgeOfTheOldestChangeNotYetDurable(t *testing.T) {
	j := status.NewJobStats()
	if s := j.Snapshot(); s.LagKnown || s.LagSeconds != 0 {
		t.Errorf("before the stream opens: known %v, lag %v; want unknown", s.LagKnown, s.LagSeconds)
	}
	j.SetPhase(status.PhaseFollowing)
	j.LagReset()
	if s := j.Snapshot(); !s.LagKnown || s.LagSeconds != 0 {
		t.Errorf("stream open, nothing read: known %v, lag %v; want known, 0", s.LagKnown, s.LagSeconds)
	}
	old := time.Now().Add(-30 * time.Second)
	j.LagPending(old)
	j.LagPending(time.Now()) // a later change of the same batch does not move it
	if s := j.Snapshot(); s.LagSeconds < 30 || s.LagSeconds > 40 {
		t.Errorf("a batch gathered since 30s: lag %v", s.LagSeconds)
	}
	j.LagFlushed()
	j.LagPending(time.Now().Add(-5 * time.Second))
	if s := j.Snapshot(); s.LagSeconds < 30 {
		t.Errorf("the oldest in flight is 30s old: lag %v", s.LagSeconds)
	}
	j.LagDurable()
	if s := j.Snapshot(); s.LagSeconds < 5 || s.LagSeconds > 15 {
		t.Errorf("the 30s batch durable, a 5s one pending: lag %v", s.LagSeconds)
	}
	j.LagFlushed()
	j.LagDurable()
	// A value the engine writes is not kept: the lag is computed.
	j.Update(func(s *status.JobSnapshot) { s.LagSeconds = 33 })
	if s := j.Snapshot(); s.LagSeconds != 0 {
		t.Errorf("everything durable: lag %v, want 0", s.LagSeconds)
	}
	// What the stream has not read counts when larger; a new stream
	// forgets it.
	j.LagUnread(12)
	if s := j.Snapshot(); s.LagSeconds != 12 {
		t.Errorf("12s of changes unread: lag %v", s.LagSeconds)
	}
	j.LagReset()
	if s := j.Snapshot(); s.LagSeconds != 0 {
		t.Errorf("the stream reopened: lag %v, want 0", s.LagSeconds)
	}
	j.SetPhase(status.PhaseReindexing)
	if s := j.Snapshot(); !s.LagKnown {
		t.Errorf("reindexing while the stream is followed: lag unknown")
	}
	j.SetPhase(status.PhaseIdle)
	j.SetPhase(status.PhaseReindexing)
	if s := j.Snapshot(); s.LagKnown {
		t.Errorf("a new run reindexing before its stream opens: lag known")
	}
}

// A job's last error is kept for the process's life and served on every
// /status request: however long its cause's text, what is kept is bounded
// and still valid UTF-8 (cut on a character, marked as cut).
func TestALongErrorIsKeptCut(t *testing.T) {
	j := status.NewJobStats()
	long := strings.Repeat("é", status.MaxErrorText) // two bytes each: the bound falls inside none
	j.SetError(errors.New("x" + long))
	got := j.Snapshot().LastError
	if len(got) > status.MaxErrorText+len("…") || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "xé") {
		t.Fatalf("kept %d bytes (valid UTF-8 %v), ending %q", len(got), utf8.ValidString(got), got[max(0, len(got)-8):])
	}
	j.SetError(errors.New("short"))
	if got := j.Snapshot().LastError; got != "short" {
		t.Fatalf("a short error kept as %q", got)
	}
}

// closed says whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Started tells the end of a run's start: it closes when the engine
// follows or is paused, not while it reindexes (its stream not yet read),
// and at once when it already follows.
func TestStartedClosesWhenTheJobFollowsOrIsPaused(t *testing.T) {
	for _, p := range []status.Phase{status.PhaseFollowing, status.PhasePaused} {
		j := status.NewJobStats()
		c := j.Started()
		j.SetPhase(status.PhaseReindexing)
		if closed(c) {
			t.Errorf("%s: closed while reindexing", p)
		}
		j.SetPhase(p)
		if !closed(c) {
			t.Errorf("%s: not closed", p)
		}
		if !closed(j.Started()) {
			t.Errorf("%s: asked again meanwhile, not closed at once", p)
		}
		j.SetPhase(status.PhaseIdle)
		if closed(j.Started()) {
			t.Errorf("%s: the next run's closed before it follows", p)
		}
	}
}

// A reindex at start goes on past the job's start: once the engine read
// the stream (MarkStarted), Started is closed while the phase is still
// reindexing, and the next run's start is ahead again.
func TestStartedClosesOnceTheStreamIsReadThoughTheReindexGoesOn(t *testing.T) {
	j := status.NewJobStats()
	j.SetPhase(status.PhaseIdle)
	c := j.Started()
	j.SetPhase(status.PhaseReindexing)
	if closed(c) {
		t.Fatal("closed before the stream was read")
	}
	j.MarkStarted()
	if !closed(c) || !closed(j.Started()) {
		t.Fatal("not closed once the stream was read")
	}
	j.MarkStarted() // again: no double close
	j.SetPhase(status.PhaseIdle)
	if closed(j.Started()) {
		t.Fatal("the next run's closed before its stream was read")
	}
}
