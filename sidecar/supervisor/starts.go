package supervisor

import (
	"context"
	"sync"

	"github.com/meilistream/meilistream/sidecar/status"
)

// startSlot is one of Config.MaxStarts, held by one run of a job from
// before it starts until it reads its stream or is paused
// (status.JobStats.Started), its destination fails to prepare, or the run
// ends, whichever comes first.
type startSlot struct {
	sem   chan struct{}
	once  sync.Once
	freed chan struct{}
}

// free gives the slot back. Idempotent; a nil slot has nothing to give.
func (s *startSlot) free() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		<-s.sem
		close(s.freed)
	})
}

// takeStart waits, showing the job queued, for one of the start slots,
// and returns it once taken; the error is ctx's cause when ctx ended first
// (the lease lost, the job stopped or given back). The slot is freed when
// the engine says the job's start is over, and when ctx ends: a run
// cancelled while still starting gives its slot to the next job before it
// has finished stopping, so a start that hangs cannot keep the others
// queued. The caller frees it too when the run returns.
func (s *Supervisor) takeStart(ctx context.Context, st *SupervisedJob) (*startSlot, error) {
	select {
	case s.starts <- struct{}{}:
	default:
		st.setState(StateQueued)
		select {
		case s.starts <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		st.setState(StateRunning)
	}
	// A run starts idle: a phase left by the last run (one that
	// panicked, say) must not free the slot before this one started.
	st.Stats.SetPhase(status.PhaseIdle)
	slot := &startSlot{sem: s.starts, freed: make(chan struct{})}
	st.mu.Lock()
	st.slot = slot
	st.mu.Unlock()
	started := st.Stats.Started()
	go func() {
		select {
		case <-started:
		case <-ctx.Done():
		case <-slot.freed:
		}
		slot.free()
	}()
	return slot, nil
}
