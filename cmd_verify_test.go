package main

import (
	"strings"
	"testing"
)

func TestVerifyFlagsGoBeforeOrAfterTheName(t *testing.T) {
	var c command
	for _, cc := range commands() {
		if cc.name == "verify" {
			c = cc
		}
	}
	for _, tc := range []struct {
		args []string
		want verifyFlags
		err  string
	}{
		{args: []string{"books"}, want: verifyFlags{show: defaultVerifyShow}},
		{args: []string{"books", "--repair", "--json"}, want: verifyFlags{repair: true, json: true, show: defaultVerifyShow}},
		{args: []string{"--rate", "500", "books", "--show=3"}, want: verifyFlags{rate: 500, show: 3}},
		{args: []string{"-rate=0.5", "books"}, want: verifyFlags{rate: 0.5, show: defaultVerifyShow}},
		{args: []string{"books", "--rate", "-1"}, err: "wants documents per second"},
		{args: []string{"books", "--rate", "fast"}, err: "wants documents per second"},
		{args: []string{"books", "--show", "-2"}, err: "wants a number of ids"},
		{args: []string{"books", "--bogus"}, err: "not defined"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var f verifyFlags
			c.flags = f.define
			pos, err := parseArgs(newFlagSet(c), tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parse %q = %v, want an error with %q", tc.args, err, tc.err)
				}
				return
			}
			if err != nil || f != tc.want || len(pos) != 1 || pos[0] != "books" {
				t.Fatalf("parse %q = %+v %q, %v; want %+v", tc.args, f, pos, err, tc.want)
			}
		})
	}
}
