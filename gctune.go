package main

import (
	"os"
	"runtime/debug"
)

// GC defaults of the sidecar when the environment sets none: the transform
// allocates a lot of short-lived garbage, so with Go's default GOGC=100 the
// collector, and the scavenger returning memory the next cycle allocates
// again, take a large share of the sidecar's CPU. GOGC=400 trades some
// memory for it (`go run ./bench` measures both); the soft memory limit
// makes the collector work harder rather than let the heap grow past it.
// GOGC and GOMEMLIMIT, when set, win.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 192 << 20
)

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
