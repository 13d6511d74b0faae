// Package testutil holds the helpers the tests of several packages share,
// so each is written once. Only tests import it.
package testutil

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/transform"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a logger's output
// written by the goroutines of the code under test and read by the test.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset forgets what was written.
func (b *SyncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// CPUTime is the process's user and system CPU time so far, for
// benchmarks that report CPU per document.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RepoFile is the path of a file of this repository given relative to its
// root (examples/transforms/articles.js), wherever the test runs.
func RepoFile(rel string) string {
	_, here, _, _ := runtime.Caller(0) // internal/testutil/testutil.go
	return filepath.Join(filepath.Dir(here), "..", "..", rel)
}

// ArticlesJob loads examples/transforms/articles.js, the job the
// benchmarks measure; it skips tb when the file cannot be read.
func ArticlesJob(tb testing.TB) *transform.Job {
	tb.Helper()
	src, err := os.ReadFile(RepoFile("examples/transforms/articles.js"))
	if err != nil {
		tb.Skip(err)
	}
	job, err := transform.LoadFile("articles.js", src, transform.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return job
}

// StartMongo starts a test MongoDB (internal/mongotest) and connects a
// client to it, both closed when the test ends. extra client options apply
// after the server's URI.
func StartMongo(tb testing.TB, opts mongotest.Options, extra ...*options.ClientOptions) (*mongotest.Server, *mongo.Client) {
	tb.Helper()
	srv, err := mongotest.Start(opts)
	if err != nil {
		tb.Fatalf("start the test MongoDB: %v", err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	client, err := mongo.Connect(append([]*options.ClientOptions{options.Client().ApplyURI(srv.URI())}, extra...)...)
	if err != nil {
		tb.Fatalf("connect to the test MongoDB: %v", err)
	}
	tb.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return srv, client
}

// Context returns a context that ends after d or when the test ends.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Until polls cond every few milliseconds until it holds, and fails the
// test when within passes first, with what was awaited and what describe
// (when not nil) says of the last state seen. Tests wait with it instead of
// sleeping.
func Until(tb testing.TB, within time.Duration, what string, cond func() bool, describe func() string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			seen := ""
			if describe != nil {
				seen = "; last seen: " + describe()
			}
			tb.Fatalf("%s: not within %s%s", what, within, seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
