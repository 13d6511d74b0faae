package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/status"
)

// A job that has work pending must see it move: a flush armed for what
// waits, the destination answering what was sent, the stream bringing
// back the marks written. The watchdog is the proof that it does: while a
// job follows (and reindexes), it looks every watchInterval at what is
// pending and when any of it last moved (a batch made durable, or work
// begun after none), and when that is longer ago than the bound the job
// is stalled: /status says "stalled" with what is pending, /readyz fails
// naming the job, the log says so once, meilistream_job_stalled is 1 and
// meilistream_stalls_total counts it. The first batch made durable clears
// it.
//
// The bound is 10 × flushInterval (ten flushes missed) plus the time the
// destination may take to answer a batch: the slowest recent batch, from
// its send until durable (decaying by a tenth with each batch, so one slow
// batch does not widen it for the rest of the run), and at least
// Config.WatchdogAnswer (20 s by default: a Meilisearch busy with a large
// task, a replica electing a primary). With the defaults a job is stalled
// after 30 s without progress.

// DefaultWatchdogAnswer is the least time the watchdog allows the
// destination to answer a batch.
const DefaultWatchdogAnswer = 20 * time.Second

// watchInterval is how often a job's watchdog looks.
var watchInterval = time.Second

// watchdog is one job run's: what its follow loop and pipe report, and
// the looking goroutine's verdict.
type watchdog struct {
	flush time.Duration // the job's flushInterval
	floor time.Duration // Config.WatchdogAnswer
	// more reports the work the follow loop tracks in atomics: fan-out
	// tasks not yet durable, marks written and not yet read back.
	more func() (fanouts int64, marks int32)

	mu        sync.Mutex
	unflushed int           // changes and related values waiting for a flush
	inPipe    int           // flights submitted and not yet durable
	moved     time.Time     // when work last moved, or began after none
	answer    time.Duration // the slowest recent batch's answer, decaying
	idle      bool          // nothing was pending at the last report
	stalled   *status.Stall
}

func newWatchdog(flush, floor time.Duration, more func() (int64, int32)) *watchdog {
	return &watchdog{flush: flush, floor: floor, more: more, moved: time.Now(), idle: true}
}

// queued reports the follow loop's work waiting for a flush.
func (w *watchdog) queued(n int) {
	w.mu.Lock()
	w.unflushed = n
	w.began()
	w.mu.Unlock()
}

// submitted reports a flight handed to the pipe.
func (w *watchdog) submitted() {
	w.mu.Lock()
	w.inPipe++
	w.began()
	w.mu.Unlock()
}

// durable reports a flight made durable, answered after answer (0: it
// sent nothing).
func (w *watchdog) durable(answer time.Duration) {
	w.mu.Lock()
	w.inPipe--
	w.moved = time.Now()
	w.answer = max(w.answer-w.answer/10, answer)
	if w.inPipe == 0 && w.unflushed == 0 {
		w.idle = true // the next work's age counts from its own start
	}
	w.mu.Unlock()
}

// began notes the moment work appears after none: its age counts from
// then. Called with mu held.
func (w *watchdog) began() {
	busy := w.unflushed > 0 || w.inPipe > 0
	if busy && w.idle {
		w.moved = time.Now()
	}
	w.idle = !busy
}

// idleNow says nothing is pending or in flight: everything the stream
// read is durable.
func (w *watchdog) idleNow() bool {
	fan, _ := w.more()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unflushed == 0 && w.inPipe == 0 && fan == 0
}

// bound is how long pending work may go without moving.
func (w *watchdog) bound() time.Duration {
	return 10*w.flush + max(w.answer, w.floor)
}

// check returns the stall found now (nil: none), and whether it began or
// ended with this check.
func (w *watchdog) check(now time.Time) (st *status.Stall, changed bool) {
	fan, marks := w.more()
	w.mu.Lock()
	defer w.mu.Unlock()
	pending := w.pendingText(fan, marks)
	if pending == "" {
		w.idle = true
	}
	bound := w.bound()
	if pending == "" || now.Sub(w.moved) <= bound {
		changed = w.stalled != nil
		w.stalled = nil
		return nil, changed
	}
	if w.stalled == nil {
		changed = true
		w.stalled = &status.Stall{Since: w.moved, BoundSeconds: bound.Seconds()}
	}
	w.stalled.Pending = pending
	s := *w.stalled
	return &s, changed
}

// pendingText says what is pending, "" for nothing. Called with mu held.
func (w *watchdog) pendingText(fan int64, marks int32) string {
	var parts []string
	add := func(n int64, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(int64(w.unflushed), "changes or related values waiting for a flush")
	add(int64(w.inPipe), "batches sent or queued and not yet durable")
	add(fan, "fan-outs of related changes not yet durable")
	add(int64(marks), "marks written and not yet read back from the change stream")
	return strings.Join(parts, ", ")
}

// watch runs the job's watchdog until ctx ends or stop is called, telling
// stats, the observer and the log what it finds; at its end the job is no
// longer stalled.
func (e *Engine) watch(ctx context.Context, w *watchdog, job string, stats *status.JobStats, log hclog.Logger) (stop func()) {
	check := func(now time.Time) {
		st, changed := w.check(now)
		// The log first: whoever sees the new state in /status or the
		// metric finds its line already written.
		switch {
		case changed && st != nil:
			log.Warn("job stalled: its pending work has not moved; check the destination and the source (/status shows what is pending)",
				"pending", st.Pending, "since", st.Since.UTC().Format(time.RFC3339Nano), "bound", time.Duration(st.BoundSeconds*float64(time.Second)))
		case changed:
			log.Info("job no longer stalled: its pending work moves again")
		}
		stats.Update(func(s *status.JobSnapshot) { s.Stall = st })
		if changed {
			e.obs.ObserveWatchdog(job, st != nil)
		}
	}
	return e.watchTicks.every(ctx, watchInterval, check, func() {
		if stats.Snapshot().Stall != nil {
			stats.Update(func(s *status.JobSnapshot) { s.Stall = nil })
			e.obs.ObserveWatchdog(job, false)
		}
	})
}

// Submit hands fl to the pipe, reporting it to the watchdog, and its
// durability once it is durable.
func (d *delivery) Submit(fl *pipe.Flight) error {
	w := d.dog
	if w == nil {
		return d.Pipe.Submit(fl)
	}
	w.submitted()
	then := fl.Durable
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		var answer time.Duration
		if at := fl.SentAt(); !at.IsZero() {
			answer = time.Since(at)
		}
		w.durable(answer)
		if then == nil {
			return nil
		}
		return then(ctx, fl)
	}
	return d.Pipe.Submit(fl)
}
