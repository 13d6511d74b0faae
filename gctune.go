package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
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

// memoryLimitText renders a soft memory limit for the start's log line.
func memoryLimitText(limit int64) string {
	if limit <= 0 || limit == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%dMiB", limit>>20)
}
