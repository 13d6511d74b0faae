package lease

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

func randFloat() float64 { return rand.Float64() }

// Wait stands by until it acquires the lease name or ctx is done, in which
// case it returns context.Cause(ctx). Between attempts it backs off from
// WaitBase, doubling up to WaitCap, each pause jittered by ±25% (never above
// WaitCap) so pods do not poll in lockstep. It logs the holder when it starts
// waiting and again only when the holder changes; other errors (the server
// unreachable) are retried the same way and logged when they change.
func (m *Manager) Wait(ctx context.Context, name string) (*Lease, error) {
	d := m.base
	var (
		waiting    bool
		lastHolder string
		lastErr    string
	)
	for {
		l, held, err := m.acquire(ctx, name)
		if err == nil {
			if waiting {
				m.log.Info("lease acquired after standby", "job", name, "epoch", l.epoch)
			}
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errs.CodeOf(err) == errs.ConfigInvalid {
			return nil, err // waiting will not fix it
		}
		switch {
		case held != nil:
			if !waiting || held.holder != lastHolder {
				m.log.Info("lease held by another process; standing by", "job", name,
					"holder", held.holder, "until", held.until, "epoch", held.epoch)
			}
			lastHolder, lastErr = held.holder, ""
		default:
			if err.Error() != lastErr {
				m.log.Warn("cannot acquire lease; retrying", "job", name, "error", err)
			}
			lastErr = err.Error()
		}
		waiting = true
		t := time.NewTimer(m.pause(d))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
		d = min(2*d, m.cap)
	}
}

// pause jitters d by ±25% without exceeding the cap: near the cap the pause
// is drawn from [3/4 cap, cap] instead, so pods at the cap still spread out.
func (m *Manager) pause(d time.Duration) time.Duration {
	p := time.Duration(float64(d) * (0.75 + 0.5*m.jitter()))
	if p > m.cap {
		p = time.Duration(float64(m.cap) * (0.75 + 0.25*m.jitter()))
	}
	return max(p, time.Millisecond)
}
