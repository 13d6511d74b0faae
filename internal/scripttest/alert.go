package scripttest

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	Cmds["alert-fires"] = cmdAlertFires
}

// cmdAlertFires: [!] alert-fires [-timeout D] NAME evaluates the expression
// of alert NAME, as docs/metrics.md documents it, on the running sidecar's
// /metrics (MEILISTREAM_READY_FILE) until it fires (or, negated, until it
// does not), so the documented rule is tested against what the sidecar
// serves. It evaluates the rules' own shape, AGG by (LABELS) (SELECTOR)
// OP NUMBER with AGG max, min or sum, the NUMBER possibly a share of a
// series (NUMBER * scalar(max(SELECTOR))), at one instant ("for:" is the
// alert manager's, not evaluated); any other expression fails the script
// rather than pass unexamined.
func cmdAlertFires(ts *testscript.TestScript, neg bool, args []string) {
	timeout := 30 * time.Second
	if len(args) == 3 && args[0] == "-timeout" {
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		timeout, args = d, args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: [!] alert-fires [-timeout D] NAME")
	}
	doc, err := os.ReadFile(filepath.Join(ts.Getenv("REPO"), "docs", "metrics.md"))
	ts.Check(err)
	m := regexp.MustCompile(`(?m)^\s+- alert: ` + regexp.QuoteMeta(args[0]) + `\b.*\n\s+expr: (.+)$`).FindSubmatch(doc)
	if m == nil {
		ts.Fatalf("docs/metrics.md has no alert %s with an expr", args[0])
	}
	rule, err := parseRule(string(m[1]))
	if err != nil {
		ts.Fatalf("alert %s: %v", args[0], err)
	}
	deadline := time.Now().Add(timeout)
	last := "no ready file"
	for {
		if addr, err := os.ReadFile(ts.Getenv("MEILISTREAM_READY_FILE")); err == nil && len(strings.TrimSpace(string(addr))) > 0 {
			series, err := scrape("http://" + strings.TrimSpace(string(addr)) + "/metrics")
			if err != nil {
				last = err.Error()
			} else {
				fires, groups := rule.eval(series)
				last = fmt.Sprintf("%s: %v", m[1], groups)
				if fires != neg {
					ts.Logf("alert %s: %s", args[0], last)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("alert %s does not %s within %s; last: %s", args[0], map[bool]string{false: "fire", true: "stop firing"}[neg], timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type alertRule struct {
	agg, op string
	by      []string
	name    string
	match   []labelMatch
	bound   float64
	// of, when set, makes the bound a share of a series: bound *
	// scalar(max(of)), as the headroom rule compares with the window.
	of *alertRule
}

type labelMatch struct {
	key, op, value string
}

var ruleRE = regexp.MustCompile(`^(max|min|sum) by \(([a-z_, ]*)\) \(([a-z_:]+)(\{[^}]*\})?\) (==|!=|>=|<=|>|<) (-?[0-9.]+)(?: \* scalar\(max\(([a-z_:]+)(\{[^}]*\})?\)\))?$`)

func parseRule(expr string) (*alertRule, error) {
	m := ruleRE.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return nil, fmt.Errorf("cannot evaluate %q: only AGG by (LABELS) (SELECTOR) OP NUMBER [* scalar(max(SELECTOR))]", expr)
	}
	r := &alertRule{agg: m[1], name: m[3], op: m[5]}
	if m[7] != "" {
		r.of = &alertRule{agg: "max", name: m[7]}
		var err error
		if r.of.match, err = parseMatchers(m[8]); err != nil {
			return nil, err
		}
	}
	for _, l := range strings.Split(m[2], ",") {
		if l = strings.TrimSpace(l); l != "" {
			r.by = append(r.by, l)
		}
	}
	var err error
	if r.match, err = parseMatchers(m[4]); err != nil {
		return nil, err
	}
	r.bound, err = strconv.ParseFloat(m[6], 64)
	return r, err
}

// parseMatchers reads a selector's {label="value", ...}, "" for none.
func parseMatchers(sel string) ([]labelMatch, error) {
	if sel == "" {
		return nil, nil
	}
	var out []labelMatch
	for _, part := range strings.Split(strings.Trim(sel, "{}"), ",") {
		mm := regexp.MustCompile(`^\s*([a-z_]+)\s*(=~|!=|=)\s*"([^"]*)"\s*$`).FindStringSubmatch(part)
		if mm == nil {
			return nil, fmt.Errorf("cannot read the matcher %q", part)
		}
		out = append(out, labelMatch{mm[1], mm[2], mm[3]})
	}
	return out, nil
}

// groupsOf aggregates the rule's series by its labels: each group's
// value (the key "" when it groups by none).
func (r *alertRule) groupsOf(series []sample) map[string]float64 {
	groups := map[string]float64{}
	for _, s := range series {
		if s.name != r.name || !r.matches(s.labels) {
			continue
		}
		var key []string
		for _, l := range r.by {
			key = append(key, l+"="+s.labels[l])
		}
		k := strings.Join(key, ",")
		v, seen := groups[k]
		switch {
		case !seen:
			v = s.value
		case r.agg == "sum":
			v += s.value
		case r.agg == "max":
			v = max(v, s.value)
		case r.agg == "min":
			v = min(v, s.value)
		}
		groups[k] = v
	}
	return groups
}

// eval applies the rule: true when any group's aggregate passes the
// comparison; groups says each group's value.
func (r *alertRule) eval(series []sample) (bool, map[string]float64) {
	groups := r.groupsOf(series)
	bound := r.bound
	if r.of != nil {
		// scalar() of nothing is NaN, which no comparison passes.
		of := r.of.groupsOf(series)
		v, ok := of[""]
		if !ok {
			v = math.NaN()
		}
		bound *= v
		groups["(bound)"] = bound
	}
	fires := false
	for k, v := range groups {
		if k == "(bound)" {
			continue
		}
		switch r.op {
		case "==":
			fires = fires || v == bound
		case "!=":
			fires = fires || v != bound
		case ">":
			fires = fires || v > bound
		case "<":
			fires = fires || v < bound
		case ">=":
			fires = fires || v >= bound
		case "<=":
			fires = fires || v <= bound
		}
	}
	return fires, groups
}

func (r *alertRule) matches(labels map[string]string) bool {
	for _, m := range r.match {
		v := labels[m.key]
		switch m.op {
		case "=":
			if v != m.value {
				return false
			}
		case "!=":
			if v == m.value {
				return false
			}
		case "=~":
			if !regexp.MustCompile("^(?:" + m.value + ")$").MatchString(v) {
				return false
			}
		}
	}
	return true
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads the Prometheus text format of url into samples.
func scrape(url string) ([]sample, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []sample
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, l := range labelRE.FindAllStringSubmatch(m[3], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out, sc.Err()
}
