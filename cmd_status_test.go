package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The status table lines up: every line has a word per column, each
// column starting where its header does whatever the widths, and times
// are one format (RFC 3339 UTC to the second), spans Go durations.
func TestStatusTableLinesUp(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 29, 59, 987_000_000, time.FixedZone("CET", 3600))
	rows := []statusRow{
		{Job: "books", State: "held", Holder: "vm:17282:a00872bf328f", Epoch: "12", Expires: statusTime(at), Position: statusTime(at.Add(-30 * time.Second)), Lag: "0s", Headroom: headroomText(71*time.Hour + 1500*time.Millisecond), Errors: "0"},
		{Job: "a-much-longer-job-name", State: "paused", Holder: "h:1:2", Epoch: "3", Lag: lagText(1500 * time.Millisecond), Headroom: headroomText(-time.Second), Reindex: "120000", Errors: "4"},
		{Job: "x", State: "no-transform", Lag: "?"},
		{Job: "odd", State: "load error", Errors: "1"},
	}
	var out bytes.Buffer
	if err := writeStatusTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(rows)+1 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(rows)+1, out.String())
	}
	word := regexp.MustCompile(`\S+`)
	starts := func(l string) []int {
		var s []int
		for _, m := range word.FindAllStringIndex(l, -1) {
			s = append(s, m[0])
		}
		return s
	}
	head := starts(lines[0])
	if len(head) != 10 {
		t.Fatalf("header %q: %d columns, want 10", lines[0], len(head))
	}
	for _, l := range lines[1:] {
		if got := starts(l); len(got) != len(head) || !equalInts(got, head) {
			t.Errorf("line %q: words start at %v, want the header's %v\n%s", l, got, head, out.String())
		}
	}
	if !strings.Contains(lines[1], " 2026-12-01T13:29:59Z ") || !strings.Contains(lines[1], " 2026-12-01T13:29:29Z ") || !strings.Contains(lines[1], " 71h0m1s ") {
		t.Errorf("times and spans: %q, want RFC 3339 UTC to the second and durations to the second", lines[1])
	}
	if !strings.Contains(lines[2], " 2s ") || !strings.Contains(lines[2], " lost ") {
		t.Errorf("lag and headroom: %q", lines[2])
	}
	if !strings.Contains(lines[4], " load_error ") {
		t.Errorf("a cell with a blank: %q, want it one word", lines[4])
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
