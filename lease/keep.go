package lease

import (
	"context"
	"fmt"
	"time"
)

// Keep starts renewing the lease every TTL/3 and returns a context derived
// from ctx that is cancelled, with a LEASE_LOST *errs.Error as its
// context.Cause, as soon as the lease is no longer held: a renewal matched
// nothing (taken over, expired by the server clock, deleted), no renewal
// succeeded within 3/4 of the TTL since the last successful one was sent
// (the holder cannot prove the lease, so it stops before the server would
// let another holder in), or Release was called.
//
// Transient renewal errors are retried with backoff until that deadline.
// Renewing stops when stop is called (stop also cancels the returned context
// and waits for the renewer to end; it is idempotent), when ctx is done, or
// when the lease ends. Confirm and Release still work after stop. Keep is
// meant to be called once per lease; further calls start further renewers.
func (l *Lease) Keep(ctx context.Context) (context.Context, func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	l.keeps.Add(1)
	go func() {
		defer l.keeps.Done()
		defer close(done)
		// Cancel the work as soon as the lease ends, whoever ends it.
		unhook := context.AfterFunc(l.held, func() { cancel(context.Cause(l.held)) })
		defer unhook()
		l.keepLoop(kctx)
		if err := l.Err(); err != nil {
			cancel(err) // before stop can cancel it with a plainer cause
		}
	}()
	stop := func() {
		cancel(context.Canceled)
		<-done
	}
	return kctx, stop
}

func (l *Lease) keepLoop(ctx context.Context) {
	ttl := l.m.ttl
	interval := ttl / 3
	giveUp := l.m.giveUp()
	retry := ttl / 30 // first retry after a failed renewal; doubles
	var (
		failures int
		lastErr  error
	)
	for {
		lastOK := l.lastProof()
		now := l.m.now()
		deadline := lastOK.Add(giveUp)
		var wait time.Duration
		if failures == 0 {
			wait = lastOK.Add(interval).Sub(now)
		} else {
			wait = min(retry<<min(failures-1, 3), deadline.Sub(now))
		}
		if !now.Before(deadline) {
			l.lose(unproven(now.Sub(lastOK), lastErr))
			return
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		if now = l.m.now(); !now.Before(deadline) && l.lastProof().Equal(lastOK) {
			// The process slept past the deadline (a pause, an overloaded
			// node): the lease was unproven for too long, whatever a late
			// renewal would say now.
			l.lose(unproven(now.Sub(lastOK), nil))
			return
		}
		// One attempt may not outlive the give-up deadline nor eat every
		// retry in between.
		actx, cancel := context.WithTimeout(ctx, min(interval, deadline.Sub(l.m.now())))
		held, err := l.renew(actx)
		cancel()
		switch {
		case err == nil && held:
			if failures > 0 {
				l.m.log.Info("lease renewed again", "job", l.name, "epoch", l.epoch, "failures", failures)
			}
			failures, lastErr = 0, nil
		case err == nil:
			if l.Err() == nil {
				l.lose(l.whyNotHeld(ctx))
			}
			return
		default:
			if ctx.Err() != nil {
				return
			}
			if failures == 0 {
				l.m.log.Warn("lease renewal failed; retrying", "job", l.name, "epoch", l.epoch, "error", err)
			}
			failures++
			lastErr = err
		}
	}
}

// keepLoop only ever subtracts two readings of m.now (time.Now by default,
// whose monotonic reading makes the difference immune to wall-clock steps),
// and turns durations into timers; it never compares a process time with a
// server time.

// giveUp is how long a holder runs on its last proof of the lease (the
// send time of its last successful renewal) by its own clock: well before
// the TTL, since the server counts from a later instant.
func (m *Manager) giveUp() time.Duration { return m.ttl * 3 / 4 }

// Held says, without a round trip, whether this process may still act on
// the lease: nil while the lease is not lost and the give-up deadline (3/4
// of the TTL after the last successful renewal was sent, by this process's
// monotonic clock) is ahead; otherwise the LEASE_LOST *errs.Error, and a
// lease past its deadline is marked lost at once (Lost closes).
//
// Keep makes the same judgement, but only when its timer fires: a process
// that was frozen (SIGSTOP, a stalled node) past the deadline runs its
// other goroutines too when it is continued, and one of them may be about
// to send a batch. Whoever writes where the lease cannot fence (Meilisearch,
// the replica) calls Held right before each request, so such a process
// sends nothing after it wakes.
func (l *Lease) Held() error {
	if err := l.Err(); err != nil {
		return err
	}
	lastOK := l.lastProof()
	if elapsed := l.m.now().Sub(lastOK); elapsed >= l.m.giveUp() {
		l.lose(unproven(elapsed, nil))
		return l.Err()
	}
	return nil
}

func (l *Lease) lastProof() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOK
}

func unproven(elapsed time.Duration, lastErr error) string {
	why := "the process was paused or starved"
	if lastErr != nil {
		why = "last error: " + lastErr.Error()
	}
	return fmt.Sprintf("no renewal succeeded for %s (%s)", elapsed.Round(time.Millisecond), why)
}
