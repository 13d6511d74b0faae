package engine

import (
	"context"
	"sync"
	"time"

	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// chunkWatchEvery is how often a process standing by for jobs whose
// reindex may be shared asks whether one has chunks to claim. A standby
// that noticed a shared reindex seconds late would leave its start to
// the holder alone; a reindex of a few seconds at a sidecar's CPU limit
// then loses a third of what the standby could do.
const chunkWatchEvery = 200 * time.Millisecond

// chunkWatchTimeout bounds one of the watch's reads.
const chunkWatchTimeout = 10 * time.Second

// chunkWatch tells a process's idle claimants when their job has chunks
// published, from one read every chunkWatchEvery for all of them
// (jobstate.JobsWithChunks): an idle standby costs MongoDB one read a
// poll per process, not one per job, and notices a shared reindex within
// a poll. The loop runs only while a claimant waits.
type chunkWatch struct {
	store *jobstate.Store
	every time.Duration

	mu      sync.Mutex
	waiters map[*chunkWaiter]struct{}
	running bool
}

// chunkWaiter is one idle claimant: its job, the hash it claims for, and
// the channel closed when there may be chunks to claim.
type chunkWaiter struct {
	job, hash string
	wake      chan struct{}
}

func newChunkWatch(store *jobstate.Store, every time.Duration) *chunkWatch {
	return &chunkWatch{store: store, every: every, waiters: map[*chunkWaiter]struct{}{}}
}

// wait returns once job has chunks published for hash (or the watch
// could not tell: the claimant then asks itself, and says why it could
// not), or with ctx's cause when ctx ends first.
func (w *chunkWatch) wait(ctx context.Context, job, hash string) error {
	cw := &chunkWaiter{job: job, hash: hash, wake: make(chan struct{})}
	w.mu.Lock()
	w.waiters[cw] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	select {
	case <-cw.wake:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		delete(w.waiters, cw)
		w.mu.Unlock()
		return context.Cause(ctx)
	}
}

// loop reads, every w.every while anyone waits, which of the waiters'
// jobs have chunks, and wakes their waiters; a failed read wakes every
// waiter, whose own claim then meets the failure and reports it.
func (w *chunkWatch) loop() {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if len(w.waiters) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		jobs := make(map[string]string, len(w.waiters))
		for cw := range w.waiters {
			jobs[cw.job] = cw.hash
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), chunkWatchTimeout)
		has, err := w.store.JobsWithChunks(ctx, jobs)
		cancel()
		w.mu.Lock()
		for cw := range w.waiters {
			if err != nil || (has[cw.job] && jobs[cw.job] == cw.hash) {
				delete(w.waiters, cw)
				close(cw.wake)
			}
		}
		w.mu.Unlock()
	}
}
