package main

import (
	"flag"
	"io"
	"slices"
	"testing"
	"time"
)

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
		wait time.Duration
	}{
		{[]string{"books"}, []string{"books"}, 0},
		{[]string{"books", "--wait", "5m"}, []string{"books"}, 5 * time.Minute},
		{[]string{"--wait=5m", "books"}, []string{"books"}, 5 * time.Minute},
		{[]string{"a", "--wait", "1s", "b"}, []string{"a", "b"}, time.Second},
		{[]string{"--", "--wait"}, []string{"--wait"}, 0},
		{[]string{"a", "--", "-b"}, []string{"a", "-b"}, 0},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		wait := fs.Duration("wait", 0, "")
		got, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(got, tc.want) || *wait != tc.wait {
			t.Errorf("parseInterspersed(%q) = %q, wait %s, %v; want %q, wait %s", tc.args, got, *wait, err, tc.want, tc.wait)
		}
	}
}

func TestParseReindexFlags(t *testing.T) {
	f, name, err := parseReindexFlags([]string{"books", "--inplace", "--wait"})
	if err != nil || name != "books" || f.mode() != "inplace" || !f.wait || f.timeout != defaultReindexTimeout {
		t.Errorf("got %+v %q %v", f, name, err)
	}
	if _, _, err := parseReindexFlags([]string{"books", "--inplace", "--swap"}); err == nil {
		t.Error("--inplace with --swap: no error")
	}
	if _, _, err := parseReindexFlags([]string{"books", "--timeout", "0s"}); err == nil {
		t.Error("--timeout 0s: no error")
	}
	if _, _, err := parseReindexFlags(nil); err == nil {
		t.Error("no name: no error")
	}
}
