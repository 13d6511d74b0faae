package jobdef_test

import (
	"testing"

	"github.com/meilistream/meilistream/jobdef"
)

func TestScanOverlapIsADurationOrAPlainNumber(t *testing.T) {
	cases := []struct {
		in    string
		ms    int64
		units float64
		ok    bool
	}{
		{"10s", 10000, 10, true},
		{"", 10000, 10, true}, // the default
		{"5000", 5000, 5000, true},
		{"0", 0, 0, true},
		{"250ms", 250, 0.25, true},
		{"-1s", 0, 0, false},
		{"-3", 0, 0, false},
		{"soon", 0, 0, false},
	}
	for _, c := range cases {
		ms, units, ok := jobdef.ScanOverlapOf(c.in)
		if ok != c.ok || ok && (ms != c.ms || units != c.units) {
			t.Errorf("ScanOverlapOf(%q) = %d ms, %g units, %v; want %d, %g, %v", c.in, ms, units, ok, c.ms, c.units, c.ok)
		}
	}
}
