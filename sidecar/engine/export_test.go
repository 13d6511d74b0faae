package engine

// SetLookupBounds sets what a lookup may read (Bounds) for the
// engines a test makes, and returns what puts them back.
func SetLookupBounds(batch, doc int) (restore func()) {
	was := lookupBounds
	lookupBounds = Bounds{Batch: batch, Doc: doc}
	return func() { lookupBounds = was }
}

// NewReader is newReader, for the reader's own tests.
var NewReader = newReader
