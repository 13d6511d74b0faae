package main

// The end-to-end suite: testdata/scripts/*.txtar run the real meilistream
// command (this package's Main, registered with testscript.Main) against
// MongoDB and Meilisearch: the in-process test servers by default, or real
// ones when MEILISTREAM_TEST_MONGODB_URI (a replica set) and
// MEILISTREAM_TEST_MEILI_URL are set (MEILISTREAM_TEST_MEILI_API_KEY for its
// key). See README.md, "Testing".
//
// Extension points, so each area adds its own commands in its own file
// (script_sync_test.go, script_mirror_test.go, ...) without editing this one:
//
//	func init() {
//		scriptCmds["mongo"] = cmdMongo        // a custom script command
//		scriptConds["slow"] = func() (bool, error) { ... }
//		scriptSetups = append(scriptSetups, func(env *testscript.Env) error { ... })
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
// available (always). Commands that inject faults into the in-process
// servers reach them through srv.mongo and srv.meili (nil under [real]: such
// scripts start with "[real] skip").
//
// Generic commands: waitfile FILE [timeout]; httpget [-wait=DUR] URL-or-path
// [want-status] (a path is relative to the address in $MEILISTREAM_READY_FILE);
// exitcode N PROG [ARGS...] (exec that asserts the exit code, keeping stdout
// and stderr for the next assertions).
//
// Every run of the meilistream command in a script is watched: if its
// stdout or stderr ever holds a secret of its environment (the Meilisearch
// key, a URI password), the suite fails naming the script's command.

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

// scriptCmds are the custom commands scripts can use. Other test files add
// theirs from init().
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"waitfile": cmdWaitFile,
	"httpget":  cmdHTTPGet,
	"exitcode": cmdExitCode,
}

// scriptConds are custom conditions ([name] in a script), added to from
// init() like scriptCmds.
var scriptConds = map[string]func() (bool, error){
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

// scriptSetups run after the harness's own Setup, for each script, in the
// order added.
var scriptSetups []func(env *testscript.Env) error

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

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"meilistream": func() { os.Exit(watchSecrets(Main)) },
	})
}

func realServers() bool {
	return os.Getenv(envTestMongoURI) != "" && os.Getenv(envTestMeiliURL) != ""
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
}

func (s *servers) start() error {
	s.once.Do(func() {
		if realServers() {
			s.mongoURI = os.Getenv(envTestMongoURI)
			s.meiliURL = os.Getenv(envTestMeiliURL)
			s.meiliKey = os.Getenv(envTestMeiliKey)
			return
		}
		s.err = s.startInternal()
	})
	return s.err
}

func (s *servers) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
}

func TestScripts(t *testing.T) {
	// Servers of this call's own, started on first use and closed when it
	// ends, so "go test -count=N" runs every time against live servers.
	srv = &servers{}
	t.Cleanup(srv.close)
	leakDir := t.TempDir()
	t.Cleanup(func() { reportLeaks(t, leakDir) })

	cmds := map[string]func(ts *testscript.TestScript, neg bool, args []string){}
	for name, fn := range scriptCmds {
		cmds[name] = fn
	}
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "scripts"),
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		UpdateScripts:       os.Getenv("TESTSCRIPT_UPDATE") != "",
		Cmds:                cmds,
		Condition: func(cond string) (bool, error) {
			if fn, ok := scriptConds[cond]; ok {
				return fn()
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(env *testscript.Env) error {
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
			for _, fn := range scriptSetups {
				if err := fn(env); err != nil {
					return err
				}
			}
			return nil
		},
	})
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

// watchSecrets runs main with its stdout and stderr copied through a
// watcher: if the output ever holds a secret from the environment, it
// drops a note in $MEILISTREAM_TEST_LEAK_DIR, and TestScripts fails. The
// output itself is passed on unchanged (hiding a leak would defeat the
// check).
func watchSecrets(main func() int) int {
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

// uriPassword returns the password in a URI's user info, or "".
func uriPassword(uri string) string {
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
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

// TestScriptServers checks the servers the scripts get answer the real
// clients, so a script failure is not a harness failure in disguise.
func TestScriptServers(t *testing.T) {
	srv := &servers{} // its own: the suite's are closed when TestScripts ends
	t.Cleanup(srv.close)
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	if err := client.Ping(ctx, nil); err != nil {
		t.Errorf("MongoDB at %s: %v", srv.mongoURI, err)
	}
	meili := meilisearch.New(srv.meiliURL, meilisearch.WithAPIKey(srv.meiliKey))
	if _, err := meili.ListIndexes(ctx, &meilisearch.IndexesQuery{Limit: 1}); err != nil {
		t.Errorf("Meilisearch at %s: %v", srv.meiliURL, err)
	}
}
