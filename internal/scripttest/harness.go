// Package scripttest is the harness of the end-to-end suite:
// testdata/scripts/*.txtar run the real meilistream command (the main
// package's Main, registered with testscript.Main) against
// MongoDB and Meilisearch: the in-process test servers by default, or real
// ones when MEILISTREAM_TEST_MONGODB_URI (a replica set) and
// MEILISTREAM_TEST_MEILI_URL are set (MEILISTREAM_TEST_MEILI_API_KEY for its
// key). See CONTRIBUTING.md, "End-to-end scripts".
//
// The main package's TestScripts runs them with Cmds, Condition and
// Setup(t). Each area adds its own commands in its own file (sync.go,
// mirror.go, ...) without editing this one:
//
//	func init() {
//		Cmds["mongo"] = cmdMongo        // a custom script command
//		conds["slow"] = func() (bool, error) { ... }
//		setups = append(setups, func(env *testscript.Env) error { ... })
//	}
//
// What a script's environment holds (set by Setup):
//
//	DB            a database name of its own ("t_<script>_<hex>")
//	REPLICA_DB    a second database of its own, for mirror destinations
//	PREFIX        an index uid prefix of its own ("<DB>_"), already in
//	              MEILISTREAM_INDEX_PREFIX
//	MONGODB_URI   the MongoDB server (no database in the path)
//	MEILI_URL     the Meilisearch server
//	MEILI_API_KEY its key (a canary: it must never show in any output)
//	MEILISTREAM_MONGODB_URI, MEILISTREAM_MONGODB_DATABASE=$DB,
//	MEILISTREAM_MEILI_URL, MEILISTREAM_MEILI_API_KEY,
//	MEILISTREAM_INDEX_PREFIX=$PREFIX, MEILISTREAM_TRANSFORMS=$WORK/transforms,
//	MEILISTREAM_HTTP_ADDR=127.0.0.1:0, MEILISTREAM_READY_FILE=$WORK/ready,
//	MEILISTREAM_LOG_FORMAT=json
//	              so "exec meilistream &s&" just works; override with "env".
//
// Conditions: [real] when real servers are used; [servers] when servers are
// available (always); [failpoints] when MongoDB takes configureFailPoint;
// [standalone] when a standalone MongoDB is available for standalone-mongo
// (see standalone.go).
// Faults that real servers can be given too go through the harness: a TCP
// proxy in front of a server (proxy), signals to a sidecar (signal), the
// failCommand fail point scoped to the script's namespace (mongo-failcommand
// -ns, replica-fail -ns); see "Fault injection" in faults.go. Commands that need
// the in-process servers' hooks (a moved clock, 503 answers, trimmed
// history) work on a script's own servers (own-servers, own-replica) and
// are for [!real] lines only.
//
// Generic commands: waitfile FILE [timeout]; httpget [-wait=DUR] URL-or-path
// [want-status] (a path is relative to the address in $MEILISTREAM_READY_FILE);
// exitcode N PROG [ARGS...] (exec that asserts the exit code, keeping stdout
// and stderr for the next assertions); stdout-setenv NAME REGEXP (a value
// the last command printed, for the next ones); proxy and signal (below).
//
// Every run of the meilistream command in a script is watched: if its
// stdout or stderr ever holds a secret of its environment (the Meilisearch
// key, a URI password), the suite fails naming the script's command.
package scripttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
)

// Cmds are the custom commands scripts can use (testscript.Params.Cmds).
// The files of each area add theirs from init().
var Cmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"waitfile":      cmdWaitFile,
	"httpget":       cmdHTTPGet,
	"exitcode":      cmdExitCode,
	"stdout-setenv": cmdStdoutSetenv,
}

// conds are the custom conditions ([name] in a script), added to from
// init() like Cmds; Condition answers them.
var conds = map[string]func() (bool, error){
	"real": func() (bool, error) { return realServers(), nil },
	// servers: MongoDB and Meilisearch are available (always: the
	// internal test servers stand in for real ones).
	"servers": func() (bool, error) {
		if err := srv.start(); err != nil {
			return false, err
		}
		return srv.mongoURI != "" && srv.meiliURL != "", nil
	},
}

// srv is the set of servers of the running TestScripts call (made anew by
// each call, started on first use by a script's Setup, closed when the call
// ends).
var srv = &servers{}

