package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

var _ StatusSource = (*Supervisor)(nil)

// Status returns every job's status for /status, sorted by name, from
// memory: the supervisor's state (standby, restarting, failed...) refined by
// the engine's phase (reindexing, following) while the job runs.
func (s *Supervisor) Status() []JobStatus {
	s.mu.Lock()
	jobs := make([]*SupervisedJob, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j.stats)
	}
	s.mu.Unlock()
	out := make([]JobStatus, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, s.jobStatus(j))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func (s *Supervisor) jobStatus(j *SupervisedJob) JobStatus {
	sn := j.Snapshot()
	es := j.Stats.Snapshot()
	st := JobStatus{
		Name:     sn.Name,
		Kind:     j.Kind,
		State:    sn.State,
		Epoch:    sn.Epoch,
		Restarts: sn.Restarts,
		Counters: JobCounters{Indexed: es.Indexed, Deleted: es.Deleted, Skipped: es.Skipped, Errors: es.Errors, Changes: es.Changes},
	}
	switch {
	case sn.Held:
		st.Holder = s.cfg.Holder
	case sn.State == StateStandby:
		st.Holder = s.holderOf(sn.Name)
	}
	if sn.State == StateRunning {
		switch es.Phase {
		case PhaseReindexing:
			st.State = "reindexing"
		case PhaseFollowing:
			st.State = "following"
		default:
			st.State = StateStarting
		}
	}
	if st.State == "following" {
		st.LagSeconds = es.LagSeconds
	}
	if st.State == "reindexing" {
		r := es.Reindex
		st.Reindex = &ReindexStatus{Done: r.Done, TotalEstimate: r.Estimated, Rate: r.Rate, ETASeconds: r.ETA.Seconds(), Resumed: r.Resumed}
	}
	if !es.LastPosition.IsZero() {
		t := es.LastPosition
		st.PositionTime = &t
	}
	if !sn.NextRestart.IsZero() {
		t := sn.NextRestart
		st.NextRestart = &t
	}
	// The later of the supervisor's and the engine's last errors.
	switch {
	case sn.LastError != "" && (es.LastError == "" || !es.LastErrAt.After(sn.LastErrorAt)):
		st.LastError = &ErrorStatus{Code: sn.Code, Message: sn.LastError, At: sn.LastErrorAt}
	case es.LastError != "":
		st.LastError = &ErrorStatus{Code: codeOfText(es.LastError), Message: es.LastError, At: es.LastErrAt}
	}
	return st
}

// codeOfText reads the code an *errs.Error's text starts with ("FAILED
// job: ..."); the engine keeps the text only.
func codeOfText(msg string) string {
	code, _, _ := strings.Cut(msg, " ")
	code = strings.TrimSuffix(code, ":")
	for _, c := range []string{"RUNNING", "LEASE_LOST", "HISTORY_LOST", "ID_MISMATCH", "NOT_A_DOCUMENT", "TRANSFORM_FAILED", "CONFIG_INVALID", "FAILED"} {
		if code == c {
			return c
		}
	}
	return "FAILED"
}

// Ready reports whether the sidecar does its work (/readyz): the servers
// answer (Probe), no job has failed or waits to restart after a failure,
// and no following job has fallen more than StallAfter behind.
func (s *Supervisor) Ready(ctx context.Context) error {
	var problems []string
	if s.cfg.Probe != nil {
		if err := s.cfg.Probe(ctx); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, j := range s.Status() {
		switch {
		case j.State == StateFailed || j.State == StateRestarting:
			msg := "job " + j.Name + " " + j.State
			if j.LastError != nil {
				msg += ": " + j.LastError.Code + " " + firstLine(j.LastError.Message)
			}
			problems = append(problems, msg)
		case j.State == "following" && j.LagSeconds > s.cfg.StallAfter.Seconds():
			problems = append(problems, fmt.Sprintf("job %s stalled: %s behind the change stream", j.Name,
				(time.Duration(j.LagSeconds)*time.Second).String()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
