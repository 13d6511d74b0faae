package sidecar_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/meilistream/meilistream"

// The import rules of the module, kept here and nowhere else: for each
// package, what it must not depend on, directly or through another
// package. A sink never reaches another sink, the engine or the
// supervisor; the engine reaches neither a sink, the supervisor, the HTTP
// side, the configuration nor Prometheus; nothing but the main package
// reaches the configuration.
var forbidden = map[string][]string{
	"jobdef":             {"transform", "sidecar/", "lease", "replicate"}, // of this module, only internal/
	"transform":          {"sidecar/", "lease", "replicate"},
	"sidecar/status":     {"sidecar/", "lease", "transform", "jobdef", "replicate"}, // a leaf: of this module, only internal/errs and internal/clip
	"sidecar/jobstate":   {"sidecar/", "transform", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/engine":     {"sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "github.com/prometheus/"},
	"sidecar/sink":       {"sidecar/", "transform", "jobdef", "lease", "replicate", "internal/"}, // a leaf
	"sidecar/pipe":       {"sidecar/engine", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "sidecar/jobstate", "sidecar/stream", "replicate", "github.com/prometheus/"},
	"sidecar/stream":     {"sidecar/", "transform", "lease", "replicate", "github.com/prometheus/"}, // of this module, only jobdef and internal/
	"sidecar/meili":      {"replicate", "sidecar/engine", "sidecar/pipe", "sidecar/supervisor", "sidecar/httpapi", "transform", "github.com/prometheus/"},
	"replicate":          {"sidecar/meili", "sidecar/engine", "sidecar/pipe", "sidecar/supervisor", "sidecar/httpapi", "transform", "github.com/prometheus/"},
	"sidecar/supervisor": {"sidecar/httpapi", "sidecar/meili", "replicate", "github.com/prometheus/"},
	"sidecar/httpapi":    {"sidecar/supervisor", "sidecar/meili", "replicate"},
	"sidecar/durable":    {"sidecar/engine", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "sidecar/config", "replicate", "github.com/prometheus/"},
	"sidecar/config":     {"sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate"},
	// A leaf the leases and the job state ask: of this module, nothing.
	"internal/capability": {"sidecar/", "lease", "transform", "jobdef", "replicate", "internal/errs", "github.com/prometheus/"},
}

// What a job is, the sinks, the job state and the change stream do not
// link the JavaScript runtime: only transform (and what runs jobs) does.
var gojaFree = []string{"jobdef", "sidecar/meili", "replicate", "sidecar/jobstate", "sidecar/stream", "sidecar/sink", "sidecar/pipe", "sidecar/status"}

const goja = "github.com/dop251/goja"

// maxChain is the longest import chain inside the module, counted in
// packages (main -> config -> engine -> jobstate -> jobdef -> clip is 6):
// a deeper one says a seam is in the wrong place.
const maxChain = 6

type pkgInfo struct {
	name    string   // the package clause: main for a command
	imports []string // of the package itself
	tests   []string // of its tests, in and outside the package
	hasTest bool
	deps    []string // everything it links, transitively
}

func listModule(t *testing.T) map[string]*pkgInfo {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	format := "{{.ImportPath}}\t{{.Name}}\t{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}\t{{len .TestGoFiles}} {{len .XTestGoFiles}}\t{{join .Deps \" \"}}"
	out, err := exec.Command(gobin, "list", "-f", format, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := map[string]*pkgInfo{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs[f[0]] = &pkgInfo{
			name:    f[1],
			imports: strings.Fields(f[2]),
			tests:   strings.Fields(f[3]),
			hasTest: f[4] != "0 0",
			deps:    strings.Fields(f[5]),
		}
	}
	return pkgs
}

// full is p's import path: a path of this module, or another module's.
func full(p string) string {
	if strings.Contains(p, ".") {
		return p
	}
	return module + "/" + p
}

func inModule(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }

func TestImportDirection(t *testing.T) {
	pkgs := listModule(t)
	for pkg, bad := range forbidden {
		p, ok := pkgs[full(pkg)]
		if !ok {
			t.Errorf("go list does not know %s", full(pkg))
			continue
		}
		for _, dep := range p.deps {
			for _, b := range bad {
				if dep == full(b) || strings.HasPrefix(dep, full(b)) && (strings.HasSuffix(b, "/") || strings.HasPrefix(dep, full(b)+"/")) {
					t.Errorf("%s depends on %s, which the import rules forbid", pkg, dep)
				}
			}
		}
	}
	// Only the main package (and tests) reach the configuration; only
	// tests reach the test helpers.
	for pkg, p := range pkgs {
		for _, dep := range p.deps {
			if dep == full("sidecar/config") && pkg != module {
				t.Errorf("%s depends on sidecar/config; only the main package may", pkg)
			}
			if dep == full("internal/testutil") {
				t.Errorf("%s depends on internal/testutil, which is for tests", pkg)
			}
		}
	}
}

func TestNoSinkLinksGoja(t *testing.T) {
	pkgs := listModule(t)
	if p := pkgs[full("transform")]; p == nil || !contains(p.deps, goja) {
		t.Fatalf("transform does not depend on %s: the test would prove nothing", goja)
	}
	for _, pkg := range gojaFree {
		p, ok := pkgs[full(pkg)]
		if !ok {
			t.Errorf("go list does not know %s", full(pkg))
			continue
		}
		for _, dep := range p.deps {
			if dep == goja || strings.HasPrefix(dep, goja+"/") {
				t.Errorf("%s depends on %s", pkg, dep)
				break
			}
		}
	}
}

func TestImportChainIsShort(t *testing.T) {
	pkgs := listModule(t)
	longest := map[string][]string{}
	var chain func(p string, seen map[string]bool) []string
	chain = func(p string, seen map[string]bool) []string {
		if c, ok := longest[p]; ok {
			return c
		}
		if seen[p] {
			t.Fatalf("import cycle through %s", p)
		}
		seen[p] = true
		best := []string{p}
		for _, q := range pkgs[p].imports {
			if _, ok := pkgs[q]; !ok || !inModule(q) {
				continue
			}
			if c := chain(q, seen); len(c)+1 > len(best) {
				best = append([]string{p}, c...)
			}
		}
		longest[p] = best
		return best
	}
	var worst []string
	for p := range pkgs {
		if c := chain(p, map[string]bool{}); len(c) > len(worst) {
			worst = c
		}
	}
	if len(worst) < 3 {
		t.Fatalf("longest chain %v: go list gave no imports, the test would prove nothing", worst)
	}
	if len(worst) > maxChain {
		t.Errorf("the longest import chain inside the module is %d packages, more than %d: %s", len(worst), maxChain, strings.Join(worst, " -> "))
	}
}

// A package earns its place by a seam: its own tests, or more than one
// importer in the module (its tests' imports count; a command has none).
func TestEveryPackageIsASeam(t *testing.T) {
	pkgs := listModule(t)
	importers := map[string]map[string]bool{}
	for p, info := range pkgs {
		for _, q := range append(append([]string(nil), info.imports...), info.tests...) {
			if q == p || !inModule(q) {
				continue
			}
			if importers[q] == nil {
				importers[q] = map[string]bool{}
			}
			importers[q][p] = true
		}
	}
	for p, info := range pkgs {
		if info.name == "main" || info.hasTest || len(importers[p]) > 1 {
			continue
		}
		var by []string
		for q := range importers[p] {
			by = append(by, q)
		}
		t.Errorf("%s has no tests of its own and %d importer(s) %v: make it files of its importer, or give it tests", p, len(by), by)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
