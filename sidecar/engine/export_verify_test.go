package engine

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/sink"
)

// DiffJSON, DiffBSON and PositionPassed are verify's comparisons, for its
// tests.
func DiffJSON(want, have []byte) (string, bool) { return diffJSON(want, have) }

func DiffBSON(id bson.RawValue, want, have bson.Raw) (string, bool) {
	return diffBSON(sink.Write{SourceID: id, Doc: want}, have)
}

func PositionPassed(tok bson.Raw, wall time.Time, at bson.Timestamp) bool {
	return positionPassed(tok, wall, at)
}
