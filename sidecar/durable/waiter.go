package durable

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Errors of Wait, for the caller to branch on (the HTTP status, the exit
// code).
var (
	// ErrUnknownJob: no job of that name runs in this process.
	ErrUnknownJob = errors.New("no such job")
	// ErrNoHolder: no process holds the job's lease (free or expired), so
	// nothing makes the job's changes durable.
	ErrNoHolder = errors.New("no process holds the job's lease")
	// ErrBusy: the process already has MaxWaiters waiting.
	ErrBusy = errors.New("too many waits at once")
	// ErrTimeout: the wait's deadline passed first.
	ErrTimeout = errors.New("timed out before the cluster time was durable")
	// ErrClosed: the waiter was closed (the process shuts down).
	ErrClosed = errors.New("shutting down")
)

// DefaultMaxWaiters bounds the waits of one process at once.
const DefaultMaxWaiters = 10000

// DefaultPoll is how often a standby reads a job's recorded durable time
// while someone waits on it.
const DefaultPoll = 20 * time.Millisecond

// recheck is how often a waiter looks again whether this process holds
// the job (a lease taken or lost mid-wait changes which clock moves).
const recheck = 250 * time.Millisecond

// remark is how old the latest wait document may be before a waiter still
// not answered has another written: one written before the holder's
// stream opened (a holder starting at the present) is never seen.
const remark = 2 * time.Second

// Jobs says which jobs this process runs and which of them it holds.
type Jobs interface {
	// Job reports whether name is a job of this process and whether this
	// process holds its lease now. It answers from memory.
	Job(name string) (known, held bool)
}

// Source is what a Waiter needs of MongoDB. Its errors are the driver's.
type Source interface {
	// Mark writes the job's wait document and returns its cluster time.
	Mark(ctx context.Context, job string) (bson.Timestamp, error)
	// Recorded returns the durable time recorded with the job's position,
	// and whether any process holds the job's lease.
	Recorded(ctx context.Context, job string) (durable bson.Timestamp, held bool, err error)
}

// Options configure a Waiter.
type Options struct {
	Jobs   Jobs
	Source Source
	// MaxWaiters bounds the waits at once (default DefaultMaxWaiters).
	MaxWaiters int
	// Poll is how often a standby reads a job's recorded durable time
	// while someone waits (default DefaultPoll).
	Poll time.Duration
	Log  hclog.Logger
}

// Waiter answers waits for this process's jobs. Start it with New, stop
// it with Close.
type Waiter struct {
	o      Options
	n      atomic.Int64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	jobs map[string]*entry
}

// entry is one job's clocks and shared work.
type entry struct {
	mu sync.Mutex
	// mem is advanced by this process's holder, rec by the standby's reads
	// of MongoDB; changed is closed (and replaced) whenever either moves or
	// what is known of the holder changes.
	mem, rec bson.Timestamp
	changed  chan struct{}
	// polled: rec and holder are from a read; holder: some process holds
	// the job's lease; readErr the last read's error.
	polled  bool
	holder  bool
	readErr error
	// readers counts the waiters that need rec read; reading says the
	// reader goroutine runs.
	readers int
	reading bool
	// need is the latest cluster time a waiter needs a wait document
	// after; markAt the cluster time of the latest one written; marking
	// says a write is in flight; markErr is the last write's error.
	need, markAt bson.Timestamp
	// needAt is when need last grew: a wait document written after it
	// and still not past need says need is ahead of the cluster's present
	// (a time no write has reached yet), which only time can pass.
	needAt time.Time
	// markedAt is when markAt was written.
	markedAt time.Time
	waiters  int
	marking  bool
	markErr  error
}

// New returns a Waiter over o.
func New(o Options) *Waiter {
	if o.MaxWaiters <= 0 {
		o.MaxWaiters = DefaultMaxWaiters
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Waiter{o: o, ctx: ctx, cancel: cancel, jobs: map[string]*entry{}}
}

// Close ends every wait (ErrClosed) and the waiter's reads and writes.
// Safe to call twice.
func (w *Waiter) Close() {
	w.cancel()
	w.wg.Wait()
}

func (w *Waiter) entry(job string) *entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.jobs[job]
	if e == nil {
		e = &entry{changed: make(chan struct{})}
		w.jobs[job] = e
	}
	return e
}

// Advance notes that every change of job up to ts is durable: what this
// process's holder recorded. It never blocks; a time before the one known
// changes nothing.
func (w *Waiter) Advance(job string, ts bson.Timestamp) {
	e := w.entry(job)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ts.After(e.mem) {
		e.mem = ts
		e.wake()
	}
}

// wake tells the waiters something changed (e.mu held).
func (e *entry) wake() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// now is the job's durable time as known (e.mu held).
func (e *entry) now() bson.Timestamp {
	if e.rec.After(e.mem) {
		return e.rec
	}
	return e.mem
}

// Durable returns the job's durable time as this process knows it now,
// without I/O (zero when it knows none).
func (w *Waiter) Durable(job string) bson.Timestamp {
	e := w.entry(job)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now()
}

// Wait returns once every change of job at or before after is durable in
// its destination, with the job's durable time; until ctx ends
// (ErrTimeout for its deadline, with the durable time then); ErrUnknownJob,
// ErrBusy, ErrNoHolder (no process holds the job and its durable time
// does not cover after), ErrClosed, or a MongoDB error that stops a
// standby's reads (wrapped).
func (w *Waiter) Wait(ctx context.Context, job string, after bson.Timestamp) (bson.Timestamp, error) {
	known, held := w.o.Jobs.Job(job)
	if !known {
		return bson.Timestamp{}, ErrUnknownJob
	}
	if w.n.Add(1) > int64(w.o.MaxWaiters) {
		w.n.Add(-1)
		return w.Durable(job), ErrBusy
	}
	defer w.n.Add(-1)
	e := w.entry(job)
	e.mu.Lock()
	if d := e.now(); covers(d, after) {
		e.mu.Unlock()
		return d, nil
	}
	e.waiters++
	w.needMark(job, e, after)
	reading := false
	defer func() {
		e.mu.Lock()
		e.waiters--
		if reading {
			e.readers--
		}
		e.mu.Unlock()
	}()
	e.mu.Unlock()
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		e.mu.Lock()
		if !held && !reading {
			reading = true
			e.readers++
			w.startReading(job, e)
		}
		d, ch := e.now(), e.changed
		noHolder := !held && e.polled && !e.holder
		readErr := e.readErr
		e.mu.Unlock()
		switch {
		case covers(d, after):
			return d, nil
		case noHolder:
			return d, ErrNoHolder
		}
		select {
		case <-ch:
		case <-timer.C:
			_, held = w.o.Jobs.Job(job)
			e.mu.Lock()
			w.needMark(job, e, after)
			e.mu.Unlock()
			timer.Reset(recheck)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				if readErr != nil {
					return d, errors.Join(ErrTimeout, readErr)
				}
				return d, ErrTimeout
			}
			return d, ctx.Err()
		case <-w.ctx.Done():
			return d, ErrClosed
		}
	}
}