// setups run after the harness's own Setup, for each script, in the
// order added.
var setups []func(env *testscript.Env) error

// Environment variables of the test process (never passed to scripts as
// such: the sidecar ignores MEILISTREAM_TEST_*).
const (
	envTestMongoURI = "MEILISTREAM_TEST_MONGODB_URI"
	envTestMeiliURL = "MEILISTREAM_TEST_MEILI_URL"
	envTestMeiliKey = "MEILISTREAM_TEST_MEILI_API_KEY"
	// envLeakDir is set in scripts' environment: a watched meilistream
	// process that printed a secret drops a note there.
	envLeakDir = "MEILISTREAM_TEST_LEAK_DIR"
)

// testMeiliKey is the master key of the internal Meilisearch test server:
// a canary that no output may show.
const testMeiliKey = "canary-meili-key-7f3a9c"

func realServers() bool {
	return os.Getenv(envTestMongoURI) != "" && os.Getenv(envTestMeiliURL) != ""
}

// DefaultStateCollection is the sidecar's default state collection
// (config.DefaultStateCollection, which only the main package may import;
// its tests check the two agree).
const DefaultStateCollection = "meilistream"

// stateCollection is the state collection the script's sidecar uses.
func stateCollection(ts *testscript.TestScript) string {
	if s := ts.Getenv("MEILISTREAM_STATE_COLLECTION"); s != "" {
		return s
	}
	return DefaultStateCollection
}

// Condition answers the custom conditions (testscript.Params.Condition).
func Condition(cond string) (bool, error) {
	if fn, ok := conds[cond]; ok {
		return fn()
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}

// Setup returns the Setup of t's scripts (testscript.Params.Setup): servers
// of t's own, started on first use and closed when t ends (so "go test
// -count=N" runs every time against live servers), and each script's own
// database, index prefix and environment (the package doc lists it). A
// secret a meilistream process printed fails t.
func Setup(t *testing.T) func(env *testscript.Env) error {
	srv = &servers{}
	t.Cleanup(srv.close)
	leakDir := t.TempDir()
	t.Cleanup(func() { reportLeaks(t, leakDir) })
	return func(env *testscript.Env) error {
		if err := srv.start(); err != nil {
			return fmt.Errorf("start test servers: %w", err)
		}
		db := scriptDB(filepath.Base(env.WorkDir))
		vars := map[string]string{
			"DB":                           db,
			"REPLICA_DB":                   db + "_r",
			"PREFIX":                       db + "_",
			"MONGODB_URI":                  srv.mongoURI,
			"MEILI_URL":                    srv.meiliURL,
			"MEILI_API_KEY":                srv.meiliKey,
			"MEILISTREAM_MONGODB_URI":      srv.mongoURI,
			"MEILISTREAM_MONGODB_DATABASE": db,
			"MEILISTREAM_MEILI_URL":        srv.meiliURL,
			"MEILISTREAM_MEILI_API_KEY":    srv.meiliKey,
			"MEILISTREAM_INDEX_PREFIX":     db + "_",
			"MEILISTREAM_TRANSFORMS":       filepath.Join(env.WorkDir, "transforms"),
			"MEILISTREAM_HTTP_ADDR":        "127.0.0.1:0",
			"MEILISTREAM_READY_FILE":       filepath.Join(env.WorkDir, "ready"),
			"MEILISTREAM_LOG_FORMAT":       "json",
			envLeakDir:                     leakDir,
		}
		for k, v := range vars {
			env.Setenv(k, v)
		}
		if realServers() {
			env.Defer(func() { cleanupReal(srv, db) })
		}
		for _, fn := range setups {
			if err := fn(env); err != nil {
				return err
			}
		}
		return nil
	}
}

// servers are the MongoDB and Meilisearch the scripts use, started once for
// the whole run.
type servers struct {
	once     sync.Once
	err      error
	mongoURI string
	meiliURL string
	meiliKey string
	closers  []func() error
	// The in-process servers, for commands that inject faults; nil when
	// the scripts run against real servers ([real]).
	mongo *mongotest.Server
	meili *meilitest.Server
	// [failpoints], probed by start.
	fpOK  bool
	fpErr error
}

func (s *servers) start() error {
	s.once.Do(func() {
		if realServers() {
			s.mongoURI = os.Getenv(envTestMongoURI)
			s.meiliURL = os.Getenv(envTestMeiliURL)
			s.meiliKey = os.Getenv(envTestMeiliKey)
			// Before any script runs (every Setup waits for this), so
			// turning the fail point off disturbs none.
			s.fpOK, s.fpErr = probeFailPoints(s.mongoURI)
			return
		}
		s.fpOK = true
		s.err = s.startInternal()
	})
	return s.err
}

func (s *servers) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
}

