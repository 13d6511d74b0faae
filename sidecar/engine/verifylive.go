package engine

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/pipe"
)

// prompted records the position at a verify's prompt mark (tok) once
// every change before it is durable, so the verify waiting to re-check a
// differing document sees the position pass its read without waiting for
// the next PositionInterval. A running reindex records its own positions
// at its marks; a prompt then waits for those.
func (f *follower) prompted(tok bson.Raw, wall time.Time) error {
	if f.snap != nil {
		return nil
	}
	if err := f.flush(); err != nil {
		return err
	}
	f.posReq = time.Now()
	return f.p.Submit(&pipe.Flight{Durable: f.recordAfter(tok, wall)})
}
