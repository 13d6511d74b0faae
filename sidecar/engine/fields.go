package engine

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// chunkFind is the find of a reindex's chunk of up to n documents: in _id
// order, one reply, and trimmed to the job's fields when it declares them,
// as the stream trims its events' documents (stream.Projection), so the
// transform sees the same document either way.
func chunkFind(job *transform.Job, n int) *options.FindOptionsBuilder {
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(n)).SetBatchSize(int32(n))
	if p := stream.Projection(job); p != nil {
		opts.SetProjection(p)
	}
	return opts
}

// retryFind is the find of the documents a retry runs again: trimmed
// alike.
func retryFind(job *transform.Job) *options.FindOptionsBuilder {
	opts := options.Find()
	if p := stream.Projection(job); p != nil {
		opts.SetProjection(p)
	}
	return opts
}
