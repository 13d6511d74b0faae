package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// With a server down a probe takes seconds; /status answers at once from
// the latest probe's result, refreshed in the background, one probe at a
// time, while /readyz (Ready) waits for a fresh one.
func TestReadyNowDoesNotWaitForAProbe(t *testing.T) {
	var calls atomic.Int32
	var hang atomic.Bool
	up := make(chan struct{}) // closed: the servers answer again
	s := supervisor.New(supervisor.Config{
		Driver:   newFakeDriver(nil),
		ProbeTTL: 50 * time.Millisecond,
		Probe: func(ctx context.Context) error {
			calls.Add(1)
			if !hang.Load() {
				return errors.New("mongodb unreachable: connection refused")
			}
			select { // a down server: the probe hangs until its timeout
			case <-ctx.Done():
				return errors.New("mongodb unreachable: " + ctx.Err().Error())
			case <-up:
				return nil
			}
		},
	})
	defer closeSupervisor(t, s)

	// No probe yet: the first answer waits for one.
	if err := s.ReadyNow(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("first ReadyNow = %v, want the probe's error", err)
	}
	hang.Store(true)
	time.Sleep(60 * time.Millisecond) // the result is stale now
	for i := 0; i < 20; i++ {
		start := time.Now()
		err := s.ReadyNow(context.Background())
		// Waiting for the hanging probe would take its 2.5 s timeout; a
		// second leaves room for a loaded machine's scheduling delays.
		if took := time.Since(start); took > time.Second {
			t.Fatalf("ReadyNow took %s with a probe hanging", took)
		}
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("ReadyNow = %v, want the latest (stale) result", err)
		}
	}
	eventually(t, "the background probe starts", func() bool { return calls.Load() >= 2 },
		func() string { return "none started" })
	for i := 0; i < 20; i++ {
		_ = s.ReadyNow(context.Background())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d probes, want 2: one background refresh, not one per call", n)
	}

	// /status over HTTP answers at once too.
	srv, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0", Status: s})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	start := time.Now()
	resp, err := http.Get("http://" + srv.Addr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond || rep.Ready {
		t.Errorf("/status took %s, ready %v; want at once, not ready", took, rep.Ready)
	}

	// Ready (/readyz) waits for the probe in flight, bounded by its ctx,
	// and joins it instead of starting another.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start = time.Now()
	err = s.Ready(ctx)
	cancel()
	if took := time.Since(start); err == nil || took < 90*time.Millisecond {
		t.Errorf("Ready = %v after %s, want to wait for the probe until ctx ends", err, took)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d probes, want Ready to join the one in flight", n)
	}

	// The servers answer again: the probe in flight ends, ready.
	close(up)
	eventually(t, "ready again", func() bool { return s.ReadyNow(context.Background()) == nil },
		func() string { return errorText(s.ReadyNow(context.Background())) })
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("Ready = %v, want nil", err)
	}
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
