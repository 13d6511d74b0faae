package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/transform"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errs.New(errs.ConfigInvalid, "", "bad"), exitUsage},
		{fmt.Errorf("load: %w", errs.New(errs.ConfigInvalid, "articles", "bad option")), exitUsage},
		{errs.Wrap(errs.Failed, "articles", errs.New(errs.ConfigInvalid, "articles", "bad key"), "prepare"), exitUsage},
		{errs.Wrap(errs.Failed, "articles", errs.New(errs.Running, "articles", "held"), "acquire"), exitRunning},
		{errs.New(errs.Running, "articles", "held by b until 12:00"), exitRunning},
		{errs.New(errs.LeaseLost, "articles", "taken over"), exitFailed},
		{errs.New(errs.HistoryLost, "articles", "too old"), exitFailed},
		{fmt.Errorf("plain"), exitFailed},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		environ []string
		code    int
		stdout  string
		stderr  string
	}{
		{"no arguments runs run, which needs its configuration", nil, nil, exitUsage, "", "MEILISTREAM_MONGODB_URI: not set"},
		{"help lists the commands", []string{"--help"}, nil, exitOK, "Commands:", ""},
		{"a command's help needs no configuration", []string{"reindex", "-h"}, []string{"MEILISTREAM_LEASE=x"}, exitOK, "Usage: meilistream reindex NAME", ""},
		{"an unknown command is bad usage", []string{"sync"}, nil, exitUsage, "", `unknown command "sync"`},
		{"an unknown flag of a command is bad usage before the configuration", []string{"retry", "books", "--frobnicate"}, nil, exitUsage, "", "flag provided but not defined: -frobnicate"},
		{"a flag's bad value is bad usage", []string{"retry", "--wait=soon", "books"}, nil, exitUsage, "", `invalid value "soon" for flag -wait`},
		{"a job command wants its name", []string{"errors", "--json"}, nil, exitUsage, "", "meilistream errors: want a job name"},
		{"-h after -- is an argument, not help", []string{"status", "--", "-h"}, nil, exitUsage, "", `takes no arguments, got "-h"`},
		{"version prints the version", []string{"version"}, nil, exitOK, "meilistream ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, tt.environ, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q lacks %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	tests := []struct {
		name string
		args []string
		pos  []string
		json bool
		lim  int
	}{
		{"flags after the name", []string{"books", "--json", "--limit", "3"}, []string{"books"}, true, 3},
		{"flags before the name", []string{"-limit=3", "books"}, []string{"books"}, false, 3},
		{"flags on both sides", []string{"--json", "a", "--limit=2", "b"}, []string{"a", "b"}, true, 2},
		{"everything after -- is positional", []string{"a", "--", "--json", "-h"}, []string{"a", "--json", "-h"}, false, defaultErrorsLimit},
		{"no arguments", nil, nil, false, defaultErrorsLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f errorsFlags
			c, _ := find(commands(), "errors")
			c.flags = f.define
			pos, err := parseArgs(newFlagSet(c), tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(pos, " ") != strings.Join(tt.pos, " ") || f.json != tt.json || f.limit != tt.lim {
				t.Errorf("got %q json=%v limit=%d, want %q json=%v limit=%d", pos, f.json, f.limit, tt.pos, tt.json, tt.lim)
			}
		})
	}
}

// TestManualListsEveryVariable keeps the manual honest: every
// configuration variable and _FILE variant is documented in
// docs/configuration.md, with its default.
func TestManualListsEveryVariable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, v := range config.Variables {
		if !strings.Contains(page, "| `"+v.Name()+"` |") {
			t.Errorf("docs/configuration.md has no row for %s in its table of variables", v.Name())
		}
		if v.File && !strings.Contains(page, "`"+v.Name()+"_FILE`") {
			t.Errorf("docs/configuration.md does not document %s_FILE", v.Name())
		}
	}
}

// The manual's list of a job's options is made from transform.JobOptions:
// the text between jobOptionsBegin and jobOptionsEnd, in README.md or a
// page under docs/, must be transform.JobOptionsMarkdown() exactly (the
// failure prints it). Until a page holds that block, README.md must at
// least name every MEILISTREAM_JOB_<NAME>_<OPTION> option.
const (
	jobOptionsBegin = "<!-- job options: made by transform.JobOptionsMarkdown; `go test -run TestManualListsEveryJobOption .` prints it -->"
	jobOptionsEnd   = "<!-- end of job options -->"
)

func TestManualListsEveryJobOption(t *testing.T) {
	pages := []string{"README.md"}
	_ = filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	want := transform.JobOptionsMarkdown()
	blocks := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			continue
		}
		text := string(b)
		for {
			i := strings.Index(text, jobOptionsBegin)
			if i < 0 {
				break
			}
			text = text[i+len(jobOptionsBegin):]
			end := strings.Index(text, jobOptionsEnd)
			if end < 0 {
				t.Fatalf("%s: %q without %q", page, jobOptionsBegin, jobOptionsEnd)
			}
			blocks++
			if got := strings.TrimSpace(text[:end]); got != strings.TrimSpace(want) {
				t.Errorf("%s: the job options differ from transform.JobOptions; the block should read:\n%s\n%s%s", page, jobOptionsBegin, want, jobOptionsEnd)
			}
			text = text[end:]
		}
	}
	if blocks > 0 {
		return
	}
	t.Logf("no page holds the generated block %q yet; checking that README.md names every option", jobOptionsBegin)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range transform.EnvOptions() {
		if !strings.Contains(string(readme), "`"+strings.ToUpper(o)+"`") {
			t.Errorf("README.md does not document the per-job option %s", strings.ToUpper(o))
		}
	}
}