// scriptDB makes a database name of a script's work dir name
// ("script-config_missing_uri"): MongoDB allows 63 bytes and no "/\. \"$",
// Meilisearch index uids [A-Za-z0-9_-]; random hex keeps runs apart on
// shared real servers.
func scriptDB(workDir string) string {
	name := strings.TrimPrefix(workDir, "script-")
	name = regexp.MustCompile(`[^A-Za-z0-9_]`).ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[:40]
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "t_" + name + "_" + hex.EncodeToString(b)
}

// cmdWaitFile: waitfile FILE [timeout] polls until FILE exists and is not
// empty (default timeout 30s). With !, until it does not exist.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile FILE [timeout]")
	}
	timeout := 30 * time.Second
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		timeout = d
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(timeout)
	for {
		fi, err := os.Stat(path)
		present := err == nil && fi.Size() > 0
		if present != neg {
			return
		}
		if time.Now().After(deadline) {
			if neg {
				ts.Fatalf("waitfile: %s still exists after %s", args[0], timeout)
			}
			ts.Fatalf("waitfile: no %s after %s (last: %v)", args[0], timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdHTTPGet: httpget [-wait=DUR] URL-or-path [want-status] GETs once (or,
// with -wait, polls until the status is the wanted one) and writes the body
// to stdout. A path ("/status") goes to the address in
// $MEILISTREAM_READY_FILE. want-status defaults to 200; with !, the command
// fails if the status is the wanted one.
func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("httpget", flag.ContinueOnError)
	wait := fs.Duration("wait", 0, "poll until the status matches, for at most this long")
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 || fs.NArg() > 2 {
		ts.Fatalf("usage: httpget [-wait=DUR] URL-or-path [want-status]")
	}
	target := fs.Arg(0)
	want := http.StatusOK
	if fs.NArg() == 2 {
		n, err := strconv.Atoi(fs.Arg(1))
		ts.Check(err)
		want = n
	}
	if strings.HasPrefix(target, "/") {
		ready := ts.Getenv("MEILISTREAM_READY_FILE")
		b, err := os.ReadFile(ready)
		if err != nil {
			ts.Fatalf("httpget: no address yet in %s (waitfile first): %v", ready, err)
		}
		target = "http://" + strings.TrimSpace(string(b)) + target
	}
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(*wait)
	for {
		status, body, err := get(client, target)
		matched := err == nil && status == want
		if matched != neg || time.Now().After(deadline) {
			_, _ = ts.Stdout().Write(body)
			switch {
			case err != nil && !neg:
				ts.Fatalf("httpget %s: %v", target, err)
			case matched && neg:
				ts.Fatalf("httpget %s: status %d, want another", target, status)
			case !matched && !neg:
				ts.Fatalf("httpget %s: status %d, want %d; body: %s", target, status, want, truncate(body, 500))
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdStdoutSetenv: stdout-setenv NAME REGEXP sets $NAME to the first
// group of REGEXP's first match in the last command's stdout (a cursor, an
// id the command printed), and fails when it does not match.
func cmdStdoutSetenv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: stdout-setenv NAME REGEXP (with one group, no !)")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("stdout-setenv: no match for %s in stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}

// cmdExitCode: exitcode N PROG [ARGS...] runs PROG like exec and fails
// unless it exits with code N; its stdout and stderr stay available to
// "stdout" and "stderr". (exec alone only tells zero from non-zero.)
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG [ARGS...] (no !)")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exitcode: %s exited %d, want %d", args[1], got, want)
	}
}

func get(client *http.Client, url string) (int, []byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// WatchSecrets runs main with its stdout and stderr copied through a
// watcher: if the output ever holds a secret from the environment, it
// drops a note in $MEILISTREAM_TEST_LEAK_DIR, and TestScripts fails. The
// output itself is passed on unchanged (hiding a leak would defeat the
// check).
func WatchSecrets(main func() int) int {
	dir := os.Getenv(envLeakDir)
	secrets := secretsOf(os.Environ())
	if dir == "" || len(secrets) == 0 {
		return main()
	}
	origOut, origErr := os.Stdout, os.Stderr
	var wg sync.WaitGroup
	var mu sync.Mutex
	leaked := map[string]bool{}
	watch := func(dst *os.File) *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			return dst
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tail []byte
			buf := make([]byte, 32*1024)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					_, _ = dst.Write(buf[:n])
					tail = append(tail, buf[:n]...)
					for name, s := range secrets {
						if bytes.Contains(tail, []byte(s)) {
							mu.Lock()
							leaked[name] = true
							mu.Unlock()
						}
					}
					if keep := 256; len(tail) > keep {
						tail = append(tail[:0], tail[len(tail)-keep:]...)
					}
				}
				if err != nil {
					return
				}
			}
		}()
		return w
	}
	os.Stdout, os.Stderr = watch(origOut), watch(origErr)
	code := main()
	_ = os.Stdout.Close()
	_ = os.Stderr.Close()
	wg.Wait()
	os.Stdout, os.Stderr = origOut, origErr
	for name := range leaked {
		note := fmt.Sprintf("meilistream %s (pid %d) printed the value of %s\n", strings.Join(os.Args[1:], " "), os.Getpid(), name)
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("leak-%d-%s", os.Getpid(), name)), []byte(note), 0o644)
	}
	return code
}

