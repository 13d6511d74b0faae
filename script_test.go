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
// available (always); [failpoints] when MongoDB takes configureFailPoint;
// [standalone] when a standalone MongoDB is available for standalone-mongo
// (see script_standalone_test.go).
// Faults that real servers can be given too go through the harness: a TCP
// proxy in front of a server (proxy), signals to a sidecar (signal), the
// failCommand fail point scoped to the script's namespace (mongo-failcommand
// -ns, replica-fail -ns); see "Fault injection" below. Commands that need
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

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
)

// scriptCmds are the custom commands scripts can use. Other test files add
// theirs from init().
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"waitfile":      cmdWaitFile,
	"httpget":       cmdHTTPGet,
	"exitcode":      cmdExitCode,
	"stdout-setenv": cmdStdoutSetenv,
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

// Fault injection, working on real servers as on the test servers:
//
//	proxy start VAR        puts a TCP proxy in front of the server whose
//	                       address is in $VAR (http://host:port or a
//	                       single-host mongodb:// URI) and points $VAR at it.
//	                       A mongodb:// URI gets directConnection=true, or the
//	                       driver would leave the proxy for the host the
//	                       server announces in hello (the Server Discovery
//	                       and Monitoring specification). The harness's own
//	                       commands (mongo, synced,
//	                       ...) keep talking to the server directly.
//	proxy down VAR         drops every open connection and then each new one
//	                       once the client has sent its first bytes (a server
//	                       gone away mid-request), until "proxy up VAR".
//	proxy up VAR           passes connections through again.
//	proxy drop [-timeout D] VAR
//	                       drops every open connection once (a network blip,
//	                       the connections an old primary closes) and prints
//	                       how many. It first polls until at least one is
//	                       open (a client that lost its connections to an
//	                       earlier drop has to come back first, or the drop
//	                       would hit nothing), and fails if none is within D
//	                       (default 30s): the client does not use the proxy,
//	                       or never reconnected.
//	proxy refused [-timeout D] VAR N
//	                       polls until at least N connections were dropped
//	                       since the last "proxy down VAR": the client did try.
//	signal [-ready FILE] STOP|CONT|TERM
//	                       sends the signal to the meilistream process serving
//	                       at the address in FILE (default
//	                       $MEILISTREAM_READY_FILE), found by its lease holder;
//	                       CONT goes to the process the script stopped (a
//	                       stopped process answers no HTTP). A process still
//	                       stopped at the end of the script is continued.
//
// Condition [failpoints]: the MongoDB server takes configureFailPoint (the
// test servers always; real mongod only when started with --setParameter
// enableTestCommands=1). A real server has one failCommand fail point for
// all its clients, so the commands that set it (mongo-failcommand,
// replica-fail) scope it to a namespace of the script's own (-ns) and hold
// failPointTurn while it is set on the shared server: the scripts that use
// it take turns.

// proxies maps a proxied address ($VAR after "proxy start") to the one it
// stands in front of, for directURI.
var proxies sync.Map // proxied uri -> original uri

// directURI returns the address uri stands for when it is a proxy's (the
// harness's own clients bypass the proxies), else uri.
func directURI(uri string) string {
	if o, ok := proxies.Load(uri); ok {
		return o.(string)
	}
	return uri
}

var scriptProxies sync.Map // *testscript.TestScript -> *sync.Map (VAR -> *faultProxy)

func init() {
	scriptCmds["proxy"] = cmdProxy
	scriptCmds["signal"] = cmdSignal
	scriptConds["failpoints"] = func() (bool, error) {
		if err := srv.start(); err != nil {
			return false, err
		}
		return srv.fpOK, srv.fpErr
	}
}

