package scripttest

import "testing"

// The headroom rule compares a job's headroom with a share of the window,
// another series: it fires under the share, not over it, and not without
// a window (scalar() of nothing is NaN).
func TestAnAlertBoundMayBeAShareOfASeries(t *testing.T) {
	r, err := parseRule(`min by (pipeline) (meilistream_oplog_headroom_seconds) < 0.25 * scalar(max(meilistream_oplog_window_seconds))`)
	if err != nil {
		t.Fatal(err)
	}
	window := sample{name: "meilistream_oplog_window_seconds", value: 3600}
	room := func(v float64) sample {
		return sample{name: "meilistream_oplog_headroom_seconds", labels: map[string]string{"pipeline": "books", "kind": "search"}, value: v}
	}
	for _, c := range []struct {
		what   string
		series []sample
		fires  bool
	}{
		{"three quarters left", []sample{window, room(2700)}, false},
		{"a fifth left", []sample{window, room(720)}, true},
		{"lost", []sample{window, room(-60)}, true},
		{"no window", []sample{room(-60)}, false},
	} {
		if got, groups := r.eval(c.series); got != c.fires {
			t.Errorf("%s: fires %v, want %v (%v)", c.what, got, c.fires, groups)
		}
	}
}
