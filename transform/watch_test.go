package transform_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

func TestReloadKeepsUnchangedJobsAndTheLastGoodVersion(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.js": `module.exports = { transform(d) { return {v: 1}; } };`,
		"b.js": `module.exports = { transform(d) { return {v: 1}; } };`,
	})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	a1, b1 := set.Job("a"), set.Job("b")

	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.js", `module.exports = { transform(d) { return {v: 2}; } };`)
	write("c.js", `module.exports = {};`)
	next, err := set.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if next.Job("a") != a1 {
		t.Error("an unchanged file must keep its Job")
	}
	b2 := next.Job("b")
	if b2 == b1 || b2.Hash == b1.Hash || mustApply(t, b2, bson.D{{Key: "_id", Value: 1}}).Doc["v"] != int64(2) {
		t.Error("a changed file must be a new Job with a new Hash")
	}
	if next.Job("c") == nil {
		t.Error("a new file must be loaded")
	}

	// A broken edit keeps the previous version running and says why.
	write("b.js", `module.exports = { transform(d) { return {v: 3}; } ;`)
	os.Remove(filepath.Join(dir, "c.js"))
	third, err := next.Reload()
	wantErr(t, err, errs.ConfigInvalid, "b.js:1:")
	if third.Job("b") != b2 {
		t.Error("a file that fails to load must keep its previous Job")
	}
	if third.Job("c") != nil {
		t.Error("a removed file's job must be gone")
	}
	// b1 still works after its set is closed (the supervisor may still be
	// stopping it).
	set.Close()
	if mustApply(t, b1, bson.D{{Key: "_id", Value: 1}}).Doc["v"] != int64(1) {
		t.Error("a closed job must still work")
	}
}

func TestAWatcherReportsChangesOnce(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = {};`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	type report struct {
		set *transform.Set
		err error
	}
	var mu sync.Mutex
	var reports []report
	w := transform.NewWatcher(set, 10*time.Millisecond, func(next *transform.Set, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, report{next, err})
	})
	w.Start(t.Context())
	defer w.Close()
	waitFor := func(n int, what string) report {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			if len(reports) >= n {
				r := reports[n-1]
				mu.Unlock()
				return r
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s: %d reports after 5s", what, len(reports))
		return report{}
	}
	hash := set.Job("a").Hash

	if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte(`module.exports = { index: "a2" };`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := waitFor(1, "a changed file")
	if r.err != nil || r.set.Job("a").Hash == hash || r.set.Job("a").Index != "a2" {
		t.Fatalf("report %+v", r)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.js"), []byte(`module.exports = { nope: 1 };`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = waitFor(2, "a broken new file")
	wantErr(t, r.err, errs.ConfigInvalid, "bad.js", `"nope"`)
	if w.Current() != r.set {
		t.Error("Current is the last set")
	}
	// Nothing changes: no report, however many polls.
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	n := len(reports)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("%d reports without a change", n)
	}
	if err := w.Close(); err != nil || w.Close() != nil {
		t.Fatal("Close must be idempotent")
	}
}
