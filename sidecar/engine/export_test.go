package engine

// SetLookupBounds sets what a lookup may read (lookup.go) for a test, and
// returns what puts them back.
func SetLookupBounds(batch, doc int) (restore func()) {
	b, d := maxLookupBatchBytes, maxLookupDocBytes
	maxLookupBatchBytes, maxLookupDocBytes = batch, doc
	return func() { maxLookupBatchBytes, maxLookupDocBytes = b, d }
}
