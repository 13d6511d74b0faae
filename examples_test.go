package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/status"
)

// headroomSource is a status source whose one job follows with a known
// headroom: the series read from the status at each scrape.
type headroomSource struct{}

func (headroomSource) Status() []status.Job {
	lag, age, room := 1.0, 60.0, 3540.0
	return []status.Job{{Name: "books", Kind: "search", State: status.Following, LagSeconds: &lag, PositionAgeSeconds: &age, HeadroomSeconds: &room}}
}
func (headroomSource) Ready(context.Context) error  { return nil }
func (headroomSource) OplogWindow() (float64, bool) { return 3600, true }

// TestDashboardAndAlertsUseTheMetrics: every meilistream_* series the
// Grafana dashboard and the alerts of docs/metrics.md query is one the
// sidecar serves, and none selects on a job label (Prometheus's own; the
// job is pipeline).
func TestDashboardAndAlertsUseTheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	m.Declare("books", "search")
	m.Declare("copy", "mirror")
	jm := m.Job("books", "search")
	jm.Lag(time.Second)
	jm.Position(time.Now())
	jm.DeadLetters(1)
	jm.Lease(true, 1)
	jm.ReindexProgress(1, 2)
	jm.State("following")
	jm.Verified(0, 0, 0, time.Now())
	// The series read from the jobs' status at each scrape.
	m.SetStatus(headroomSource{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	labels := map[string]map[string]bool{} // each series' label names
	for _, mf := range mfs {
		names := []string{mf.GetName()}
		if mf.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names = append(names, mf.GetName()+suffix)
			}
		}
		for _, n := range names {
			served[n] = true
			labels[n] = map[string]bool{}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					labels[n][lp.GetName()] = true
				}
			}
		}
		if mf.GetType().String() == "HISTOGRAM" {
			labels[mf.GetName()+"_bucket"]["le"] = true
		}
	}

	var exprs []string
	b, err := os.ReadFile("examples/monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	doc, err := os.ReadFile("docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 10 {
		t.Fatalf("found %d queries, want the dashboard's and the alerts'", len(exprs))
	}
	name := regexp.MustCompile(`meilistream_[a-z_]+`)
	jobLabel := regexp.MustCompile(`[{,(]\s*job\s*(=|!=|=~|!~)|by \(([^)]*\b)?job\b`)
	// The labels a query names are the series' own: the drift of a
	// verify is `drift` in the sidecar, the dashboard and the alerts
	// alike (`kind` is the job's kind on every series).
	selector := regexp.MustCompile(`(meilistream_[a-z_]+)\{([^}]*)\}`)
	selectorKey := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	byClause := regexp.MustCompile(`\b(?:by|without) \(([^)]*)\)`)
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			if !served[n] {
				t.Errorf("%s is not a series the sidecar serves (in %s)", n, e)
			}
		}
		for _, m := range selector.FindAllStringSubmatch(e, -1) {
			for _, k := range selectorKey.FindAllStringSubmatch(m[2], -1) {
				if served[m[1]] && !labels[m[1]][k[1]] {
					t.Errorf("%s has no label %s (in %s)", m[1], k[1], e)
				}
			}
		}
		for _, m := range byClause.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[1], ",") {
				l = strings.TrimSpace(l)
				// Labels of the scrape target, which Prometheus adds.
				found := l == "pod" || l == "instance" || l == "namespace"
				for _, n := range name.FindAllString(e, -1) {
					found = found || labels[n][l]
				}
				if l != "" && !found {
					t.Errorf("no series of %s has the label %s it groups by", e, l)
				}
			}
		}
		if jobLabel.MatchString(e) || strings.Contains(e, "exported_job") {
			t.Errorf("a query selects on job, which Prometheus owns: %s", e)
		}
	}
}

