package engine

import (
	"time"

	"github.com/meilistream/meilistream/sidecar/lookup"
)

// SetLookupBounds sets what a lookup may read (lookup.Bounds) for the
// engines a test makes, and returns what puts them back.
func SetLookupBounds(batch, doc int) (restore func()) {
	was := lookupBounds
	lookupBounds = lookup.Bounds{Batch: batch, Doc: doc}
	return func() { lookupBounds = was }
}

// SetWatchInterval sets how often the jobs' watchdogs look, and returns
// what puts it back.
func SetWatchInterval(d time.Duration) (restore func()) {
	was := watchInterval
	watchInterval = d
	return func() { watchInterval = was }
}
