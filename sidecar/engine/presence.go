package engine

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/transform"
)

// presenceLives is how many presence intervals a record counts as live
// after its last refresh: a process that misses one refresh (a slow write,
// a pause) still counts; one that died stops counting soon after.
const presenceLives = 3

// Presence keeps this process's presence record of one job in the state
// collection (jobstate, "presence"): refreshed every interval by the
// server's clock while the job runs here, holder or standby, and deleted
// by Close. The rollout rule (olderRule) reads the other processes' records: a
// pod with an older transform stands by only while a live pod runs the
// newer one.
type Presence struct {
	store   *jobstate.Store
	job     string
	hash    string
	process string
	every   time.Duration
	log     hclog.Logger

	mu      sync.Mutex
	waiting string

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// keepPresence starts keeping the presence record of process (its lease holder
// identity) for job (with job's hash), refreshed every interval, until
// Close. A failed write is tried again at the next refresh: presence is a
// hint for other pods, never a reason to stop the job.
func keepPresence(store *jobstate.Store, job *transform.Job, process string, every time.Duration, log hclog.Logger) *Presence {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Presence{store: store, job: job.Name, hash: job.Hash, process: process, every: every, log: log,
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go p.loop(ctx)
	return p
}

// Waiting sets why this process stands by for a process with a newer
// transform ("" when it no longer does), written at once so `meilistream
// status` shows it.
func (p *Presence) Waiting(reason string) {
	p.mu.Lock()
	changed := p.waiting != reason
	p.waiting = reason
	p.mu.Unlock()
	if changed {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// Close stops the refreshes and deletes the record, trying for two
// seconds at most: it runs on shutdown after the drain (3/4 of
// MEILISTREAM_SHUTDOWN_TIMEOUT) and the lease's release (an eighth), so
// it fits the last eighth of the default 20s; one second was too little
// for a loaded machine. A record left behind stops counting by itself.
// Idempotent.
func (p *Presence) Close() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := p.store.RemovePresence(ctx, p.job, p.process); err != nil {
			p.log.Warn("deleting this process's presence record failed; it stops counting by itself", "job", p.job, "error", err)
		}
	})
}

// presenceWriteTimeout bounds one refresh of a presence record, and so
// how long Close may wait for one in flight.
const presenceWriteTimeout = 2 * time.Second

func (p *Presence) loop(ctx context.Context) {
	defer close(p.done)
	every := p.every
	t := time.NewTimer(0)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		p.mu.Lock()
		waiting := p.waiting
		p.mu.Unlock()
		// Not cancelled by Close: a write abandoned mid-way may still be
		// applied by the server after Close's delete, leaving a record
		// that counts as live for a few refreshes. Close waits for it
		// instead (bounded: presenceWriteTimeout).
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(every, presenceWriteTimeout))
		err := p.store.MarkPresent(wctx, p.job, p.process, p.hash, waiting, presenceLives*every)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failed:
			p.log.Warn("recording that this process runs the job failed; trying again", "job", p.job, "error", err)
			failed = true
		case err == nil && failed:
			p.log.Info("recording that this process runs the job works again", "job", p.job)
			failed = false
		}
		t.Reset(every)
	}
}
