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
// unchanged file, or one whose changes left its Hash as it was (comments,
// spacing), keeps its very *Job (same pointer, same runtimes, same Hash);
// a changed or new file that loads is a new *Job; a file that fails
// to load keeps its previous *Job, if it had one, and its problem is in the
// returned error; a removed file's job is gone. The receiver is not changed.
func (s *Set) Reload() (*Set, error) {
	return load(context.Background(), s.paths, s.opts, s)
}

// fileSnap is what a Watcher saw of one file at one poll.
type fileSnap struct {
	path  string
	size  int64
	mtime time.Time
	hash  string // of the content; "" if it could not be read
}

// snapshot looks at the files s was loaded from as they are now; nil when
// the folder cannot be read (a folder that vanished for a moment: keep
// what runs).
func (s *Set) snapshot() map[string]fileSnap {
	names, files, _, err := listFiles(s.paths)
	if err != nil {
		return nil
	}
	snap := make(map[string]fileSnap, len(names))
	for _, name := range names {
		fs := fileSnap{path: files[name]}
		if st, err := os.Stat(fs.path); err == nil {
			fs.size, fs.mtime = st.Size(), st.ModTime()
		}
		if src, err := readSource(fs.path); err == nil {
			sum := sha256.Sum256(src)
			fs.hash = hex.EncodeToString(sum[:])
		}
		snap[name] = fs
	}
	return snap
}

// matches reports whether s was loaded from the files of snap: the same
// names, paths and contents (a file that could not be read counts as
// such only if it still cannot be).
func (s *Set) matches(snap map[string]fileSnap) bool {
	if len(snap) != len(s.files) {
		return false
	}
	for name, fs := range snap {
		st, ok := s.files[name]
		if !ok || st.path != fs.path {
			return false
		}
		if fs.hash == "" {
			if st.hash != "" || st.err == nil {
				return false
			}
			continue
		}
		if st.hash != fs.hash {
			return false
		}
	}
	return true
}

func sameSnap(a, b map[string]fileSnap) bool {
	if len(a) != len(b) {
		return false
	}
	for name, x := range a {
		y, ok := b[name]
		if !ok || x.path != y.path || x.size != y.size || !x.mtime.Equal(y.mtime) || x.hash != y.hash {
			return false
		}
	}
	return true
}

// Watcher polls a transforms folder and hands every changed Set to a
// callback (hot reload). The supervisor then restarts the jobs whose Hash
// changed, starts new ones and stops removed ones; a file that fails to load
// keeps its previous version in the Set, and the error says why.
//
// A change is loaded only once the folder has stayed as it is (every
// file's size, modification time and content) for one whole interval: an
// editor or `cat >` writing a file leaves it empty or cut for a moment,
// and a poll landing then must not load that.
type Watcher struct {
	interval time.Duration
	onChange func(*Set, error)
	ticks    <-chan time.Time // the polls' clock; nil: a ticker of interval
	polled   chan<- struct{}  // told after each poll, for tests; nil: none

	mu      sync.Mutex
	cur     *Set
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
}

// NewWatcher watches the folder set was loaded from. onChange is called,
// from the Watcher's goroutine and never twice at once, with the next Set
// and its joined load problems each time a file was added, changed or
// removed (also when the change is a new error) and then stayed so for an
// interval; not when nothing changed, so a broken file is reported once
// per content. interval <= 0 means DefaultWatchInterval.
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
	ticks := w.ticks
	if ticks == nil {
		t := time.NewTicker(w.interval)
		defer t.Stop()
		ticks = t.C
	}
	var pending map[string]fileSnap // what changed at the last poll
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		pending = w.poll(ctx, pending)
		if w.polled != nil {
			select {
			case w.polled <- struct{}{}:
			case <-ctx.Done():
			}
		}
	}
}

// poll looks at the folder once. pending is what changed at the poll
// before (nil: nothing); it returns what this poll saw change, to wait
// for it to stay so, or nil once loaded or unchanged.
func (w *Watcher) poll(ctx context.Context, pending map[string]fileSnap) map[string]fileSnap {
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	snap := cur.snapshot()
	if snap == nil || cur.matches(snap) {
		return nil
	}
	if pending == nil || !sameSnap(snap, pending) {
		return snap // changed: wait until it stays so
	}
	next, err := load(ctx, cur.paths, cur.opts, cur)
	if next == nil || ctx.Err() != nil {
		next.closeNew(cur)
		return nil
	}
	if !next.matches(snap) {
		// A file changed again while it was read: wait for it.
		next.closeNew(cur)
		return nil
	}
	w.mu.Lock()
	w.cur = next
	w.mu.Unlock()
	w.onChange(next, err)
	return nil
}

// closeNew closes the jobs of s that prev does not have (a Set that is
// not used after all).
func (s *Set) closeNew(prev *Set) {
	if s == nil {
		return
	}
	for _, j := range s.jobs {
		if prev.Job(j.Name) != j {
			j.Close()
		}
	}
}

// Current returns the latest Set.
func (w *Watcher) Current() *Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Close stops polling and waits for the goroutine (a module being
// evaluated is interrupted); idempotent.
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
