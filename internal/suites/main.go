// Command suites runs the official clients' own integration tests against
// the project's test servers: go.mongodb.org/mongo-driver/v2's
// internal/integration tests ("driver") and its unified spec runner
// ("unified", which needs the JSON files of github.com/mongodb/specifications),
// and github.com/meilisearch/meilisearch-go's integration tests ("meili").
//
//	go run ./internal/suites [-suite driver,unified,meili] [-run REGEXP]
//	                         [-specs DIR] [-timeout 3m] [-dir-timeout 20m]
//	                         [-j 1] [-failures] [-out results.json]
//
// Each top-level test (each spec directory, for the spec runners) runs in
// its own process of the test binary, so an os.Exit or a hang (killed after
// -timeout) costs that test only. The driver's processes each get a fresh
// mongotest (a test that leaves a fail point on spoils no other);
// meilisearch-go's share one meilitest, one process after the other, as
// their CI shares one Meilisearch and the tests expect what earlier ones
// left (-fresh gives them fresh ones too). The servers run in this process.
// It prints, per group (the test's file, or the spec directory), how many
// top-level tests and how many cases (tests without subtests) passed,
// failed and were skipped. The modules come from the module cache (`go mod
// download`); copies, binaries and each process's output (logs/) are kept
// under the user cache directory (-work). See README.md for the figures.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "suites:", err)
		os.Exit(1)
	}
}

