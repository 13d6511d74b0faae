package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// GC defaults of the sidecar when the environment sets none: the transform
// allocates a lot of short-lived garbage, so with Go's default GOGC=100 the
// collector, and the scavenger returning memory the next cycle allocates
// again, take a large share of the sidecar's CPU. GOGC=400 trades some
// memory for it (`go run ./bench` measures both), and the pacer of
// gcpace.go keeps one long mark from setting the goal. The soft memory limit
// makes the collector work harder rather than let the heap grow past it:
// it is a share (memoryLimitRatio) of the container's memory limit, read
// from the cgroup (automemlimit), and read again every
// memoryLimitRefresh so an in-place resize of the pod is followed. Without
// a cgroup limit (a process outside a container), none is set: GOGC alone
// paces the collector. GOGC, GOMEMLIMIT and automemlimit's AUTOMEMLIMIT
// (a ratio, or "off"), when set, win.
const (
	defaultGCPercent   = 400
	memoryLimitRatio   = 0.9
	memoryLimitRefresh = time.Minute
)

// tuneGC applies the GC defaults above; provider says the container's
// memory limit (memlimit.FromCgroup in main). It returns the soft memory
// limit in effect (math.MaxInt64 for none), and the pacer of the default
// GOGC (gcpace.go; nil when the environment sets GOGC).
func tuneGC(provider memlimit.Provider, refresh time.Duration) (int64, *gcPacer) {
	var pacer *gcPacer
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
		pacer = paceGC(defaultGCPercent)
	}
	opts := []memlimit.Option{memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(provider)}
	if refresh > 0 {
		opts = append(opts, memlimit.WithRefreshInterval(context.Background(), refresh))
	}
	// An error (no cgroup here, an unreadable one, a bad AUTOMEMLIMIT)
	// leaves the limit as it was: none, unless GOMEMLIMIT set one.
	_, _ = memlimit.Set(opts...)
	return debug.SetMemoryLimit(-1), pacer
}

// idleCollectEvery is how long `run` goes without a collection before it
// runs one itself (collectWhenIdle), and idleGarbage the least garbage
// that makes one worth its CPU.
const (
	idleCollectEvery = 10 * time.Second
	idleGarbage      = 4 << 20
)

// collectWhenIdle runs a collection whenever none ran for every and the
// heap holds at least idleGarbage (and a quarter of the live heap) more
// than the last one left, until ctx ends. Under GOGC=400 a process holding
// hundreds of idle jobs allocates a few megabytes a second and so
// collects about once a minute: until then it keeps what its starts left,
// the reindexes' garbage (the heap's goal is five times the live heap)
// and the goroutine stacks the starts grew, which each collection halves
// at most. That was half of such a process's memory. A busy process
// collects more often than every and is never touched, nor is an idle
// one with few jobs, whose garbage grows too slowly to be worth the
// cycle's CPU.
func collectWhenIdle(ctx context.Context, every time.Duration) {
	s := []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	read := func() (cycles, garbage, live uint64) {
		metrics.Read(s)
		for _, v := range s {
			if v.Value.Kind() != metrics.KindUint64 {
				return 0, 0, 0
			}
		}
		cycles, live = s[0].Value.Uint64(), s[1].Value.Uint64()
		if objects := s[2].Value.Uint64(); objects > live {
			garbage = objects - live
		}
		return cycles, garbage, live
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, _, _ := read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, garbage, live := read()
		if n != last {
			last = n // it collected by itself
			continue
		}
		if garbage < max(idleGarbage, live/4) {
			continue
		}
		runtime.GC()
		last, _, _ = read()
	}
}

// memoryLimitText renders a soft memory limit for the start's log line.
func memoryLimitText(limit int64) string {
	if limit <= 0 || limit == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%dMiB", limit>>20)
}
