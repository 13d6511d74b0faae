package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
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
			// A down server: the probe hangs until the test lets it go,
			// however long the test takes. (Ended at its own timeout, it
			// would let another probe start on a slow machine; and a
			// ReadyNow that waited for it would not answer at all.)
			<-up
			return nil
		},
	})
	defer closeSupervisor(t, s)
	var release sync.Once
	defer release.Do(func() { close(up) })
	// answered bounds a call that must not wait for the probe: one that
	// waited would see this deadline pass, far beyond any scheduling delay.
	answered := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}

	// No probe yet: the first answer waits for one.
	if err := s.ReadyNow(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("first ReadyNow = %v, want the probe's error", err)
	}
	hang.Store(true)
	time.Sleep(60 * time.Millisecond) // the result is stale now
	for i := 0; i < 20; i++ {
		ctx, cancel := answered()
		err := s.ReadyNow(ctx)
		cancel()
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
	client := &http.Client{Timeout: 10 * time.Second} // as answered
	resp, err := client.Get("http://" + srv.Addr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ready {
		t.Error("/status says ready with the probe hanging")
	}

	// Ready (/readyz) waits for the probe in flight, bounded by its ctx,
	// and joins it instead of starting another.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err = s.Ready(ctx)
	cancel()
	if took := time.Since(start); err == nil || took < 90*time.Millisecond {
		t.Errorf("Ready = %v after %s, want to wait for the probe until ctx ends", err, took)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d probes, want Ready to join the one in flight", n)
	}

	// The servers answer again: the probe in flight ends, ready.
	release.Do(func() { close(up) })
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
