package httpapi_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/httpapi"
)

// series returns name{labels} value for every series of reg named in names.
func series(t *testing.T, reg *prometheus.Registry, names ...string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, n := range names {
			if f.GetName() != n {
				continue
			}
			for _, m := range f.GetMetric() {
				key := n
				for _, l := range m.GetLabel() {
					key += fmt.Sprintf(",%s=%s", l.GetName(), l.GetValue())
				}
				v := m.GetGauge().GetValue()
				if m.GetCounter() != nil {
					v = m.GetCounter().GetValue()
				}
				out[key] = v
			}
		}
	}
	return out
}

func TestPressureMetricsArePerPipeline(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	names := []string{"meilistream_documents_skipped_unchanged_total", "meilistream_meili_enqueued_bytes", "meilistream_meili_enqueued_tasks"}
	m.Declare("articles", "search")
	if got := series(t, reg, names...); fmt.Sprint(got) != "map[meilistream_documents_skipped_unchanged_total,kind=search,pipeline=articles:0]" {
		t.Fatalf("declared: %v, want the counter at zero and no queue yet", got)
	}
	m.ObserveUnchanged("articles", "search", 3)
	m.ObserveUnchanged("articles", "search", 2)
	m.ObserveQueue("articles", 4, 1<<20)
	got := series(t, reg, names...)
	want := map[string]float64{
		"meilistream_documents_skipped_unchanged_total,kind=search,pipeline=articles": 5,
		"meilistream_meili_enqueued_tasks,kind=search,pipeline=articles":              4,
		"meilistream_meili_enqueued_bytes,kind=search,pipeline=articles":              1 << 20,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	m.Job("articles", "search").Forget()
	if got := series(t, reg, names...); len(got) != 0 {
		t.Fatalf("after Forget: %v", got)
	}
	var none *httpapi.Metrics
	none.ObserveUnchanged("articles", "search", 1)
	none.ObserveQueue("articles", 1, 1)
}

func TestTheThrottledGaugeSaysTheOneReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	m.Declare("articles", "search")
	m.ObserveThrottle("articles", engine.ThrottleLatency)
	got := series(t, reg, "meilistream_reindex_throttled")
	want := map[string]float64{
		"meilistream_reindex_throttled,kind=search,pipeline=articles,reason=meilisearch_backlog": 0,
		"meilistream_reindex_throttled,kind=search,pipeline=articles,reason=mongodb_latency":     1,
		"meilistream_reindex_throttled,kind=search,pipeline=articles,reason=rate":                0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	m.ObserveThrottle("articles", "")
	for k, v := range series(t, reg, "meilistream_reindex_throttled") {
		if v != 0 {
			t.Errorf("no longer throttled: %s = %v", k, v)
		}
	}
	m.Job("articles", "search").Forget()
	if got := series(t, reg, "meilistream_reindex_throttled"); len(got) != 0 {
		t.Fatalf("after Forget: %v", got)
	}
}
