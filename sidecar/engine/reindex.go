package engine

import (
	"context"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/watermark"
	"github.com/meilistream/meilistream/transform"
)

// Reindex rebuilds job's destination from the collection under l
// (`meilistream reindex NAME`): it follows the job's stream, interleaves a
// reindex (continuing a checkpointed one of the same transform), and stops
// cleanly once the rebuilt destination is live and its position recorded.
// Cancelling ctx stops it cleanly (error: ctx's cause); a later Reindex or
// Run resumes from the checkpoint.
func (e *Engine) Reindex(ctx context.Context, job *transform.Job, dst sink.Sink, l Lease, stats *status.JobStats) (watermark.Summary, error) {
	e.setKind(job.Name, job.Kind.String())
	sum, err := e.run(ctx, job, dst, l, stats, true)
	stats.SetPhase(status.PhaseIdle)
	if err == nil && sum == nil {
		err = context.Cause(ctx)
		if err == nil {
			err = errs.New(errs.Failed, job.Name, "the reindex stopped before it was done")
		}
	}
	if err != nil {
		err = errs.WithJob(job.Name, err)
		stats.SetError(err)
		return watermark.Summary{}, err
	}
	return *sum, nil
}
