package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/status"
)

// Secrets of the configuration /status shows, which it must mask.
const (
	testURI    = "mongodb://app:s3cr3t-pw@db1:27017,db2:27017/shop?replicaSet=rs0"
	testAPIKey = "masterKey-abcdef123456"
)

type fakeStatus struct {
	jobs     []status.Job
	notReady error
}

func (f *fakeStatus) Status() []status.Job { return f.jobs }

func (f *fakeStatus) Ready(ctx context.Context) error { return f.notReady }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHTTPServer(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	pos := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeStatus{jobs: []status.Job{{
		Name: "articles", Kind: "search", State: "following", Holder: "pod-a:1:abc", Epoch: 3,
		LagSeconds: ptr(0.5), PositionTime: &pos, Counters: status.Counters{Indexed: 10, Deleted: 2},
		LastError: &status.ErrorInfo{Code: "FAILED", Message: "send batch: connection refused", At: pos},
	}}}
	reg := httpapi.NewRegistry("v0.0.0-test")
	m := httpapi.NewMetrics(reg)
	cfg, err := config.Load([]string{"MEILISTREAM_MONGODB_URI=" + testURI, "MEILISTREAM_MEILI_API_KEY=" + testAPIKey})
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.Start(httpapi.Options{
		Addr: "127.0.0.1:0", ReadyFile: ready, Status: src, Gatherer: reg, Config: &cfg, Version: "v0.0.0-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	t.Run("the ready file holds the bound address", func(t *testing.T) {
		b, err := os.ReadFile(ready)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != s.Addr() || strings.HasSuffix(got, ":0") {
			t.Errorf("ready file %q, Addr %q", got, s.Addr())
		}
	})
	base := "http://" + s.Addr()

	t.Run("healthz answers ok", func(t *testing.T) {
		if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("healthz: %d %q", code, body)
		}
	})

	t.Run("readyz follows the source's Ready", func(t *testing.T) {
		if code, _ := get(t, base+"/readyz"); code != 200 {
			t.Errorf("readyz: %d, want 200", code)
		}
		src.notReady = errors.New("job articles failed")
		defer func() { src.notReady = nil }()
		code, body := get(t, base+"/readyz")
		if code != 503 || !strings.Contains(body, "job articles failed") {
			t.Errorf("readyz: %d %q, want 503 with the reason", code, body)
		}
	})

	t.Run("status is JSON per job with the config masked", func(t *testing.T) {
		code, body := get(t, base+"/status")
		if code != 200 {
			t.Fatalf("status: %d", code)
		}
		var rep struct {
			Version string           `json:"version"`
			Ready   bool             `json:"ready"`
			Jobs    []map[string]any `json:"jobs"`
			Config  map[string]any   `json:"config"`
		}
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("status is not JSON: %v\n%s", err, body)
		}
		if rep.Version != "v0.0.0-test" || !rep.Ready || len(rep.Jobs) != 1 {
			t.Errorf("status: %s", body)
		}
		j := rep.Jobs[0]
		for k, want := range map[string]any{"name": "articles", "kind": "search", "state": "following",
			"holder": "pod-a:1:abc", "epoch": 3.0, "lag_seconds": 0.5, "position_time": "2026-01-02T03:04:05Z"} {
			if j[k] != want {
				t.Errorf("jobs[0].%s = %v, want %v", k, j[k], want)
			}
		}
		if c, _ := j["counters"].(map[string]any); c["indexed"] != 10.0 || c["deleted"] != 2.0 {
			t.Errorf("counters: %v", j["counters"])
		}
		if e, _ := j["last_error"].(map[string]any); e["code"] != "FAILED" {
			t.Errorf("last_error: %v", j["last_error"])
		}
		if rep.Config["batch_size"] != 500.0 {
			t.Errorf("config: %v", rep.Config)
		}
		for _, secret := range []string{"s3cr3t-pw", testAPIKey} {
			if strings.Contains(body, secret) {
				t.Errorf("status shows a secret: %s", body)
			}
		}
	})

	t.Run("metrics shows the job's series", func(t *testing.T) {
		jm := m.Job("articles", "search")
		jm.Indexed(3)
		jm.Deleted(1)
		jm.Skipped(2)
		jm.Error("NOT_A_DOCUMENT")
		jm.Batch(40*time.Millisecond, 4)
		jm.Lag(1500 * time.Millisecond)
		jm.Position(time.Unix(1700000000, 0))
		jm.DeadLetters(7)
		jm.Lease(true, 3)
		jm.ReindexProgress(50, 100)
		jm.ReindexDone()
		jm.State("following")
		jm.Restart()
		jm.SourceRead("findId", 2*time.Millisecond, false)
		jm.SourceRead("findId", time.Millisecond, true)
		m.Job("copy", "mirror").DDL("drop")
		code, body := get(t, base+"/metrics")
		if code != 200 {
			t.Fatalf("metrics: %d", code)
		}
		for _, want := range []string{
			`meilistream_documents_indexed_total{kind="search",pipeline="articles"} 3`,
			`meilistream_documents_deleted_total{kind="search",pipeline="articles"} 1`,
			`meilistream_documents_skipped_total{kind="search",pipeline="articles"} 2`,
			`meilistream_errors_total{code="NOT_A_DOCUMENT",kind="search",pipeline="articles"} 1`,
			`meilistream_batch_duration_seconds_count{kind="search",pipeline="articles"} 1`,
			`meilistream_batch_documents_sum{kind="search",pipeline="articles"} 4`,
			`meilistream_follow_lag_seconds{kind="search",pipeline="articles"} 1.5`,
			`meilistream_position_timestamp_seconds{kind="search",pipeline="articles"} 1.7e+09`,
			`meilistream_dead_letters{kind="search",pipeline="articles"} 7`,
			`meilistream_lease_held{kind="search",pipeline="articles"} 1`,
			`meilistream_lease_epoch{kind="search",pipeline="articles"} 3`,
			`meilistream_reindex_documents_done{kind="search",pipeline="articles"} 50`,
			`meilistream_reindex_documents_estimated{kind="search",pipeline="articles"} 100`,
			`meilistream_reindexes_total{kind="search",pipeline="articles"} 1`,
			`meilistream_job_state{kind="search",pipeline="articles",state="following"} 1`,
			`meilistream_job_state{kind="search",pipeline="articles",state="standby"} 0`,
			`meilistream_job_restarts_total{kind="search",pipeline="articles"} 1`,
			`meilistream_ddl_events_total{event="drop",kind="mirror",pipeline="copy"} 1`,
			`meilistream_source_reads_total{call="findId",kind="search",outcome="ok",pipeline="articles"} 1`,
			`meilistream_source_reads_total{call="findId",kind="search",outcome="error",pipeline="articles"} 1`,
			`meilistream_source_read_duration_seconds_count{call="findId",kind="search",pipeline="articles"} 2`,
			`meilistream_build_info{goversion="go`,
			`go_goroutines`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lacks %s", want)
			}
		}
		if strings.Contains(body, `job="`) {
			t.Errorf("metrics have a job label, which Prometheus renames exported_job")
		}
		jm.Forget()
		_, body = get(t, base+"/metrics")
		if strings.Contains(body, `pipeline="articles"`) {
			t.Errorf("Forget left series of the job")
		}
	})

	t.Run("other methods are refused", func(t *testing.T) {
		resp, err := http.Post(base+"/status", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST /status: %d", resp.StatusCode)
		}
	})

	t.Run("close removes the ready file and can be called twice", func(t *testing.T) {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ready file still there: %v", err)
		}
		if _, err := http.Get(base + "/healthz"); err == nil {
			t.Errorf("server still answers after Close")
		}
	})
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *httpapi.Metrics
	jm := m.Job("articles", "search")
	jm.Indexed(1)
	jm.Error("FAILED")
	jm.Batch(time.Second, 1)
	jm.Lease(true, 1)
	jm.State("failed")
	jm.SourceRead("find", time.Second, false)
	jm.Forget()
}

