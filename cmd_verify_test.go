package main

import (
	"strings"
	"testing"
)

func TestVerifyArgsTakeFlagsBeforeAndAfterTheName(t *testing.T) {
	for _, c := range []struct {
		args []string
		want verifyArgs
		err  string
	}{
		{args: []string{"books"}, want: verifyArgs{job: "books", show: defaultVerifyShow}},
		{args: []string{"books", "--repair", "--json"}, want: verifyArgs{job: "books", repair: true, json: true, show: defaultVerifyShow}},
		{args: []string{"--rate", "500", "books", "--show=3"}, want: verifyArgs{job: "books", rate: 500, show: 3}},
		{args: []string{"-rate=0.5", "books"}, want: verifyArgs{job: "books", rate: 0.5, show: defaultVerifyShow}},
		{args: nil, err: "want a job name"},
		{args: []string{"a", "b"}, err: `want one job name, got "a" and "b"`},
		{args: []string{"books", "--rate", "-1"}, err: "--rate wants documents per second"},
		{args: []string{"books", "--rate", "fast"}, err: "invalid value"},
		{args: []string{"books", "--show", "-2"}, err: "--show wants"},
		{args: []string{"books", "--bogus"}, err: "not defined"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			got, err := parseVerifyArgs(c.args)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("parseVerifyArgs(%q) = %v, want an error with %q", c.args, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseVerifyArgs(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
			}
		})
	}
}
