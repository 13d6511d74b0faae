package main

import (
	"context"
	"encoding/json"
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