func cmdProxy(ts *testscript.TestScript, neg bool, args []string) {
	usage := "usage: proxy start|down|up VAR | proxy drop [-timeout D] VAR | proxy refused [-timeout D] VAR N"
	if neg || len(args) < 2 {
		ts.Fatalf("%s", usage)
	}
	m, _ := scriptProxies.LoadOrStore(ts, &sync.Map{})
	byVar := m.(*sync.Map)
	op := args[0]
	if op == "start" {
		if len(args) != 2 {
			ts.Fatalf("%s", usage)
		}
		name := args[1]
		if _, ok := byVar.Load(name); ok {
			ts.Fatalf("proxy: $%s already goes through a proxy", name)
		}
		orig := ts.Getenv(name)
		target, rewrite, err := proxyTarget(orig)
		if err != nil {
			ts.Fatalf("proxy start %s: %v", name, err)
		}
		p, err := startProxy(target)
		ts.Check(err)
		proxied := rewrite(p.addr())
		proxies.Store(proxied, directURI(orig))
		byVar.Store(name, p)
		ts.Defer(func() {
			p.close()
			proxies.Delete(proxied)
			scriptProxies.Delete(ts)
		})
		ts.Setenv(name, proxied)
		return
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() < 1 {
		ts.Fatalf("%s", usage)
	}
	v, ok := byVar.Load(fs.Arg(0))
	if !ok {
		ts.Fatalf("proxy %s: no proxy in front of $%s (proxy start %s first)", op, fs.Arg(0), fs.Arg(0))
	}
	p := v.(*faultProxy)
	switch {
	case op == "down" && fs.NArg() == 1:
		p.setDown(true)
	case op == "up" && fs.NArg() == 1:
		p.setDown(false)
	case op == "drop" && fs.NArg() == 1:
		// A connection must be open, or the drop tests nothing: the
		// client does not go through the proxy (a mongodb:// client
		// following the announced hosts), or has not reconnected since
		// the last drop yet (two drops a few commands apart hit the
		// second time nothing). Wait for one.
		deadline := time.Now().Add(*timeout)
		for {
			if p.openClients() > 0 {
				n, total := p.dropAll()
				fmt.Fprintf(ts.Stdout(), "dropped %d of %d connections\n", n, total)
				break
			}
			total := p.totalClients()
			if time.Now().After(deadline) {
				if total == 0 {
					ts.Fatalf("proxy drop %s: no connection ever went through it: does the client use $%s?", fs.Arg(0), fs.Arg(0))
				}
				ts.Fatalf("proxy drop %s: no connection open after %s (%d went through before): the client did not reconnect", fs.Arg(0), *timeout, total)
			}
			time.Sleep(20 * time.Millisecond)
		}
	case op == "refused" && fs.NArg() == 2:
		want, err := strconv.ParseInt(fs.Arg(1), 10, 64)
		ts.Check(err)
		deadline := time.Now().Add(*timeout)
		for {
			n := p.refusedCount()
			if n >= want {
				fmt.Fprintf(ts.Stdout(), "%d\n", n)
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("proxy %s: %d connections dropped since it went down, want at least %d after %s", fs.Arg(0), n, want, *timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	default:
		ts.Fatalf("%s", usage)
	}
}

// proxyTarget parses a server address as the sidecar takes it: the
// host:port to dial, and how to write the address with the proxy's
// host:port in its place.
func proxyTarget(uri string) (string, func(addr string) string, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "", nil, fmt.Errorf("%q is not a URL or a mongodb:// URI", redactURI(uri))
	}
	defPort := ""
	switch scheme {
	case "http":
		defPort = "80"
	case "mongodb":
		defPort = "27017"
	default:
		// https, mongodb+srv: the proxy would break TLS host checks or
		// SRV lookups; the real servers of the tests are plain TCP.
		return "", nil, fmt.Errorf("scheme %s:// cannot go through the test proxy (http:// and mongodb:// only)", scheme)
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	if q := strings.ToLower(tail); scheme == "mongodb" && (strings.Contains(q, "tls=true") || strings.Contains(q, "ssl=true")) {
		return "", nil, fmt.Errorf("%q uses TLS: the test proxy needs a plain TCP server", redactURI(uri))
	}
	if strings.Contains(authority, ",") {
		return "", nil, fmt.Errorf("%q names several hosts; the proxy stands in front of one server", redactURI(uri))
	}
	target := authority
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(strings.Trim(target, "[]"), defPort)
	}
	rewrite := func(addr string) string {
		out := scheme + "://" + userinfo + addr
		if scheme != "mongodb" {
			return out + tail
		}
		path, query, _ := strings.Cut(tail, "?")
		if path == "" {
			path = "/"
		}
		var opts []string
		for _, o := range strings.Split(query, "&") {
			if o != "" && !strings.HasPrefix(strings.ToLower(o), "directconnection=") {
				opts = append(opts, o)
			}
		}
		opts = append(opts, "directConnection=true")
		return out + path + "?" + strings.Join(opts, "&")
	}
	return target, rewrite, nil
}

// redactURI hides a URI's password, for error messages.
func redactURI(uri string) string {
	if pw := uriPassword(uri); pw != "" {
		return strings.Replace(uri, ":"+pw+"@", ":xxx@", 1)
	}
	return uri
}

// faultProxy is a TCP proxy that can drop connections.
type faultProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	down    bool
	closed  bool
	refused int64
	conns   map[net.Conn]struct{} // both sides of every connection
	clients int                   // open client connections
	total   int                   // client connections passed through
	wg      sync.WaitGroup
}

func startProxy(target string) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// track registers c (false when the proxy is closed: c is closed then).
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *faultProxy) handle(c net.Conn) {
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	p.mu.Lock()
	down := p.down
	if down {
		p.refused++
	}
	p.mu.Unlock()
	if down {
		// Let the client send its request (or handshake), then hang up
		// without an answer.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var b [1]byte
		_, _ = c.Read(b[:])
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(s) {
		return
	}
	defer p.untrack(s)
	p.mu.Lock()
	p.clients++
	p.total++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.clients--
		p.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(s, c)
		// The client is done (or gone): so is the server side.
		_ = s.Close()
		close(done)
	}()
	_, _ = io.Copy(c, s)
	_ = c.Close()
	<-done
}

func (p *faultProxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	if down {
		p.refused = 0
	}
	p.mu.Unlock()
	if down {
		p.dropAll()
	}
}

// dropAll closes every open connection and returns how many clients had
// one, and how many ever went through.
func (p *faultProxy) dropAll() (open, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	return p.clients, p.total
}

// openClients is how many client connections are open through the
// proxy; totalClients how many ever went through.
func (p *faultProxy) openClients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clients
}