func TestJobStateShowsExactlyOneState(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	ones := func() []string {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			if mf.GetName() != "meilistream_job_state" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				if mt.GetGauge().GetValue() == 1 {
					for _, l := range mt.GetLabel() {
						if l.GetName() == "state" {
							out = append(out, l.GetValue())
						}
					}
				}
			}
		}
		return out
	}
	for _, step := range []struct{ set, want string }{
		{"standby", "standby"}, {"running", "running"}, {"custom", "custom"}, {"following", "following"},
	} {
		m.Job("books", "search").State(step.set)
		if got := ones(); len(got) != 1 || got[0] != step.want {
			t.Errorf("after State(%q): states at 1 are %v, want [%s]", step.set, got, step.want)
		}
	}
}

func TestMetricsRegisterOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	httpapi.NewMetrics(reg)
	defer func() {
		if recover() == nil {
			t.Errorf("registering twice did not panic")
		}
	}()
	httpapi.NewMetrics(reg)
}

func TestHTTPServerRefusesABusyAddress(t *testing.T) {
	s, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := httpapi.Start(httpapi.Options{Addr: s.Addr()}); err == nil {
		t.Errorf("a second server on %s started", s.Addr())
	}
}

func ptr[T any](v T) *T { return &v }

func TestDeclaredJobHasItsSeriesAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	m.Declare("books", "search")
	m.Declare("copy", "mirror")
	text := gatherText(t, reg)
	for _, want := range []string{
		`meilistream_documents_indexed_total{kind="search",pipeline="books"} 0`,
		`meilistream_documents_deleted_total{kind="search",pipeline="books"} 0`,
		`meilistream_documents_skipped_total{kind="search",pipeline="books"} 0`,
		`meilistream_errors_total{code="TRANSFORM_FAILED",kind="search",pipeline="books"} 0`,
		`meilistream_errors_total{code="NOT_A_DOCUMENT",kind="search",pipeline="books"} 0`,
		`meilistream_errors_total{code="ID_MISMATCH",kind="search",pipeline="books"} 0`,
		`meilistream_errors_total{code="FAILED",kind="search",pipeline="books"} 0`,
		`meilistream_errors_total{code="LEASE_LOST",kind="search",pipeline="books"} 0`,
		`meilistream_batch_duration_seconds_count{kind="search",pipeline="books"} 0`,
		`meilistream_batch_documents_count{kind="search",pipeline="books"} 0`,
		`meilistream_reindexes_total{kind="search",pipeline="books"} 0`,
		`meilistream_job_restarts_total{kind="search",pipeline="books"} 0`,
		`meilistream_transform_reload_errors_total{kind="search",pipeline="books"} 0`,
		`meilistream_transform_stale{kind="search",pipeline="books"} 0`,
		`meilistream_lease_held{kind="search",pipeline="books"} 0`,
		`meilistream_ddl_events_total{event="drop",kind="mirror",pipeline="copy"} 0`,
		`meilistream_ddl_events_total{event="dropDatabase",kind="mirror",pipeline="copy"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("a declared job lacks %s", want)
		}
	}
	for _, absent := range []string{`meilistream_ddl_events_total{event="drop",kind="search"`, `meilistream_position_timestamp_seconds{`, `meilistream_dead_letters{`} {
		if strings.Contains(text, absent) {
			t.Errorf("a declared job has %s, whose value is not known yet", absent)
		}
	}
	// Every per-job family has pipeline and kind, none has job.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := map[string]bool{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
			if labels["job"] || !labels["pipeline"] || !labels["kind"] {
				t.Errorf("%s has labels %v, want pipeline and kind, no job", mf.GetName(), labels)
			}
		}
	}
	// A job whose kind changes loses the old kind's series.
	m.Declare("copy", "search")
	if text := gatherText(t, reg); strings.Contains(text, `kind="mirror",pipeline="copy"`) {
		t.Errorf("series of the old kind stay")
	}
}

func TestJobStateAndLagAreReadFromTheStatusAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	src := &fakeStatus{jobs: []status.Job{
		{Name: "books", Kind: "search", State: "reindexing", LagSeconds: ptr(2.5)},
		{Name: "copy", Kind: "mirror", State: "standby"},
	}}
	m.Job("books", "search").State("starting") // pushed, overridden by the status
	m.SetStatus(src)
	text := gatherText(t, reg)
	for _, want := range []string{
		`meilistream_job_state{kind="search",pipeline="books",state="reindexing"} 1`,
		`meilistream_job_state{kind="search",pipeline="books",state="starting"} 0`,
		`meilistream_job_state{kind="mirror",pipeline="copy",state="standby"} 1`,
		`meilistream_follow_lag_seconds{kind="search",pipeline="books"} 2.5`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, `meilistream_follow_lag_seconds{kind="mirror"`) {
		t.Errorf("a standby job has a lag")
	}
	src.jobs[0].State = "following"
	if text := gatherText(t, reg); !strings.Contains(text, `meilistream_job_state{kind="search",pipeline="books",state="following"} 1`) {
		t.Errorf("the next scrape does not show the new state")
	}
}

// gatherText renders reg's series one a line, as /metrics shows them
// (without HELP and TYPE).
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	s, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, body := get(t, "http://"+s.Addr()+"/metrics")
	return body
}
