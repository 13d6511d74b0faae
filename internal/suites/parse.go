package main

import (
	"bufio"
	"io"
	"strings"
)

// Outcome is the result of one test or subtest.
type Outcome string

// The outcomes a case can have. Unfinished is a case that started but never
// reported (its process hung past the timeout, exited or crashed): it
// counts as a failure.
const (
	Pass       Outcome = "pass"
	Fail       Outcome = "fail"
	Skip       Outcome = "skip"
	Unfinished Outcome = "unfinished"
)

// marker starts the framing lines of `-test.v=test2json` output (the
// testing package's test2json mode, src/testing/testing.go "markFraming"):
// with it a test's own output cannot be mistaken for a result line.
const marker = "\x16"

// processOutput is what one test process printed, parsed.
type processOutput struct {
	// results maps every test and subtest name to its outcome, in the
	// order they started (order).
	results map[string]Outcome
	order   []string
	// logs keeps the output lines of each failed or unfinished case, up to
	// a bound, for the report.
	logs map[string][]string
}

const maxLogLines = 40

// parseOutput reads the output of a test binary run with -test.v=test2json.
func parseOutput(r io.Reader) *processOutput {
	out := &processOutput{results: map[string]Outcome{}, logs: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	current := ""
	pending := map[string][]string{}
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, marker) {
			if current != "" && len(pending[current]) < maxLogLines {
				pending[current] = append(pending[current], line)
			}
			continue
		}
		line = line[len(marker):]
		switch {
		case strings.HasPrefix(line, "=== RUN   "):
			name := strings.TrimSpace(line[len("=== RUN   "):])
			if _, seen := out.results[name]; !seen {
				out.order = append(out.order, name)
			}
			out.results[name] = Unfinished
			current = name
		case strings.HasPrefix(line, "=== NAME  "), strings.HasPrefix(line, "=== CONT  "), strings.HasPrefix(line, "=== PAUSE "):
			current = strings.TrimSpace(line[len("=== NAME  "):])
		case strings.HasPrefix(line, "--- "):
			rest := line[len("--- "):]
			verb, name, ok := strings.Cut(rest, ": ")
			if !ok {
				continue
			}
			if i := strings.LastIndex(name, " ("); i >= 0 {
				name = name[:i]
			}
			var o Outcome
			switch verb {
			case "PASS":
				o = Pass
			case "FAIL":
				o = Fail
			case "SKIP":
				o = Skip
			default:
				continue
			}
			if _, seen := out.results[name]; !seen {
				out.order = append(out.order, name)
			}
			out.results[name] = o
			if o == Fail {
				out.logs[name] = pending[name]
			}
			delete(pending, name)
		}
	}
	for name, lines := range pending {
		if out.results[name] == Unfinished {
			out.logs[name] = lines
		}
	}
	return out
}

// leaves returns the cases that have no subtests of their own, in start
// order: they are what is counted, so that a parent failing because a
// child failed is not counted twice.
func (p *processOutput) leaves() []string {
	parent := map[string]bool{}
	for _, name := range p.order {
		for i := strings.LastIndex(name, "/"); i > 0; i = strings.LastIndex(name[:i], "/") {
			parent[name[:i]] = true
		}
	}
	var out []string
	for _, name := range p.order {
		if !parent[name] {
			out = append(out, name)
		}
	}
	return out
}
