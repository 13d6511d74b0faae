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
// only once the file has stayed so for a whole interval. Here a slow
// writer changes the file five times an interval for three intervals;
// only what it wrote last is loaded.
func TestAWatcherWaitsForAFileToSettle(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = { index: "first" };`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	const interval = 300 * time.Millisecond
	w := transform.NewWatcher(set, interval, func(next *transform.Set, err error) {
		mu.Lock()
		defer mu.Unlock()
		if j := next.Job("a"); j != nil {
			seen = append(seen, j.Index)
		}
	})
	w.Start(t.Context())
	defer w.Close()
	path := filepath.Join(dir, "a.js")
	for i := 0; i <= 15; i++ {
		index := "part" + strconv.Itoa(i)
		if i == 15 {
			index = "whole"
		}
		if err := os.WriteFile(path, []byte(`module.exports = { index: "`+index+`" };`), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(interval / 5) // the writer's pace
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if len(got) > 0 && got[len(got)-1] == "whole" {
			if len(got) != 1 {
				t.Fatalf("loaded %v: the file was loaded before it settled", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loaded %v after 10s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A module that loops at its top (with a long time limit) must not hold
// a Watcher's Close, and so the process's shutdown, until its load limit.
func TestClosingAWatcherStopsAModuleThatLoops(t *testing.T) {
	var logs testutil.SyncBuffer
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = {};`})
	set, err := transform.Load(dir, transform.Options{Pool: 1, Timeout: 5 * time.Second, Logger: hclog.New(&hclog.LoggerOptions{Output: &logs})})
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
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %s", took)
	}
}
