package engine

import (
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// retryFind is the find of the documents a retry or a lean stretch reads
// by _id: trimmed to the job's fields when it declares them, as the stream
// trims its events' documents (stream.Projection), so the transform sees
// the same document either way.
func retryFind(job *transform.Job) *options.FindOptionsBuilder {
	opts := options.Find()
	if p := stream.Projection(&job.Job); p != nil {
		opts.SetProjection(p)
	}
	return opts
}
