package transform_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// writeFiles writes name -> content into a fresh folder.
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// loadJob loads one file, job.js, and fails the test on any problem.
func loadJob(t testing.TB, src string, opts ...transform.Options) *transform.Job {
	t.Helper()
	var o transform.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Pool == 0 {
		o.Pool = 2
	}
	if o.MemoryLimit == 0 {
		// No memory bound unless the test asks for one: the bound is on
		// the growth of the process's heap, which the package's other
		// tests share, and a call of a test about its time would be
		// stopped for their allocations.
		o.MemoryLimit = -1
	}
	set, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), o)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(set.Close)
	j := set.Job("job")
	if j == nil {
		t.Fatal("no job")
	}
	return j
}

func marshal(t testing.TB, d any) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func apply(t testing.TB, j *transform.Job, d any) (transform.Result, error) {
	t.Helper()
	return j.Apply(context.Background(), marshal(t, d), transform.OpInsert, nil)
}

// mustApply applies and fails the test on an error.
func mustApply(t testing.TB, j *transform.Job, d any) transform.Result {
	t.Helper()
	res, err := apply(t, j, d)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// wantErr checks err's code and that its message holds every part.
func wantErr(t testing.TB, err error, code errs.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if got := errs.CodeOf(err); got != code {
		t.Fatalf("code %s, want %s: %v", got, code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
