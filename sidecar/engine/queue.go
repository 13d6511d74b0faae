package engine

import (
	"time"

	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// Enqueuer is implemented by a sink that counts what it has enqueued at
// its destination and not yet seen processed (the Meilisearch sink: its
// tasks and their request bytes, which it keeps under a bound).
type Enqueuer interface {
	Enqueued() (tasks int, bytes int64)
}

// QueueObserver is implemented by an Observer that shows the queue of an
// Enqueuer sink.
type QueueObserver interface {
	ObserveQueue(job string, tasks int, bytes int64)
}

// watchQueue publishes the queue of dst (when it is an Enqueuer) in the
// job's figures and metrics every lagInterval while the job runs; the
// function it returns stops it, publishing the last depth seen.
func (e *Engine) watchQueue(job string, dst sink.Sink, stats *status.JobStats) (stop func()) {
	q, ok := enqueuer(dst)
	if !ok {
		return func() {}
	}
	publish := func() {
		tasks, bytes := q.Enqueued()
		stats.Update(func(s *status.JobSnapshot) { s.Queue = &status.Queue{Tasks: tasks, Bytes: bytes} })
		if o, ok := e.obs.(QueueObserver); ok {
			o.ObserveQueue(job, tasks, bytes)
		}
	}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(lagInterval)
		defer t.Stop()
		for {
			publish()
			select {
			case <-t.C:
			case <-done:
				publish()
				return
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// enqueuer finds an Enqueuer in dst or the sinks it wraps (a wrapper's
// Unwrap() sink.Sink).
func enqueuer(dst sink.Sink) (Enqueuer, bool) {
	for i := 0; dst != nil && i < 8; i++ {
		if q, ok := dst.(Enqueuer); ok {
			return q, true
		}
		u, ok := dst.(interface{ Unwrap() sink.Sink })
		if !ok {
			break
		}
		dst = u.Unwrap()
	}
	return nil, false
}
