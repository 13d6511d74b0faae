package httpapi_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/status"
)

func TestPositionAgeIsTheHoldersAndGrowsWhilePaused(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	old := time.Now().Add(-90 * time.Second)
	src := &fakeStatus{jobs: []status.Job{
		{Name: "books", Kind: "search", State: status.Paused, PositionTime: &old},
		{Name: "copy", Kind: "mirror", State: status.Standby, PositionTime: &old},
	}}
	m.SetStatus(src)
	text := gatherText(t, reg)
	re := regexp.MustCompile(`(?m)^meilistream_position_age_seconds\{kind="search",pipeline="books"\} (\S+)$`)
	got := re.FindStringSubmatch(text)
	if got == nil {
		t.Fatalf("no position age for the paused job:\n%s", text)
	}
	if v, err := strconv.ParseFloat(got[1], 64); err != nil || v < 90 {
		t.Errorf("position age %s, want at least 90", got[1])
	}
	if regexp.MustCompile(`meilistream_position_age_seconds\{kind="mirror"`).MatchString(text) {
		t.Errorf("a standby's copy of the position has an age:\n%s", text)
	}
	if !regexp.MustCompile(`meilistream_job_state\{kind="search",pipeline="books",state="paused"\} 1`).MatchString(text) {
		t.Errorf("the paused state is not a job_state:\n%s", text)
	}
}
