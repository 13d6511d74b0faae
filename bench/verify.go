package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
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
// verify must find no drift. With -verify-rounds N the sidecar reindexes
// again (reindex --wait) before each further round, so each verify has a
// reindex of its own moment beside it; with -against OLD, OLD's verify
// runs in each round too, against the same index, which going first
// alternating.
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

	env := append(os.Environ(),
		"MEILISTREAM_MONGODB_URI="+c.mongoURI,
		"MEILISTREAM_MONGODB_DATABASE=bench",
		"MEILISTREAM_MEILI_URL="+c.meiliURL,
		"MEILISTREAM_TRANSFORMS="+transforms,
		"MEILISTREAM_INDEX_PREFIX="+r.prefix,
		"MEILISTREAM_STATE_COLLECTION="+r.state,
		"MEILISTREAM_LOG_LEVEL=warn",
	)
	bins := []string{c.sidecar}
	if c.against != "" {
		bins = append(bins, c.against)
	}
	rounds := max(c.verifyRounds, 1)
	perDoc := func(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }
	ratios := make([][]float64, len(bins))
	fmt.Printf("meilistream bench -verify: %d articles (~1 KB BSON each, %d published), %d CPUs, load average %s at the start\n",
		c.docs, published, runtime.NumCPU(), load0)
	for round := 0; round < rounds; round++ {
		if round > 0 {
			// Each round's reference: a reindex of the same collection
			// by the same sidecar, asked through its holder as an
			// operator would, counted from the request until recorded.
			fmt.Fprintf(os.Stderr, "round %d: reindexing %d articles ...\n", round+1, c.docs)
			cmd := exec.CommandContext(ctx, c.sidecar, "reindex", "articles", "--wait")
			cmd.Env = env
			r.begin()
			if out, err := cmd.CombinedOutput(); err != nil {
				return fail(fmt.Errorf("meilistream reindex --wait: %w\n%s", err, out))
			}
			r.reindex = r.end()
		}
		fmt.Printf("round %d: reindex %.1f µs sidecar CPU per document (%.1f system), %s wall (%.0f docs/s); per 1000 documents %.0f page faults, %.0f context switches\n", round+1,
			perDoc(r.reindex.cpu, int64(c.docs)), perDoc(r.reindex.sys, int64(c.docs)), r.reindex.wall.Round(time.Millisecond), float64(c.docs)/r.reindex.wall.Seconds(),
			1000*float64(r.reindex.faults)/float64(c.docs), 1000*float64(r.reindex.switches)/float64(c.docs))
		order := make([]int, len(bins))
		for k := range order {
			order[k] = k
			if round%2 == 1 {
				order[k] = len(bins) - 1 - k // which goes first alternates
			}
		}
		for _, k := range order {
			fmt.Fprintf(os.Stderr, "round %d: verifying %d articles with %s ...\n", round+1, c.docs, bins[k])
			res, err := runVerify(ctx, c, r, bins[k], env, k == 0 && round == 0)
			if err != nil {
				return fail(err)
			}
			ratio := perDoc(res.cpu, res.checked) / max(perDoc(r.reindex.cpu, int64(c.docs)), 1e-9)
			ratios[k] = append(ratios[k], ratio)
			fmt.Printf("round %d: verify (%s) %.1f µs CPU per document (its own process; %.1f system), %s wall (%.0f docs/s), %d checked, no drift; per 1000 documents %.0f page faults, %.0f context switches; the sidecar meanwhile %.1f µs per document; verify / reindex %.2f\n",
				round+1, bins[k], perDoc(res.cpu, res.checked), perDoc(res.sys, res.checked), res.wall.Round(time.Millisecond), float64(res.checked)/res.wall.Seconds(), res.checked,
				1000*float64(res.faults)/float64(max(res.checked, 1)), 1000*float64(res.switches)/float64(max(res.checked, 1)),
				perDoc(res.holder.cpu, res.checked), ratio)
		}
	}
	if err := r.stop(); err != nil {
		return fail(fmt.Errorf("sidecar exit: %w", err))
	}
	fmt.Printf("load average %s at the end\n", loadavg())
	for k, bin := range bins {
		lo, mid, hi := spread(ratios[k])
		fmt.Printf("verify / reindex, CPU per document (%s): median %.2f (%.2f to %.2f, %d rounds; the goal: at most 1)\n",
			bin, mid, lo, hi, len(ratios[k]))
	}
	if len(bins) == 2 {
		var xs []float64
		for i := range ratios[0] {
			xs = append(xs, ratios[0][i]/ratios[1][i])
		}
		lo, mid, hi := spread(xs)
		fmt.Printf("verify CPU per document, %s / %s, same rounds: median %.2f (%.2f to %.2f)\n", bins[0], bins[1], mid, lo, hi)
	}
	if c.profile != "" {
		fmt.Fprintf(os.Stderr, "profiles: go tool pprof -top %[1]s/meilistream %[1]s/reindex.pprof (and verify.pprof)\n", c.profile)
		return printBreakdown(c.profile, "reindex.pprof", "verify.pprof")
	}
	return nil
}

// verifyRun is one verify process's cost.
type verifyRun struct {
	checked          int64
	cpu, sys         time.Duration // its user and system time, and the system's part
	wall             time.Duration
	faults, switches int64 // its page faults and context switches
	holder           phase // the sidecar's meanwhile
}

// runVerify runs `bin verify articles --json` against r's index (profiled
// when profile is set and the bench was given -cpuprofile or
// -memprofile) and checks it found no drift.
func runVerify(ctx context.Context, c config, r *sidecar, bin string, env []string, profile bool) (verifyRun, error) {
	cmd := exec.CommandContext(ctx, bin, "verify", "articles", "--json")
	cmd.Env = env
	if profile && c.profile != "" {
		cmd.Env = append(cmd.Env, profileDirEnv+"="+c.profile)
	}
	if profile && c.memprofile != "" {
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
		return verifyRun{}, fmt.Errorf("%s verify: %w\n%s", bin, err, stderr.String())
	}
	var v verifyResult
	if err := json.Unmarshal(out, &v); err != nil {
		return verifyRun{}, fmt.Errorf("%s verify printed %q: %w", bin, out, err)
	}
	if v.Missing+v.Stale+v.Extra != 0 {
		return verifyRun{}, fmt.Errorf("%s verify found drift in a whole index: %s", bin, out)
	}
	run := verifyRun{checked: v.Checked, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), sys: cmd.ProcessState.SystemTime(), wall: wall, holder: holder}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.faults, run.switches = ru.Minflt+ru.Majflt, ru.Nvcsw+ru.Nivcsw
	}
	return run, nil
}

// spread is the least, the median and the greatest of xs.
func spread(xs []float64) (lo, mid, hi float64) {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	mid = s[n/2]
	if n%2 == 0 {
		mid = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], mid, s[n-1]
}
