package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
)

// verifyResult is what `meilistream verify --json` printed, the part the
// bench reads.
type verifyResult struct {
	Checked, Missing, Stale, Extra int64
	DurationMs                     int64
}

// runVerifyBench is the -verify workload: one sidecar reindexes the
// articles (its CPU per document and rate, as the default workload counts
// them), then, while it follows, `meilistream verify articles` compares
// the index with the collection in a process of its own: its documents
// verified per second and its CPU per document (user and system time of
// that process, from its rusage), beside the reindex's of the same
// collection in the same run, and what the verify cost the sidecar (its
// CPU meanwhile: the wait documents it answers). The index is whole, so the
// verify must find no drift.
func runVerifyBench(ctx context.Context, c config, tmp, transforms string, ms meilisearch.ServiceManager, published int) error {
	r := &sidecar{label: "", bin: c.sidecar, prefix: "benchv_", state: "meilistream_v", ready: filepath.Join(tmp, "readyv")}
	var extra []string
	if c.profile != "" {
		extra = append(extra, profileDirEnv+"="+c.profile)
	}
	if err := launch(ctx, c, ms, r, transforms, extra...); err != nil {
		return err
	}
	defer r.stop()
	runs := []*sidecar{r}
	fail := func(err error) error {
		r.stop()
		return fmt.Errorf("%w\nsidecar log (tail):\n%s", err, tail(r.log(), 3000))
	}
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		b, err := os.ReadFile(r.ready)
		return err == nil && len(b) > 0, nil
	}); err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	load0 := loadavg()
	fmt.Fprintf(os.Stderr, "reindexing %d articles ...\n", c.docs)
	toggleProfile(c, r.pid) // start reindex.pprof
	r.begin()
	if err := waitReindexed(ctx, ms, runs, published); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}
	toggleProfile(c, r.pid) // stop reindex.pprof
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		addr, _ := os.ReadFile(r.ready)
		return following(strings.TrimSpace(string(addr)))
	}); err != nil {
		return fail(fmt.Errorf("wait for follow: %w", err))
	}

	fmt.Fprintf(os.Stderr, "verifying %d articles ...\n", c.docs)
	cmd := exec.CommandContext(ctx, c.sidecar, "verify", "articles", "--json")
	cmd.Env = append(os.Environ(),
		"MEILISTREAM_MONGODB_URI="+c.mongoURI,
		"MEILISTREAM_MONGODB_DATABASE=bench",
		"MEILISTREAM_MEILI_URL="+c.meiliURL,
		"MEILISTREAM_TRANSFORMS="+transforms,
		"MEILISTREAM_INDEX_PREFIX="+r.prefix,
		"MEILISTREAM_STATE_COLLECTION="+r.state,
		"MEILISTREAM_LOG_LEVEL=warn",
	)
	if c.profile != "" {
		cmd.Env = append(cmd.Env, profileDirEnv+"="+c.profile)
	}
	if c.memprofile != "" {
		cmd.Env = append(cmd.Env, memProfileDirEnv+"="+c.memprofile)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r.begin()
	t0 := time.Now()
	out, err := cmd.Output()
	wall := time.Since(t0)
	holder := r.end()
	if err != nil {
		return fail(fmt.Errorf("meilistream verify: %w\n%s", err, stderr.String()))
	}
	var v verifyResult
	if err := json.Unmarshal(out, &v); err != nil {
		return fail(fmt.Errorf("meilistream verify printed %q: %w", out, err))
	}
	if v.Missing+v.Stale+v.Extra != 0 {
		return fail(fmt.Errorf("meilistream verify found drift in a whole index: %s", out))
	}
	vcpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if err := r.stop(); err != nil {
		return fail(fmt.Errorf("sidecar exit: %w", err))
	}

	perDoc := func(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }
	fmt.Printf("meilistream bench -verify: %d articles (~1 KB BSON each, %d published), %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, published, runtime.NumCPU(), load0, loadavg())
	fmt.Printf("reindex: %.1f µs sidecar CPU per document, %s wall (%.0f docs/s)\n",
		perDoc(r.reindex.cpu, int64(c.docs)), r.reindex.wall.Round(time.Millisecond), float64(c.docs)/r.reindex.wall.Seconds())
	fmt.Printf("verify:  %.1f µs CPU per document (its own process), %s wall (%.0f docs/s), %d checked, no drift; the sidecar meanwhile %.1f µs per document\n",
		perDoc(vcpu, v.Checked), wall.Round(time.Millisecond), float64(v.Checked)/wall.Seconds(), v.Checked, perDoc(holder.cpu, v.Checked))
	fmt.Printf("verify / reindex: CPU per document %.2f (the goal: at most 1), docs/s %.2f\n",
		perDoc(vcpu, v.Checked)/max(perDoc(r.reindex.cpu, int64(c.docs)), 1e-9),
		(float64(v.Checked)/wall.Seconds())/(float64(c.docs)/r.reindex.wall.Seconds()))
	if c.profile != "" {
		fmt.Fprintf(os.Stderr, "profiles: go tool pprof -top %[1]s/meilistream %[1]s/reindex.pprof (and verify.pprof)\n", c.profile)
		return printBreakdown(c.profile, "reindex.pprof", "verify.pprof")
	}
	return nil
}