// secretsOf returns the secret values in environ, by variable: the
// Meilisearch key and the passwords of MongoDB URIs (given directly or in
// _FILE files). Values under 6 bytes are ignored: too likely to occur by
// chance.
func secretsOf(environ []string) map[string]string {
	out := map[string]string{}
	add := func(name, v string) {
		if len(v) >= 6 {
			out[name] = v
		}
	}
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(name, "_FILE") && strings.HasPrefix(name, "MEILISTREAM_") {
			if b, err := os.ReadFile(v); err == nil {
				v = strings.TrimSpace(string(b))
				name = strings.TrimSuffix(name, "_FILE")
			}
		}
		switch {
		case name == "MEILISTREAM_MEILI_API_KEY" || name == "MEILI_API_KEY":
			add(name, v)
		case strings.HasSuffix(name, "_URI"):
			add(name+" (password)", uriPassword(v))
		}
	}
	return out
}

// uriPassword returns the password in a URI's user info, or "": as the
// MongoDB driver reads it (x/mongo/driver/connstring), everything before
// the first '@' is the user info, so a password may hold an unescaped '?'
// or '#'.
func uriPassword(uri string) string {
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return ""
	}
	at := strings.Index(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

func reportLeaks(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		t.Errorf("secret leaked: %s", strings.TrimSpace(string(b)))
	}
}

// cleanupReal drops what a script left on real servers: its databases and
// indexes. Best effort; it must not fail a passed script.
func cleanupReal(srv *servers, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dropRealDatabases(ctx, srv.mongoURI, db, db+"_r")
	deleteRealIndexes(ctx, srv.meiliURL, srv.meiliKey, db+"_")
}

// startInternal starts the in-process test servers.
func (s *servers) startInternal() error {
	mongo, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		return fmt.Errorf("mongotest: %w", err)
	}
	s.closers = append(s.closers, mongo.Close)
	meili, err := meilitest.Start(meilitest.Options{MasterKey: testMeiliKey})
	if err != nil {
		return fmt.Errorf("meilitest: %w", err)
	}
	s.closers = append(s.closers, meili.Close)
	s.mongo, s.meili = mongo, meili
	s.mongoURI = mongo.URI()
	s.meiliURL, s.meiliKey = meili.URL(), testMeiliKey
	return nil
}

func dropRealDatabases(ctx context.Context, uri string, dbs ...string) {
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return
	}
	defer func() { _ = client.Disconnect(ctx) }()
	for _, db := range dbs {
		_ = client.Database(db).Drop(ctx)
	}
}

func deleteRealIndexes(ctx context.Context, url, key, prefix string) {
	client := meilisearch.New(url, meilisearch.WithAPIKey(key))
	res, err := client.ListIndexes(ctx, &meilisearch.IndexesQuery{Limit: 1000})
	if err != nil {
		return
	}
	for _, idx := range res.Results {
		if strings.HasPrefix(idx.UID, prefix) {
			_, _ = client.DeleteIndex(ctx, idx.UID)
		}
	}
}
