package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/transform"
)

// readAfter reads up to n documents of coll (job's collection) after last
// (none: from the first) in _id order, trimmed as the stream trims them,
// by the same walk a reindex's chunks take (BSON order across types
// included), without marks: for verify, which compares what it read with
// the destination instead of writing it. final says nothing follows. ctx
// may carry a session (the reads then tell its operation time).
func readAfter(ctx context.Context, coll *mongo.Collection, job *transform.Job, last bson.RawValue, n int) (items []Item, final bool, err error) {
	c := &Chain{src: Source{Job: job}, coll: coll, what: "verify"}
	ch, err := c.readAfter(ctx, nil, last, n)
	if err != nil {
		return nil, false, err
	}
	return ch.Items, ch.Final, nil
}