// needMark makes sure a wait document is written after cluster time
// after (e.mu held): one write in flight per job; a write that returns
// before what a waiter needs is followed by another.
func (w *Waiter) needMark(job string, e *entry, after bson.Timestamp) {
	if e.markAt.After(after) && time.Since(e.markedAt) < remark {
		return // the latest wait document is after it already
	}
	if after.After(e.need) {
		e.need, e.needAt = after, time.Now()
	}
	if e.marking {
		return
	}
	e.marking = true
	w.wg.Add(1)
	go w.mark(job, e)
}

// mark writes wait documents until one is after every time a waiter
// needs, or no one waits any more.
func (w *Waiter) mark(job string, e *entry) {
	defer w.wg.Done()
	ahead := 0 // wait documents in a row found before a need ahead of the present
	for attempt := 0; ; attempt++ {
		started := time.Now()
		ts, err := w.o.Source.Mark(w.ctx, job)
		e.mu.Lock()
		e.markErr = err
		if err == nil && ts.After(e.markAt) {
			e.markAt, e.markedAt = ts, time.Now()
		}
		if e.waiters == 0 || e.markAt.After(e.need) || w.ctx.Err() != nil {
			e.marking = false
			e.mu.Unlock()
			return
		}
		future := started.After(e.needAt)
		e.mu.Unlock()
		var pause time.Duration
		switch {
		case err != nil:
			if attempt == 0 {
				w.o.Log.Warn("read your writes: cannot write the job's wait document; retrying", "job", job, "error", err)
			}
			pause = min(50*time.Millisecond<<min(attempt, 5), time.Second)
		case future:
			// Written after the need and still before it: another one
			// now would be too; look again now and then, as time passes.
			attempt = -1
			pause = min(100*time.Millisecond<<min(ahead, 4), time.Second)
			ahead++
		default:
			// Written before the latest need came: write one after it.
			attempt, ahead = -1, 0
			continue
		}
		if !sleep(w.ctx, pause) {
			e.mu.Lock()
			e.marking = false
			e.mu.Unlock()
			return
		}
	}
}

// startReading starts the standby's reads of job's recorded durable time
// (e.mu held), which run while e.readers > 0.
func (w *Waiter) startReading(job string, e *entry) {
	if e.reading {
		return
	}
	e.reading = true
	w.wg.Add(1)
	go w.read(job, e)
}

func (w *Waiter) read(job string, e *entry) {
	defer w.wg.Done()
	t := time.NewTicker(w.o.Poll)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(w.ctx, max(10*w.o.Poll, time.Second))
		d, held, err := w.o.Source.Recorded(ctx, job)
		cancel()
		e.mu.Lock()
		changed := err != e.readErr
		e.readErr = err
		if err == nil {
			changed = changed || d.After(e.rec) || !e.polled || held != e.holder
			if d.After(e.rec) {
				e.rec = d
			}
			e.polled, e.holder = true, held
		}
		if changed {
			e.wake()
		}
		if e.readers == 0 || w.ctx.Err() != nil {
			e.reading = false
			// The next reads start afresh: what is known of the holder
			// then is not this read's.
			e.polled = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		select {
		case <-t.C:
		case <-w.ctx.Done():
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