// TestKustomizationsApplyEveryManifest: "kubectl apply -k" on each example
// folder applies every manifest beside its kustomization.yaml (a file left
// out is a promise the folder does not keep), and every file it names
// exists. kubectl is not needed: the lists are read as text.
func TestKustomizationsApplyEveryManifest(t *testing.T) {
	for _, dir := range []string{"examples/kubernetes", "examples/monitoring"} {
		b, err := os.ReadFile(dir + "/kustomization.yaml")
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^\s+- (?:[\w.-]+=)?([\w./-]+\.(?:yaml|json))\s*$`).FindAllStringSubmatch(string(b), -1) {
			named[m[1]] = true
			if _, err := os.Stat(dir + "/" + m[1]); err != nil {
				t.Errorf("%s/kustomization.yaml names %s: %v", dir, m[1], err)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			n := e.Name()
			if n == "kustomization.yaml" || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".json")) {
				continue
			}
			if !named[n] {
				t.Errorf("%s/%s is not in its kustomization.yaml: kubectl apply -k would leave it out", dir, n)
			}
		}
	}
}

// TestTheImageAndComposeCheckTheSidecarsHealth: the image's HEALTHCHECK
// and the compose sidecar's healthcheck run a command the binary has (the
// distroless image has no shell or curl for anything else), which passes
// while the sidecar answers 200 and fails once it does not; and the
// Kubernetes example's PodDisruptionBudget selects the Deployment's pods.
func TestTheImageAndComposeCheckTheSidecarsHealth(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	command := func(where, list string) []string {
		t.Helper()
		var argv []string
		if err := json.Unmarshal([]byte(list), &argv); err != nil || len(argv) < 3 || argv[0] != "CMD" || argv[1] != "/usr/local/bin/meilistream" {
			t.Fatalf("%s: health check %s, want [\"CMD\", \"/usr/local/bin/meilistream\", ...]", where, list)
		}
		return argv[2:]
	}
	checks := map[string][]string{}
	if m := regexp.MustCompile(`(?m)^HEALTHCHECK (?:.*\\\n)*\s*CMD (\[.*\])$`).FindStringSubmatch(read("Dockerfile")); m == nil {
		t.Error("Dockerfile: no HEALTHCHECK")
	} else {
		checks["Dockerfile"] = command("Dockerfile", `["CMD", `+strings.TrimPrefix(m[1], "["))
	}
	compose := read("docker-compose.yml")
	sidecar := regexp.MustCompile(`(?ms)^  meilistream:\n(.*?)(?:^  \S|^\S|\z)`).FindStringSubmatch(compose)
	if sidecar == nil {
		t.Fatal("docker-compose.yml: no meilistream service")
	}
	if m := regexp.MustCompile(`(?m)^    healthcheck:\n      test: (\[.*\])$`).FindStringSubmatch(sidecar[1]); m == nil {
		t.Error("docker-compose.yml: the meilistream service has no healthcheck")
	} else {
		checks["docker-compose.yml"] = command("docker-compose.yml", m[1])
	}

	healthy := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy {
			http.Error(w, "not ready: Meilisearch (MEILISTREAM_MEILI_URL) unreachable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	t.Setenv("MEILISTREAM_HTTP_ADDR", strings.TrimPrefix(srv.URL, "http://"))
	for where, args := range checks {
		for _, h := range []bool{true, false} {
			healthy = h
			var out, errOut bytes.Buffer
			code := run(context.Background(), args, nil, &out, &errOut)
			if want := map[bool]int{true: exitOK, false: exitFailed}[h]; code != want {
				t.Errorf("%s: %q with the sidecar answering %s: exit %d, want %d (%s%s)", where, args, map[bool]string{true: "200", false: "503"}[h], code, want, out.String(), errOut.String())
			}
		}
	}

	labels := func(text, under string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + under + `\n((?:\s+\w+: \S+\n)+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %q", under)
		}
		return strings.Join(strings.Fields(m[1]), " ")
	}
	pdb := read("examples/kubernetes/pdb.yaml")
	if !strings.Contains(pdb, "kind: PodDisruptionBudget") {
		t.Fatal("examples/kubernetes/pdb.yaml is no PodDisruptionBudget")
	}
	pods := labels(read("examples/kubernetes/deployment.yaml"), `  template:\n    metadata:\n      labels:`)
	if sel := labels(pdb, `    matchLabels:`); sel != pods {
		t.Errorf("the PodDisruptionBudget selects %q, the Deployment's pods are labelled %q", sel, pods)
	}
}
