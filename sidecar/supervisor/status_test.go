package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestSupervisorStatus(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
		if def.Name == "flaky" {
			return errs.New(errs.Failed, def.Name, "meilisearch unreachable")
		}
		<-ctx.Done()
		return nil
	})
	gate := make(chan struct{})
	d.gate["waiting"] = gate
	d.askErr["unreachable"] = errs.Wrap(errs.Failed, "unreachable", errors.New("server selection error: connection refused"), "acquire lease")
	d.askErr["denied"] = supervisor.MongoAccessError("denied", mongo.CommandError{Code: 18, Name: "AuthenticationFailed", Message: "Authentication failed."})
	probeErr := errors.New("mongodb: connection refused")
	var probe atomic.Pointer[error]
	probe.Store(new(error))
	s := supervisor.New(supervisor.Config{
		Driver:     d,
		Holder:     "me:1:abc",
		RestartMin: time.Hour, // stays "restarting" for the test
		Probe:      func(context.Context) error { return *probe.Load() },
		ProbeTTL:   time.Nanosecond, // every Ready probes again
		Holders: func(context.Context) (map[string]string, error) {
			return map[string]string{"waiting": "other:2:def"}, nil
		},
		HoldersInterval: 5 * time.Millisecond,
	})
	defer closeSupervisor(t, s)
	s.Apply([]supervisor.JobDef{
		{Name: "ok", Kind: "search", Hash: "1"},
		{Name: "flaky", Kind: "search", Hash: "1"},
		{Name: "waiting", Kind: "mirror", Hash: "1"},
		{Name: "unreachable", Kind: "search", Hash: "1"},
		{Name: "denied", Kind: "search", Hash: "1"},
		{Name: "bad", Kind: "search", Err: errs.WithJob("bad", fmt.Errorf("load: %w", errs.New(errs.ConfigInvalid, "bad", "index: must be a string")))},
	})
	byName := func() map[string]status.Job {
		m := map[string]status.Job{}
		for _, j := range s.Status() {
			m[j.Name] = j
		}
		return m
	}
	eventually(t, "every job settles", func() bool {
		m := byName()
		return m["ok"].Holder != "" && m["flaky"].State == "restarting" && m["waiting"].Holder != "" && m["bad"].State == "failed" &&
			m["unreachable"].State == "restarting" && m["denied"].State == "restarting"
	}, func() string { return fmt.Sprintf("%+v", s.Status()) })

	m := byName()
	if j := m["ok"]; j.Holder != "me:1:abc" || j.Epoch == 0 || j.Kind != "search" {
		t.Errorf("ok = %+v, want held by me with an epoch", j)
	}
	if j := m["flaky"]; j.NextRestart == nil || j.Restarts != 1 || j.LastError == nil || j.LastError.Code != "FAILED" {
		t.Errorf("flaky = %+v, want a next restart, 1 restart and its FAILED error", j)
	}
	if j := m["waiting"]; j.State != "standby" || j.Holder != "other:2:def" || j.Kind != "mirror" {
		t.Errorf("waiting = %+v, want standby naming the other holder", j)
	}
	// A job that cannot ask for its lease is not "standby".
	if j := m["unreachable"]; j.State != "restarting" || j.LastError == nil || j.LastError.Code != "FAILED" ||
		!strings.Contains(j.LastError.Message, "connection refused") || j.Holder != "" {
		t.Errorf("unreachable = %+v, want restarting with its FAILED error", j)
	}
	if j := m["denied"]; j.State != "restarting" || j.LastError == nil || j.LastError.Code != "CONFIG_INVALID" ||
		!strings.Contains(j.LastError.Message, "MEILISTREAM_MONGODB_URI") {
		t.Errorf("denied = %+v, want restarting with CONFIG_INVALID naming MEILISTREAM_MONGODB_URI", j)
	}
	if j := m["bad"]; j.LastError == nil || j.LastError.Code != "CONFIG_INVALID" {
		t.Errorf("bad = %+v, want its CONFIG_INVALID error", j)
	}
	// The message is bare: code and job are fields of their own.
	if j := m["flaky"]; j.LastError == nil || j.LastError.Message != "meilisearch unreachable" {
		t.Errorf("flaky message = %+v, want the bare message", j.LastError)
	}

	err := s.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "job flaky restarting: FAILED: meilisearch unreachable") ||
		!strings.Contains(err.Error(), "job bad failed: CONFIG_INVALID: load: index: must be a string;") {
		t.Errorf("Ready = %v, want flaky and bad named, each code once", err)
	}
	s.Apply([]supervisor.JobDef{{Name: "ok", Kind: "search", Hash: "1"}})
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("Ready with only a running job = %v", err)
	}
	probe.Store(&probeErr)
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Ready with a failing probe = %v", err)
	}
}

// /status shows an error's code and its message apart, each once, however
// many layers wrapped it: the code is data on the error, and the message
// never repeats it (nor the job, which /status shows beside it).
func TestStatusShowsCodeAndMessageApart(t *testing.T) {
	cases := map[string]struct {
		err       error
		code, msg string
	}{
		"mirror": {errs.WithJob("mirror", fmt.Errorf("start: %w", errs.New(errs.ConfigInvalid, "mirror", "a mirror job needs X"))),
			"CONFIG_INVALID", "start: a mirror job needs X"},
		"send":   {errs.New(errs.Failed, "send", "send batch: refused"), "FAILED", "send batch: refused"},
		"nojob":  {errs.New(errs.Failed, "", "no job here"), "FAILED", "no job here"},
		"plain":  {errors.New("connection refused"), "FAILED", "connection refused"},
		"nested": {errs.Wrap(errs.Failed, "nested", errs.New(errs.ConfigInvalid, "nested", "bad key"), "prepare"), "CONFIG_INVALID", "prepare: bad key"},
	}
	d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error { return cases[def.Name].err })
	s := supervisor.New(supervisor.Config{Driver: d, RestartMin: time.Hour})
	defer closeSupervisor(t, s)
	var defs []supervisor.JobDef
	for name := range cases {
		defs = append(defs, supervisor.JobDef{Name: name, Hash: "1"})
	}
	s.Apply(defs)
	eventually(t, "every job has its error", func() bool {
		for _, j := range s.Status() {
			if j.LastError == nil {
				return false
			}
		}
		return len(s.Status()) == len(cases)
	}, func() string { return fmt.Sprintf("%+v", s.Status()) })
	for _, j := range s.Status() {
		c := cases[j.Name]
		if j.LastError.Code != c.code || j.LastError.Message != c.msg {
			t.Errorf("%s: last_error %q %q, want %q %q", j.Name, j.LastError.Code, j.LastError.Message, c.code, c.msg)
		}
	}
}
