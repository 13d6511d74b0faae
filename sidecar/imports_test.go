package sidecar_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/meilistream/meilistream"

// The import direction the package docs state: for each package, what it
// must not depend on, directly or through another package. A sink never
// reaches another sink, the engine or the supervisor; the engine reaches
// neither a sink, the supervisor, the HTTP side, the configuration nor
// Prometheus, and the packages it is made of (lookup, prepare, deadletter,
// watermark, rollout, stream) reach neither the engine nor any of those;
// nothing but the main package reaches the configuration.
var forbidden = map[string][]string{
	"sidecar/status":     {"sidecar/", "lease", "transform", "replicate"}, // a leaf: of this module, only internal/errs and internal/clip
	"sidecar/jobstate":   {"sidecar/engine", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/engine":     {"sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "github.com/prometheus/"},
	"sidecar/sink":       {"sidecar/", "transform", "lease", "replicate", "internal/"}, // a leaf
	"sidecar/pipe":       {"sidecar/engine", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "sidecar/jobstate", "sidecar/stream", "replicate", "github.com/prometheus/"},
	"sidecar/stream":     {"sidecar/", "lease", "replicate", "github.com/prometheus/"}, // of this module, only transform and internal/
	"sidecar/lookup":     {"sidecar/", "lease", "replicate", "github.com/prometheus/"}, // of this module, only transform and internal/errs
	"sidecar/prepare":    {"sidecar/engine", "sidecar/lookup", "sidecar/deadletter", "sidecar/watermark", "sidecar/rollout", "sidecar/jobstate", "sidecar/pipe", "sidecar/stream", "sidecar/status", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/deadletter": {"sidecar/engine", "sidecar/lookup", "sidecar/prepare", "sidecar/watermark", "sidecar/rollout", "sidecar/stream", "sidecar/status", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/watermark":  {"sidecar/engine", "sidecar/lookup", "sidecar/rollout", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/rollout":    {"sidecar/engine", "sidecar/lookup", "sidecar/prepare", "sidecar/deadletter", "sidecar/watermark", "sidecar/pipe", "sidecar/sink", "sidecar/stream", "sidecar/status", "sidecar/config", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate", "lease", "github.com/prometheus/"},
	"sidecar/meili":      {"replicate", "sidecar/engine", "sidecar/lookup", "sidecar/prepare", "sidecar/deadletter", "sidecar/watermark", "sidecar/rollout", "sidecar/pipe", "sidecar/supervisor", "sidecar/httpapi", "github.com/prometheus/"},
	"replicate":          {"sidecar/meili", "sidecar/engine", "sidecar/lookup", "sidecar/prepare", "sidecar/deadletter", "sidecar/watermark", "sidecar/rollout", "sidecar/pipe", "sidecar/supervisor", "sidecar/httpapi", "github.com/prometheus/"},
	"sidecar/supervisor": {"sidecar/httpapi", "sidecar/meili", "replicate", "github.com/prometheus/"},
	"sidecar/httpapi":    {"sidecar/supervisor", "sidecar/meili", "replicate"},
	"sidecar/durable":    {"sidecar/engine", "sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "sidecar/config", "replicate", "github.com/prometheus/"},
	"sidecar/config":     {"sidecar/supervisor", "sidecar/httpapi", "sidecar/meili", "replicate"},
}

func TestImportDirection(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	full := func(p string) string {
		if strings.Contains(p, ".") {
			return p // another module's path
		}
		return module + "/" + p
	}
	for pkg, bad := range forbidden {
		d, ok := deps[full(pkg)]
		if !ok {
			t.Errorf("go list does not know %s", full(pkg))
			continue
		}
		for _, dep := range d {
			for _, b := range bad {
				if dep == full(b) || strings.HasPrefix(dep, full(b)) && (strings.HasSuffix(b, "/") || strings.HasPrefix(dep, full(b)+"/")) {
					t.Errorf("%s depends on %s, which its package doc forbids", pkg, dep)
				}
			}
		}
	}
	// Only the main package (and tests) reach the configuration; only
	// tests reach the test helpers.
	for pkg, d := range deps {
		for _, dep := range d {
			if dep == full("sidecar/config") && pkg != module {
				t.Errorf("%s depends on sidecar/config; only the main package may", pkg)
			}
			if dep == full("internal/testutil") {
				t.Errorf("%s depends on internal/testutil, which is for tests", pkg)
			}
		}
	}
}
