package engine

import (
	"context"
	"time"

	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// QueueObserver is implemented by an Observer that shows the queue of a
// sink that counts one (sink.Sink's Enqueued).
type QueueObserver interface {
	ObserveQueue(job string, tasks int, bytes int64)
}

// watchQueue publishes the queue of dst (when it counts one) in the
// job's figures and metrics every lagInterval while the job runs; the
// function it returns stops it, publishing the last depth seen.
func (e *Engine) watchQueue(job string, dst sink.Sink, stats *status.JobStats) (stop func()) {
	if _, _, counted := dst.Enqueued(); !counted {
		return func() {}
	}
	shown := false
	var lastTasks int
	var lastBytes int64
	publish := func(always bool) {
		tasks, bytes, _ := dst.Enqueued()
		if shown && !always && tasks == lastTasks && bytes == lastBytes {
			return // an idle job's queue stays empty: nothing to write
		}
		shown, lastTasks, lastBytes = true, tasks, bytes
		stats.Update(func(s *status.JobSnapshot) { s.Queue = &status.Queue{Tasks: tasks, Bytes: bytes} })
		if o, ok := e.obs.(QueueObserver); ok {
			o.ObserveQueue(job, tasks, bytes)
		}
	}
	publish(true)
	return e.queueTicks.every(context.Background(), lagInterval, func(time.Time) { publish(false) }, func() { publish(true) })
}
