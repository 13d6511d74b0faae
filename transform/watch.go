package transform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sync"
	"time"
)

// DefaultWatchInterval is how often a Watcher looks at the folder.
const DefaultWatchInterval = 2 * time.Second

// Reload reads the set's folder again and returns the next set: an
// unchanged file keeps its very *Job (same pointer, same runtimes, same
// Hash); a changed or new file that loads is a new *Job; a file that fails
// to load keeps its previous *Job, if it had one, and its problem is in the
// returned error; a removed file's job is gone. The receiver is not changed.
func (s *Set) Reload() (*Set, error) {
	return load(s.paths, s.opts, s)
}

// changed reports whether the folder's files differ from what s was built
// from (names or contents).
func (s *Set) changed() bool {
	names, files, _, err := listFiles(s.paths)
	if err != nil {
		return false // a folder that vanished for a moment: keep what runs
	}
	if len(names) != len(s.files) {
		return true
	}
	for _, name := range names {
		st, ok := s.files[name]
		if !ok || st.path != files[name] {
			return true
		}
		src, err := os.ReadFile(files[name])
		if err != nil {
			if st.hash != "" || st.err == nil {
				return true
			}
			continue
		}
		sum := sha256.Sum256(src)
		if hex.EncodeToString(sum[:]) != st.hash {
			return true
		}
	}
	return false
}

// Watcher polls a transforms folder and hands every changed Set to a
// callback (hot reload). The supervisor then restarts the jobs whose Hash
// changed, starts new ones and stops removed ones; a file that fails to load
// keeps its previous version in the Set, and the error says why.
type Watcher struct {
	interval time.Duration
	onChange func(*Set, error)

	mu      sync.Mutex
	cur     *Set
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
}

// NewWatcher watches the folder set was loaded from. onChange is called,
// from the Watcher's goroutine and never twice at once, with the next Set
// and its joined load problems each time a file was added, changed or
// removed (also when the change is a new error); not when nothing changed,
// so a broken file is reported once per content. interval <= 0 means
// DefaultWatchInterval.
func NewWatcher(set *Set, interval time.Duration, onChange func(next *Set, err error)) *Watcher {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	return &Watcher{interval: interval, onChange: onChange, cur: set}
}

// Start begins polling until ctx ends or Close.
func (w *Watcher) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return
	}
	w.started = true
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go w.loop(ctx)
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		cur := w.cur
		w.mu.Unlock()
		if !cur.changed() {
			continue
		}
		next, err := cur.Reload()
		if next == nil {
			continue
		}
		w.mu.Lock()
		w.cur = next
		w.mu.Unlock()
		w.onChange(next, err)
	}
}

// Current returns the latest Set.
func (w *Watcher) Current() *Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Close stops polling and waits for the goroutine; idempotent.
func (w *Watcher) Close() error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