func (p *faultProxy) totalClients() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func (p *faultProxy) refusedCount() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *faultProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.dropAll()
	p.wg.Wait()
}

// scriptStopped remembers, per script, the processes "signal STOP"
// stopped, by ready file.
var scriptStopped sync.Map // *testscript.TestScript -> *sync.Map (ready file -> pid)

// cmdSignal: signal [-ready FILE] STOP|CONT|TERM; see the comment above
// the proxy commands.
func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("signal", flag.ContinueOnError)
	ready := fs.String("ready", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: signal [-ready FILE] STOP|CONT|TERM (no !)")
	}
	if *ready == "" {
		*ready = ts.Getenv("MEILISTREAM_READY_FILE")
	}
	file := ts.MkAbs(*ready)
	m, _ := scriptStopped.LoadOrStore(ts, &sync.Map{})
	stopped := m.(*sync.Map)
	switch fs.Arg(0) {
	case "CONT":
		v, ok := stopped.LoadAndDelete(file)
		if !ok {
			ts.Fatalf("signal CONT: no process serving at %s was stopped by this script", *ready)
		}
		p, err := os.FindProcess(v.(int))
		ts.Check(err)
		ts.Check(p.Signal(sigCont))
	case "STOP", "TERM":
		if fs.Arg(0) == "STOP" && sigStop == nil {
			ts.Fatalf("signal STOP: this OS has no SIGSTOP")
		}
		pid := holderPid(ts, file)
		p, err := os.FindProcess(pid)
		ts.Check(err)
		if fs.Arg(0) == "TERM" {
			ts.Check(p.Signal(syscall.SIGTERM))
			return
		}
		ts.Check(p.Signal(sigStop))
		stopped.Store(file, pid)
		ts.Defer(func() {
			// Still stopped at the end (a failed script): continue it,
			// so testscript's closing interrupt can end it.
			if _, ok := stopped.LoadAndDelete(file); ok {
				_ = p.Signal(sigCont)
			}
		})
	default:
		ts.Fatalf("signal: %q is not STOP, CONT or TERM", fs.Arg(0))
	}
}

