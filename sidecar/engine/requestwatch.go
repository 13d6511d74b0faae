package engine

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// requestSweep is how often the expired requests of a process's jobs are
// deleted (a client that died leaves its request behind).
const requestSweep = time.Minute

// requestWatch looks for the requests of `meilistream retry`, `pause`,
// `resume`, `reindex` and `verify --repair` waiting for any job this
// process holds, in one query for all of them, and tells each job with
// one to take it (its request taker claims it). A job reading a change
// stream takes a request when the stream reads its arrival; what the
// stream cannot show (a request left running by a holder that went away,
// an arrival read while the stream reopened) this look-up finds, every
// RetryPoll*RetryFallback. Before, each job's taker asked by itself at
// that pace, and a process holding hundreds of idle jobs made hundreds of
// findAndModify a fallback period and as many deletes of expired requests
// a minute; now it makes one find and, a minute, one delete. The loop
// runs only while some job is watched.
type requestWatch struct {
	store *jobstate.Store
	every time.Duration
	log   hclog.Logger

	mu      sync.Mutex
	jobs    map[*watchedJob]struct{}
	running bool
	wake    chan struct{}
}

// watchedJob is one job's entry in the watch: its name, its holder's
// lease epoch (a request running under an earlier one is taken again) and
// how to tell its taker.
type watchedJob struct {
	name  string
	epoch int64
	kick  func()
}

func newRequestWatch(store *jobstate.Store, every time.Duration, log hclog.Logger) *requestWatch {
	return &requestWatch{store: store, every: every, log: log, jobs: map[*watchedJob]struct{}{}, wake: make(chan struct{}, 1)}
}

// add watches job (held at epoch) until the returned remove is called;
// kick is called, from the watch's goroutine, when a request waits for it.
func (w *requestWatch) add(job string, epoch int64, kick func()) (remove func()) {
	j := &watchedJob{name: job, epoch: epoch, kick: kick}
	w.mu.Lock()
	w.jobs[j] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			delete(w.jobs, j)
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		})
	}
}

func (w *requestWatch) loop() {
	t := time.NewTimer(w.every)
	defer t.Stop()
	var swept time.Time
	failing := false
	for {
		due := false
		select {
		case <-t.C:
			due = true
		case <-w.wake: // a job left: the last one out ends the loop now
		}
		w.mu.Lock()
		if len(w.jobs) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		if !due {
			w.mu.Unlock()
			continue // the others keep their pace
		}
		epochs := make(map[string]int64, len(w.jobs))
		kicks := make(map[string][]func(), len(w.jobs))
		names := make([]string, 0, len(w.jobs))
		for j := range w.jobs {
			if _, ok := epochs[j.name]; !ok {
				names = append(names, j.name)
			}
			epochs[j.name] = j.epoch
			kicks[j.name] = append(kicks[j.name], j.kick)
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.every)
		if time.Since(swept) >= requestSweep {
			swept = time.Now()
			if err := w.store.DropExpiredRequestsOf(ctx, names); err != nil {
				w.log.Warn("deleting expired requests failed; trying again in a minute", "jobs", len(names), "error", err)
			}
		}
		waiting, err := w.store.RequestsWaiting(ctx, epochs)
		cancel()
		if err != nil && !failing {
			w.log.Warn("looking for requests to the jobs held here failed; trying again", "jobs", len(names), "error", err)
		}
		failing = err != nil
		for _, name := range waiting {
			for _, kick := range kicks[name] {
				kick()
			}
		}
		t.Reset(w.every)
	}
}
