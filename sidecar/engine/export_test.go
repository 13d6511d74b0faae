package engine

import "time"

// SetLookupBounds sets what a lookup may read (Bounds) for the
// engines a test makes, and returns what puts them back.
func SetLookupBounds(batch, doc int) (restore func()) {
	was := lookupBounds
	lookupBounds = Bounds{Batch: batch, Doc: doc}
	return func() { lookupBounds = was }
}

// SetWatchInterval sets how often the jobs' watchdogs look, and returns
// what puts it back.
func SetWatchInterval(d time.Duration) (restore func()) {
	was := watchInterval
	watchInterval = d
	return func() { watchInterval = was }
}

// SetTimeoutRetryBase sets the wait before the first automatic retry of
// a document that ran out of time, and returns what puts it back.
func SetTimeoutRetryBase(d time.Duration) (restore func()) {
	was := timeoutRetryBase
	timeoutRetryBase = d
	return func() { timeoutRetryBase = was }
}

// NewReader is newReader, for the reader's own tests.
var NewReader = newReader

// JustBefore is justBefore, for its own test.
var JustBefore = justBefore

// ClaimsDone is how many chunks of shared reindexes e did.
func ClaimsDone(e *Engine) int64 { return e.claimsDone.Load() }