// holderPid returns the pid of the meilistream process serving at the
// address in the ready file, from the lease holder ("host:pid:random") of
// its first job, which must be running (a standby job names another
// process's holder).
func holderPid(ts *testscript.TestScript, readyFile string) int {
	addr, err := os.ReadFile(readyFile)
	ts.Check(err)
	a := strings.TrimSpace(string(addr))
	if state, err := getStatus(a, "jobs.0.state"); err != nil || (state != "reindexing" && state != "following") {
		ts.Fatalf("jobs.0 is %q (%v), want reindexing or following: its holder is this process then", state, err)
	}
	holder, err := getStatus(a, "jobs.0.holder")
	ts.Check(err)
	parts := strings.Split(holder, ":")
	if len(parts) != 3 {
		ts.Fatalf("holder %q is not host:pid:random", holder)
	}
	pid, err := strconv.Atoi(parts[1])
	ts.Check(err)
	if pid == os.Getpid() || pid <= 1 {
		ts.Fatalf("holder pid %d is not a child process", pid)
	}
	return pid
}

// failPointTurn is held by the script whose fail point is set on the shared
// MongoDB server (one failCommand fail point per server).
var failPointTurn = make(chan *testscript.TestScript, 1)

var failPointHolder sync.Map // *testscript.TestScript -> true while it holds the turn

// takeFailPointTurn waits for the shared server's fail point to be free and
// holds it for ts until releaseFailPointTurn or the end of the script
// (which turns the fail point off).
func takeFailPointTurn(ts *testscript.TestScript, admin *mongo.Database) {
	if _, ok := failPointHolder.Load(ts); ok {
		return
	}
	failPointTurn <- ts
	failPointHolder.Store(ts, true)
	ts.Defer(func() {
		if _, ok := failPointHolder.Load(ts); ok {
			ctx, cancel := cmdCtx()
			defer cancel()
			_ = admin.RunCommand(ctx, failPointOff).Err()
			releaseFailPointTurn(ts)
		}
	})
}

func releaseFailPointTurn(ts *testscript.TestScript) {
	if _, ok := failPointHolder.LoadAndDelete(ts); ok {
		<-failPointTurn
	}
}

var failPointOff = bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}}

// probeFailPoints tells whether the server at uri takes configureFailPoint:
// it turns the failCommand fail point off.
func probeFailPoints(uri string) (bool, error) {
	ctx, cancel := cmdCtx()
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return false, err
	}
	defer func() { _ = client.Disconnect(ctx) }()
	err = client.Database("admin").RunCommand(ctx, failPointOff).Err()
	var se mongo.ServerError
	if errors.As(err, &se) {
		// CommandNotFound (59) without enableTestCommands; Unauthorized
		// (13) for a user who may not: either way, no fail points.
		return false, nil
	}
	return err == nil, err
}

// TestProxyTarget checks how proxy start rewrites a server address: a
// mongodb:// URI keeps its user, database and options and gets
// directConnection=true; what a TCP proxy cannot stand in front of is
// refused.
func TestProxyTarget(t *testing.T) {
	for _, c := range []struct{ in, dial, out string }{
		{"mongodb://127.0.0.1:4000/?replicaSet=rs0", "127.0.0.1:4000", "mongodb://127.0.0.1:9/?replicaSet=rs0&directConnection=true"},
		{"mongodb://u:p%40ss@db:27017/admin?directConnection=false&authSource=admin", "db:27017", "mongodb://u:p%40ss@127.0.0.1:9/admin?authSource=admin&directConnection=true"},
		{"mongodb://localhost?replicaSet=rs0", "localhost:27017", "mongodb://127.0.0.1:9/?replicaSet=rs0&directConnection=true"},
		{"http://127.0.0.1:7700", "127.0.0.1:7700", "http://127.0.0.1:9"},
		{"http://meili/prefix", "meili:80", "http://127.0.0.1:9/prefix"},
		{"mongodb://a:1,b:2/?replicaSet=rs0", "", ""},
		{"mongodb://h/?tls=true", "", ""},
		{"mongodb+srv://cluster.example/", "", ""},
		{"https://meili", "", ""},
	} {
		dial, rewrite, err := proxyTarget(c.in)
		if c.dial == "" {
			if err == nil {
				t.Errorf("proxyTarget(%q): no error, want one", c.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("proxyTarget(%q): %v", c.in, err)
			continue
		}
		if out := rewrite("127.0.0.1:9"); dial != c.dial || out != c.out {
			t.Errorf("proxyTarget(%q) = %q, %q; want %q, %q", c.in, dial, out, c.dial, c.out)
		}
	}
}
