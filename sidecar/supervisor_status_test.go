package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar"
)

func TestSupervisorStatus(t *testing.T) {
	d := newFakeDriver(func(ctx context.Context, def sidecar.JobDef, call int) error {
		if def.Name == "flaky" {
			return errs.New(errs.Failed, def.Name, "meilisearch unreachable")
		}
		<-ctx.Done()
		return nil
	})
	gate := make(chan struct{})
	d.gate["waiting"] = gate
	probeErr := errors.New("mongodb: connection refused")
	probe := error(nil)
	s := sidecar.NewSupervisor(sidecar.SupervisorConfig{
		Driver:     d,
		Holder:     "me:1:abc",
		RestartMin: time.Hour, // stays "restarting" for the test
		Probe:      func(context.Context) error { return probe },
		Holders: func(context.Context) (map[string]string, error) {
			return map[string]string{"waiting": "other:2:def"}, nil
		},
		HoldersInterval: 5 * time.Millisecond,
	})
	defer closeSupervisor(t, s)
	s.Apply([]sidecar.JobDef{
		{Name: "ok", Kind: "search", Hash: "1"},
		{Name: "flaky", Kind: "search", Hash: "1"},
		{Name: "waiting", Kind: "mirror", Hash: "1"},
		{Name: "bad", Kind: "search", Err: errs.New(errs.ConfigInvalid, "bad", "index: must be a string")},
	})
	byName := func() map[string]sidecar.JobStatus {
		m := map[string]sidecar.JobStatus{}
		for _, j := range s.Status() {
			m[j.Name] = j
		}
		return m
	}
	eventually(t, "every job settles", func() bool {
		m := byName()
		return m["ok"].Holder != "" && m["flaky"].State == "restarting" && m["waiting"].Holder != "" && m["bad"].State == "failed"
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
	if j := m["bad"]; j.LastError == nil || j.LastError.Code != "CONFIG_INVALID" {
		t.Errorf("bad = %+v, want its CONFIG_INVALID error", j)
	}

	err := s.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "job flaky restarting") || !strings.Contains(err.Error(), "job bad failed") {
		t.Errorf("Ready = %v, want flaky and bad named", err)
	}
	s.Apply([]sidecar.JobDef{{Name: "ok", Kind: "search", Hash: "1"}})
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("Ready with only a running job = %v", err)
	}
	probe = probeErr
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Ready with a failing probe = %v", err)
	}
}
