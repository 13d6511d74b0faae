package engine

import (
	"context"
	"sync"

	"github.com/meilistream/meilistream/sidecar/pipe"
)

// PartSize is how many documents a chain reads and sends at a time: half
// a page, so that one part is read while the one before it is transformed
// and uploaded and still at most one page is read and not checkpointed.
// It is not capped by batchSize, follow's trigger: bigger batches cost less
// per document (fewer tasks, getMores and checkpoints), and a part is one
// cursor batch, so never more than the 16 MB MongoDB returns at once,
// however large the documents.
func PartSize(pageSize int) int {
	return max(1, pageSize/2)
}

// window bounds the documents a chain has read and not yet made durable
// (a reindex: checkpointed).
type window struct {
	mu   sync.Mutex
	used int
	max  int
	wake chan struct{} // closed (and replaced) when room is made
}

func newWindow(n int) *window { return &window{max: n, wake: make(chan struct{})} }

// acquire waits until n more documents fit, or ctx ends or p fails.
func (w *window) acquire(ctx context.Context, p *pipe.Pipe, n int) error {
	for {
		w.mu.Lock()
		if w.used+n <= w.max || w.used == 0 {
			w.used += n
			w.mu.Unlock()
			return nil
		}
		wake := w.wake
		w.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.Failed():
			if err := p.Err(); err != nil {
				return err
			}
			return pipe.Closed
		}
	}
}

// release lets n documents out.
func (w *window) release(n int) {
	if n <= 0 {
		return
	}
	w.mu.Lock()
	w.used -= n
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}
