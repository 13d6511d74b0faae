package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/lease"
)

// env is one test server and a state collection on it.
type env struct {
	t    testing.TB
	srv  *mongotest.Server
	coll *mongo.Collection
	form capability.Form // the managers' Options.Form unless they set one
}

var dbNameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]`)

func newEnv(t testing.TB) *env { return newEnvWith(t, mongotest.Options{}) }

// forEachForm runs test in both forms of the leases: with update
// pipelines (the nil Form, every MongoDB since 4.2) and without them, on
// a server refusing them as FerretDB does, the form chosen by the
// capability probe as in production.
func forEachForm(t *testing.T, test func(t *testing.T, e *env)) {
	t.Run("with update pipelines", func(t *testing.T) { test(t, newEnv(t)) })
	t.Run("without update pipelines", func(t *testing.T) {
		e := newEnvWith(t, mongotest.Options{NoExpressions: true})
		e.form = capability.NewProber(e.coll).Pipelines
		if ok, err := e.form(ctxT(t)); err != nil || ok {
			t.Fatalf("the probe says pipelines %v (%v) of a server refusing them", ok, err)
		}
		test(t, e)
	})
}

func newEnvWith(t testing.TB, opts mongotest.Options) *env {
	t.Helper()
	srv, client := testutil.StartMongo(t, opts)
	db := dbNameUnsafe.ReplaceAllString(t.Name(), "_")
	if len(db) > 60 {
		db = db[:60]
	}
	return &env{t: t, srv: srv, coll: client.Database(db).Collection("meilistream")}
}

func ctxT(t testing.TB) context.Context { return testutil.Context(t, 30*time.Second) }

// manager returns a Manager for a distinct holder.
func (e *env) manager(holder string, opts lease.Options) *lease.Manager {
	e.t.Helper()
	if opts.Form == nil {
		opts.Form = e.form
	}
	m, err := lease.New(e.coll, holder, opts)
	if err != nil {
		e.t.Fatalf("lease.New(%s): %v", holder, err)
	}
	return m
}

func (e *env) acquire(m *lease.Manager, name string) *lease.Lease {
	e.t.Helper()
	l, err := m.Acquire(ctxT(e.t), name)
	if err != nil {
		e.t.Fatalf("%s: Acquire(%s): %v", m.Holder(), name, err)
	}
	return l
}

// advancePast moves the server clock to just after expiresAt (server time).
func (e *env) advancePast(expiresAt time.Time) {
	e.t.Helper()
	if d := expiresAt.Sub(e.srv.Now()); d > 0 {
		e.srv.AdvanceClock(d + time.Millisecond)
	}
}

// doc reads the raw lease document.
func (e *env) doc(name string) bson.M {
	e.t.Helper()
	var d bson.M
	err := e.coll.FindOne(ctxT(e.t), bson.D{{Key: "_id", Value: bson.D{{Key: "lease", Value: name}}}}).Decode(&d)
	if err != nil {
		e.t.Fatalf("read lease document %s: %v", name, err)
	}
	return d
}

// waitFor polls cond until it holds or a deadline passes, then reports the
// last thing seen.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	testutil.Until(t, within, what, func() bool {
		ok, seen := cond()
		last = seen
		return ok
	}, func() string { return last })
}

// logBuf collects JSON log lines from an hclog logger.
type logBuf struct{ testutil.SyncBuffer }

func (b *logBuf) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: b, JSONFormat: true, Level: hclog.Debug})
}

func (b *logBuf) lines() []map[string]any {
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			panic(fmt.Sprintf("bad log line %q: %v", ln, err))
		}
		out = append(out, m)
	}
	return out
}

// messages returns the log lines whose message is msg.
func (b *logBuf) messages(msg string) []map[string]any {
	var out []map[string]any
	for _, m := range b.lines() {
		if m["@message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// writerFunc is an io.Writer calling a function with each write.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
