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

// presenceWriteTimeout bounds one refresh of the presence records, and so
// how long Close may wait for one in flight.
const presenceWriteTimeout = 2 * time.Second

// Presence keeps this process's presence record of one job in the state
// collection (jobstate, "presence"): refreshed every interval by the
// server's clock while the job runs here, holder or standby, and deleted
// by Close. The rollout rule (olderRule) reads the other processes' records: a
// pod with an older transform stands by only while a live pod runs the
// newer one.
type Presence struct {
	k    *presences
	job  string
	hash string

	// waiting and dirty are guarded by k.mu.
	waiting string
	dirty   bool // to be written at the next wake, not only at the next refresh

	once sync.Once
}

// presences refreshes all of one process's presence records from one
// goroutine, in one bulk write per interval. A record says only "this
// process runs this job with this hash (and waits for this reason), live
// until then by the server's clock"; nothing in it depends on which
// goroutine wrote it, so one loop for the process keeps each record's
// meaning as long as it writes a record only while its job is kept
// (between KeepPresence and Close), at least once an interval, and never
// after Close's delete. A process holding hundreds of jobs then makes one
// write an interval rather than one per job, and parks one goroutine
// rather than one per job. The loop runs only while it has records to keep.
type presences struct {
	store   *jobstate.Store
	process string
	every   time.Duration
	log     hclog.Logger

	// writing is held across each write, and by Close while it takes its
	// record out of kept, so Close waits for a write that may still carry
	// it rather than cancel it: a write abandoned mid-way could be applied
	// by the server after Close's delete, leaving a record that counts as
	// live for a few refreshes.
	writing sync.Mutex

	mu      sync.Mutex
	kept    map[*Presence]struct{}
	running bool
	wake    chan struct{}
}

func newPresences(store *jobstate.Store, process string, every time.Duration, log hclog.Logger) *presences {
	return &presences{store: store, process: process, every: every, log: log,
		kept: map[*Presence]struct{}{}, wake: make(chan struct{}, 1)}
}

// keep starts keeping the presence record of the process (its lease holder
// identity) for job (with job's hash), written at once and then refreshed
// every interval, until Close. A failed write is tried again at the next
// refresh: presence is a hint for other pods, never a reason to stop the
// job.
func (k *presences) keep(job *transform.Job) *Presence {
	p := &Presence{k: k, job: job.Name, hash: job.Hash, dirty: true}
	k.mu.Lock()
	k.kept[p] = struct{}{}
	if !k.running {
		k.running = true
		go k.loop()
	}
	k.mu.Unlock()
	k.poke()
	return p
}

func (k *presences) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Waiting sets why this process stands by for a process with a newer
// transform ("" when it no longer does), written at once so `meilistream
// status` shows it.
func (p *Presence) Waiting(reason string) {
	p.k.mu.Lock()
	changed := p.waiting != reason
	p.waiting = reason
	if changed {
		p.dirty = true
	}
	p.k.mu.Unlock()
	if changed {
		p.k.poke()
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
		k := p.k
		// Out of kept between writes: no write in flight carries it, no
		// later one will.
		k.writing.Lock()
		k.mu.Lock()
		delete(k.kept, p)
		k.mu.Unlock()
		k.writing.Unlock()
		k.poke() // the last record out ends the loop now
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := k.store.RemovePresence(ctx, p.job, k.process); err != nil {
			k.log.Warn("deleting this process's presence record failed; it stops counting by itself", "job", p.job, "error", err)
		}
	})
}

// loop writes the records that changed as soon as it is woken, and all of
// them every interval; it ends when no record is kept.
func (k *presences) loop() {
	t := time.NewTimer(k.every)
	defer t.Stop()
	failed := false
	for {
		all := false
		select {
		case <-t.C:
			all = true
			t.Reset(k.every)
		case <-k.wake:
		}
		k.writing.Lock()
		marks, more := k.marks(all)
		if !more {
			k.writing.Unlock()
			return
		}
		err := k.write(marks)
		k.writing.Unlock()
		switch {
		case err != nil && !failed:
			k.log.Warn("recording that this process runs its jobs failed; trying again", "jobs", len(marks), "error", err)
			failed = true
		case err == nil && failed && all:
			k.log.Info("recording that this process runs its jobs works again", "jobs", len(marks))
			failed = false
		}
	}
}

// marks returns what to write (every kept record with all, else those
// changed since they were last written) and whether any record is kept;
// when none is, the loop is marked stopped under the same lock, so keep
// starts another.
func (k *presences) marks(all bool) ([]jobstate.Mark, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.kept) == 0 {
		k.running = false
		return nil, false
	}
	var marks []jobstate.Mark
	for p := range k.kept {
		if all || p.dirty {
			marks = append(marks, jobstate.Mark{Job: p.job, Hash: p.hash, Waiting: p.waiting})
			p.dirty = false
		}
	}
	return marks, true
}

// write is not cancelled by Close (see writing), only bounded.
func (k *presences) write(marks []jobstate.Mark) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(k.every, presenceWriteTimeout))
	defer cancel()
	return k.store.MarkPresentAll(ctx, k.process, marks, presenceLives*k.every)
}