type config struct {
	suites     []*suite
	run        *regexp.Regexp
	specs      string
	specsRev   string
	work       string
	timeout    time.Duration
	dirTimeout time.Duration
	jobs       int
	fresh      bool
	failures   bool
	out        string
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("suites", flag.ContinueOnError)
	fs.SetOutput(stderr)
	names := fs.String("suite", "driver,unified,meili", "suites to run, comma-separated: driver, unified, meili")
	runRe := fs.String("run", "", "run only the units whose top-level test or group matches this regular expression")
	specs := fs.String("specs", "", "a checkout of github.com/mongodb/specifications, or its git directory (for the driver's spec tests)")
	rev := fs.String("specs-rev", specsRev, "the commit exported from a -specs git directory")
	work := fs.String("work", "", "directory for module copies, test binaries and logs (default: the user cache directory)")
	timeout := fs.Duration("timeout", 3*time.Minute, "time allowed to one top-level test")
	dirTimeout := fs.Duration("dir-timeout", 20*time.Minute, "time allowed to one directory of spec tests")
	jobs := fs.Int("j", 1, "test processes run at once (the shared suite, meili, runs one at a time)")
	fresh := fs.Bool("fresh", false, "give every test process fresh servers, meili's too (it shares one pair by default, as its CI does)")
	failures := fs.Bool("failures", false, "print every failed case with the start of its output")
	out := fs.String("out", "", "write every case's outcome to this JSON file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := &config{specs: *specs, specsRev: *rev, work: *work, timeout: *timeout, dirTimeout: *dirTimeout, jobs: max(*jobs, 1), fresh: *fresh, failures: *failures, out: *out}
	for _, n := range strings.Split(*names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for i := range allSuites {
			if allSuites[i].name == n {
				c.suites = append(c.suites, &allSuites[i])
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-suite: unknown suite %q (driver, unified, meili)", n)
		}
	}
	if *runRe != "" {
		re, err := regexp.Compile(*runRe)
		if err != nil {
			return nil, fmt.Errorf("-run: %w", err)
		}
		c.run = re
	}
	if c.work == "" {
		dir, err := workDir()
		if err != nil {
			return nil, fmt.Errorf("find a work directory (give -work): %w", err)
		}
		c.work = dir
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "suites: "+format+"\n", a...) }
	var units []unit
	bins := map[*suite]string{}
	roots := map[*suite]string{}
	for _, s := range c.suites {
		root, bin, err := prepare(ctx, s.mod, s.pkg, c.work, logf)
		if err != nil {
			return err
		}
		if s.mod == driverModule {
			if c.specs == "" {
				logf("no -specs: the driver's spec tests (suite unified, and driver's TestUnifiedSpecs) will fail to find their files")
			} else if err := provideSpecs(ctx, root, c.specs, c.specsRev); err != nil {
				return err
			}
		}
		us, err := listUnits(s, root)
		if err != nil {
			return err
		}
		for _, u := range us {
			if c.run == nil || c.run.MatchString(u.top) || c.run.MatchString(u.group) {
				units = append(units, u)
			}
		}
		bins[s], roots[s] = bin, root
	}
	logf("%d test processes to run", len(units))

	results := make([]unitResult, len(units))
	one := func(i int, sv *servers) {
		u := units[i]
		start := time.Now()
		r := runUnit(ctx, u, bins[u.suite], roots[u.suite], c, sv)
		results[i] = r
		logf("[%d/%d] %s: %s (%s)", i+1, len(units), u, r.summary(), time.Since(start).Round(time.Second))
	}
	// Shared suites: one goroutine, one pair of servers, in order.
	for _, s := range c.suites {
		if !s.shared || c.fresh {
			continue
		}
		var sv *servers
		for i, u := range units {
			if u.suite != s || ctx.Err() != nil {
				continue
			}
			if sv == nil {
				var err error
				if sv, err = startServers(s); err != nil {
					return err
				}
			}
			one(i, sv)
		}
		if sv != nil {
			sv.close()
		}
	}
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range c.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(units) || ctx.Err() != nil {
					return
				}
				if units[i].suite.shared && !c.fresh {
					continue
				}
				one(i, nil)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	report(stdout, units, results, c.failures)
	if c.out != "" {
		if err := writeJSON(c.out, units, results); err != nil {
			return fmt.Errorf("write %s: %w", c.out, err)
		}
	}
	return nil
}

// tally counts outcomes.
type tally struct {
	topPass, topFail, topSkip int
	pass, fail, skip          int
}

func (t *tally) add(o *tally) {
	t.topPass += o.topPass
	t.topFail += o.topFail
	t.topSkip += o.topSkip
	t.pass += o.pass
	t.fail += o.fail
	t.skip += o.skip
}

func report(w io.Writer, units []unit, results []unitResult, failures bool) {
	type key struct{ suite, group string }
	groups := map[key]*tally{}
	var keys []key
	totals := map[string]*tally{}
	for i, u := range units {
		k := key{u.suite.name, u.group}
		g := groups[k]
		if g == nil {
			g = &tally{}
			groups[k] = g
			keys = append(keys, k)
		}
		t := results[i].tally()
		g.add(&t)
		if totals[u.suite.name] == nil {
			totals[u.suite.name] = &tally{}
		}
		totals[u.suite.name].add(&t)
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].suite < keys[j].suite })
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "suite\tgroup\ttests pass/fail/skip\tcases pass/fail/skip")
	last := ""
	flush := func(s string) {
		if t := totals[s]; t != nil {
			fmt.Fprintf(tw, "%s\tTOTAL\t%d/%d/%d\t%d/%d/%d\n", s, t.topPass, t.topFail, t.topSkip, t.pass, t.fail, t.skip)
		}
	}
	for _, k := range keys {
		if last != "" && k.suite != last {
			flush(last)
		}
		last = k.suite
		g := groups[k]
		fmt.Fprintf(tw, "%s\t%s\t%d/%d/%d\t%d/%d/%d\n", k.suite, k.group, g.topPass, g.topFail, g.topSkip, g.pass, g.fail, g.skip)
	}
	flush(last)
	tw.Flush()
	if !failures {
		return
	}
	for i, u := range units {
		r := results[i]
		for _, name := range r.failed() {
			fmt.Fprintf(w, "\nFAIL %s: %s\n", u.suite.name, name)
			for _, l := range r.out.logs[name] {
				fmt.Fprintf(w, "    %s\n", l)
			}
		}
		if r.note != "" {
			fmt.Fprintf(w, "\nNOTE %s: %s\n", u, r.note)
		}
	}
}

func writeJSON(path string, units []unit, results []unitResult) error {
	type caseOut struct {
		Suite, Group, Name string
		Outcome            Outcome
	}
	var cases []caseOut
	for i, u := range units {
		r := results[i]
		for _, name := range r.out.leaves() {
			cases = append(cases, caseOut{u.suite.name, u.group, name, r.out.results[name]})
		}
		if len(r.out.results) == 0 {
			cases = append(cases, caseOut{u.suite.name, u.group, u.top, Unfinished})
		}
	}
	data, err := json.MarshalIndent(cases, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
