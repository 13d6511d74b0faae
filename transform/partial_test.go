package transform_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/transform"
)

// A file that exports nothing (empty, or cut after a statement while it
// was written) is no job: as the identity it would make every field
// searchable.
func TestAFileThatExportsNothingIsNoJob(t *testing.T) {
	for name, src := range map[string]string{
		"empty":            "",
		"comments only":    "// users: what the index shows\n/* more */\n",
		"cut after a line": "const hidden = [\"password\", \"email\"];\n",
		"exports itself":   "module.exports = exports;",
	} {
		_, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), transform.Options{})
		if err == nil || errs.CodeOf(err) != errs.ConfigInvalid || !strings.Contains(err.Error(), "job.js: the file sets no module.exports") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if j := loadJob(t, `module.exports = {};`); j.Index != "job" {
		t.Fatal("module.exports = {} is the identity job")
	}
	if j := loadJob(t, `exports.index = "people";`); j.Index != "people" {
		t.Fatalf("exports.index: index %q", j.Index)
	}
}

func TestAReloadOfATruncatedFileKeepsTheRunningJob(t *testing.T) {
	dir := writeFiles(t, map[string]string{"users.js": `module.exports = { transform(d) { return { name: d.name }; } };`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	running := set.Job("users")
	if err := os.WriteFile(filepath.Join(dir, "users.js"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	wantErr(t, err, errs.ConfigInvalid, "users.js", "sets no module.exports")
	if next.Job("users") != running {
		t.Fatal("the running job must stay")
	}
}

// A FIFO (or a device behind a symbolic link) named *.js must neither
// block loading nor watching: it is refused, saying so, and the other
// files load.
func TestANonRegularFileNeverBlocks(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = {};`})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.js"), 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.js")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var set *transform.Set
	var err error
	go func() {
		defer close(done)
		set, err = transform.Load(dir, transform.Options{Pool: 1})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("loading blocked on a FIFO or a device")
	}
	wantErr(t, err, errs.ConfigInvalid, "fifo.js is not a regular file", "zero.js is not a regular file")
	if set.Job("a") == nil {
		t.Fatal("a.js must load")
	}
	// Watching: a change is still seen, and Close returns.
	changed := make(chan error, 10)
	w := transform.NewWatcher(set, 10*time.Millisecond, func(_ *transform.Set, err error) { changed <- err })
	w.Start(t.Context())
	if err := os.WriteFile(filepath.Join(dir, "b.js"), []byte(`module.exports = {};`), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher saw no change")
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked")
	}
}

// An editor or `cat >` leaves a file cut for a moment: a change is loaded
// only once the file has stayed so from one poll to the next. Here a
// writer changes the file before every poll, fifteen times; only what it
// wrote last, unchanged over a poll, is loaded. The test moves the polls
// itself, so how fast the machine is does not matter.
func TestAWatcherWaitsForAFileToSettle(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = { index: "first" };`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	loaded := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	w := transform.NewWatcher(set, time.Hour, func(next *transform.Set, err error) {
		mu.Lock()
		defer mu.Unlock()
		if j := next.Job("a"); j != nil {
			seen = append(seen, j.Index)
		}
	})
	ticks, polled := make(chan time.Time), make(chan struct{})
	w.SetTestTicks(ticks, polled)
	w.Start(t.Context())
	defer w.Close()
	// poll has the watcher poll once and returns when that poll is over.
	poll := func() {
		t.Helper()
		ticks <- time.Now()
		<-polled
	}
	path := filepath.Join(dir, "a.js")
	write := func(index string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`module.exports = { index: "`+index+`" };`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 15; i++ {
		write("part" + strconv.Itoa(i))
		poll()
		if got := loaded(); len(got) != 0 {
			t.Fatalf("loaded %v while the file changed before every poll", got)
		}
	}
	write("whole")
	poll() // sees the change: waits for it to stay
	if got := loaded(); len(got) != 0 {
		t.Fatalf("loaded %v at the first poll after the last write", got)
	}
	poll() // sees it unchanged: loads it
	if got := loaded(); len(got) != 1 || got[0] != "whole" {
		t.Fatalf("loaded %v, want [whole]: only the settled file", got)
	}
}

// A module that loops at its top (with a long time limit) must not hold
// a Watcher's Close, and so the process's shutdown, until its load limit.
func TestClosingAWatcherStopsAModuleThatLoops(t *testing.T) {
	var logs testutil.SyncBuffer
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = {};`})
	const limit = time.Minute
	set, err := transform.Load(dir, transform.Options{Pool: 1, Timeout: limit, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	if err != nil {
		t.Fatal(err)
	}
	w := transform.NewWatcher(set, 10*time.Millisecond, func(*transform.Set, error) {})
	w.Start(t.Context())
	if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte(`console.log("evaluating"); for (;;) {}`), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "evaluating") {
		if time.Now().After(deadline) {
			t.Fatal("the module was not evaluated")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	w.Close()
	// Far below the limit, however slow the machine: Close interrupted the
	// module rather than waiting it out.
	if took := time.Since(start); took > limit/2 {
		t.Fatalf("Close took %s, as if it waited for the module's limit of %s", took, limit)
	}
}
