package engine

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// A document whose transform ran out of time on every try of its call
// (transform.ErrTimeout) is not at fault the way a throw is: on a loaded
// machine a transform taking half its limit misses it. Nor, perhaps, is one
// whose call the memory bound stopped (transform.ErrMemory): the bound is
// on the process's heap, which the job's other calls and the rest of the
// process share. Such a document is recorded in the errors collection like
// any other (so a crash loses nothing, and `meilistream errors` shows it),
// and the follower tries it again by itself, up to maxTimeoutRetries times
// with a growing backoff (timeoutRetryBase, ×4 each time, jittered); a
// timed-out one under a limit doubled each time it ran out of time (up to
// transform.MaxTimeout). It goes the way of `meilistream retry`
// (retrylive.go): read by _id between two marks of the fan-out reader and
// sent in order with the stream, its record cleared once durable. One
// that still fails so after the last attempt is left to the operator, its
// record and the log saying how many attempts failed and what to raise. A
// call abandoned in a built-in is neither: it is stuck whatever the load,
// and is the operator's at once. A burst of timeouts (timeoutBurst in
// timeoutWindow) is logged once per window: the machine or the limit is
// the likely cause, not the documents.
//
// The attempts are counted in memory: after a restart the recorded
// documents wait for `meilistream retry`.

// maxTimeoutRetries is how many times the follower tries a timed-out
// document again before leaving it to the operator.
const maxTimeoutRetries = 3

// timeoutRetryBase is the wait before the first automatic retry.
var timeoutRetryBase = 5 * time.Second

const (
	timeoutBurst  = 5
	timeoutWindow = time.Minute
)

// timeouts are a job run's documents that ran out of time or were
// stopped by the memory bound, waiting for their next attempt. note runs
// on the pipe's prepare stage, take on the follow loop: mu guards
// everything.
type timeouts struct {
	log   hclog.Logger
	limit time.Duration // the job's transformTimeout

	mu     sync.Mutex
	tries  map[string]*timedOut // by key, until it succeeds or is given up
	recent []time.Time          // timeouts within timeoutWindow
	said   time.Time            // when a burst was last logged
}

type timedOut struct {
	id       bson.RawValue
	attempts int       // failed rounds so far (the first included)
	late     int       // of them, those out of time: the limit doubles with each
	due      time.Time // of the next attempt; zero: handed to a retry
}

func newTimeouts(limit time.Duration, log hclog.Logger) *timeouts {
	return &timeouts{log: log, limit: limit, tries: map[string]*timedOut{}}
}

// note takes the outcome of a prepared batch, before bad is recorded:
// items that succeeded end their attempts, those out of time or stopped by
// the memory bound are due again, or given up, their error (in bad) then
// saying so for the record.
func (t *timeouts) note(items []Item, bad []DocError) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if len(t.tries) > 0 {
		failed := make(map[string]bool, len(bad))
		for _, b := range bad {
			failed[keyOf(b.ID)] = true
		}
		for _, it := range items {
			if !failed[keyOf(it.ID)] {
				delete(t.tries, keyOf(it.ID))
			}
		}
	}
	for i := range bad {
		b := &bad[i]
		k := keyOf(b.ID)
		late, memory := errors.Is(b.Err, transform.ErrTimeout), errors.Is(b.Err, transform.ErrMemory)
		if !late && !memory {
			delete(t.tries, k) // another error: the operator's
			continue
		}
		d := t.tries[k]
		if d == nil {
			d = &timedOut{id: bson.RawValue{Type: b.ID.Type, Value: append([]byte(nil), b.ID.Value...)}}
			t.tries[k] = d
		}
		d.attempts++
		if late {
			d.late++
			t.recent = append(t.recent, now)
		}
		if d.attempts > maxTimeoutRetries {
			delete(t.tries, k)
			b.Err = t.givenUp(b, d, memory)
			continue
		}
		wait := timeoutRetryBase << (2 * (d.attempts - 1))
		d.due = now.Add(wait + rand.N(wait/4+1))
	}
	t.burst(now)
}

// givenUp is the error recorded for b once its last automatic attempt
// failed as d's did, and logs it. Called with mu held.
func (t *timeouts) givenUp(b *DocError, d *timedOut, memory bool) error {
	job := errs.JobOf(b.Err)
	if memory {
		t.log.Warn("a document was stopped by the transform memory bound on every automatic attempt; it stays in the errors collection: raise MEILISTREAM_TRANSFORM_MEMORY or lighten the transform, then `meilistream retry`",
			"id", IDString(b.ID), "attempts", d.attempts)
		return errs.Wrap(errs.TransformFailed, job, b.Err, "the memory bound stopped the transform on all %d attempts, %d of them automatic; raise MEILISTREAM_TRANSFORM_MEMORY or lighten the transform, then `meilistream retry %s`", d.attempts, maxTimeoutRetries, job)
	}
	t.log.Warn("a document ran out of time on every automatic attempt; it stays in the errors collection: raise transformTimeout or lighten the transform, then `meilistream retry`",
		"id", IDString(b.ID), "attempts", d.attempts, "limit", t.limitOf(d.late-1))
	return errs.Wrap(errs.TransformFailed, job, b.Err, "the transform ran out of time on all %d attempts, %d of them automatic, the last under %s; raise transformTimeout or lighten the transform, then `meilistream retry %s`", d.attempts, maxTimeoutRetries, t.limitOf(d.late-1), job)
}

// burst logs, once per window, that many documents ran out of time.
// Called with mu held.
func (t *timeouts) burst(now time.Time) {
	i := 0
	for i < len(t.recent) && now.Sub(t.recent[i]) > timeoutWindow {
		i++
	}
	t.recent = t.recent[i:]
	if len(t.recent) < timeoutBurst || now.Sub(t.said) < timeoutWindow {
		return
	}
	t.said = now
	t.log.Warn("documents ran out of time in a burst: the machine may be overloaded or transformTimeout too small; they are tried again automatically with a longer limit",
		"timed_out", len(t.recent), "within", timeoutWindow, "transform_timeout", t.limit)
}

// limitOf is the time limit of attempt n (0: the first, the job's own).
func (t *timeouts) limitOf(n int) time.Duration {
	return min(t.limit<<n, max(transform.MaxTimeout, t.limit))
}

// waiting says whether documents wait to be tried again, due now or
// later (take has work for a later tick).
func (t *timeouts) waiting() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range t.tries {
		if !d.due.IsZero() {
			return true
		}
	}
	return false
}

// take returns a retry of the documents due by now (nil: none), under the
// limit of the one most often out of time.
func (t *timeouts) take(now time.Time) *retryRequest {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var ids []bson.RawValue
	most := 0
	for _, d := range t.tries {
		if d.due.IsZero() || d.due.After(now) {
			continue
		}
		d.due = time.Time{}
		ids = append(ids, d.id)
		most = max(most, d.late)
	}
	if len(ids) == 0 {
		return nil
	}
	return newRetryRequest(ids, t.limitOf(most))
}
