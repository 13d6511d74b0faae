// Package budget bounds the bytes held between a producer and a consumer:
// the change events read ahead of the follow loop, the flights queued in
// front of a sink.
package budget

import (
	"context"
	"sync"
)

// Bytes is a budget of bytes. One request larger than the whole budget is
// let through when nothing else is held, so a single large item never
// deadlocks. Safe for concurrent use.
type Bytes struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{} // closed (and replaced) when bytes are released
}

// New returns a budget of n bytes (n <= 0: 16 MiB, the largest reply
// MongoDB sends).
func New(n int) *Bytes {
	if n <= 0 {
		n = 16 << 20
	}
	return &Bytes{max: n, wake: make(chan struct{})}
}

// Acquire waits until n more bytes fit, or ctx ends (its cause).
func (b *Bytes) Acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.used+n <= b.max || b.used == 0 {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// Release gives n bytes back.
func (b *Bytes) Release(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}
