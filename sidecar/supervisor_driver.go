package sidecar

import (
	"context"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/transform"
)

// SinkFactory builds the destination of one job: the Meilisearch sink for a
// search job, the replica sink for a mirror job. The main package provides
// it, because sidecar must not import replicate. An error with code
// CONFIG_INVALID (say, a mirror job with no replica configured) fails the
// job until its definition changes; other errors restart it with backoff.
type SinkFactory func(job *transform.Job) (Sink, error)

// EngineDriver is the production JobDriver: standby is lease.Manager.Wait,
// a run is Engine.Run into the job's sink.
type EngineDriver struct {
	Leases *lease.Manager
	Engine *Engine
	Sinks  SinkFactory
}

var _ JobDriver = (*EngineDriver)(nil)

// Standby waits until the job's lease is ours.
func (d *EngineDriver) Standby(ctx context.Context, name string) (HeldLease, error) {
	l, err := d.Leases.Wait(ctx, name)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Run builds the job's sink and runs the engine under the held lease.
func (d *EngineDriver) Run(ctx context.Context, def JobDef, h HeldLease, st *SupervisedJob) error {
	job, ok := def.Spec.(*transform.Job)
	if !ok || job == nil {
		return errs.New(errs.ConfigInvalid, def.Name, "no loaded transform for the job")
	}
	el, ok := h.(EngineLease)
	if !ok {
		return errs.New(errs.Failed, def.Name, "lease of type %T cannot fence the engine's writes", h)
	}
	sink, err := d.Sinks(job)
	if err != nil {
		return errs.WithJob(job.Name, err)
	}
	return d.Engine.Run(ctx, job, sink, el, st.Stats)
}
