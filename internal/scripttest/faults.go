package scripttest

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

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
//	                       $MEILISTREAM_READY_FILE), found by the identity
//	                       /status gives (holder or standby);
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
	Cmds["proxy"] = cmdProxy
	Cmds["signal"] = cmdSignal
	conds["failpoints"] = func() (bool, error) {
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
// address in the ready file, from its identity ("host:pid:random") in
// /status, else from the lease holder of its first job, which must then be
// running (a standby job names another process's holder).
func holderPid(ts *testscript.TestScript, readyFile string) int {
	addr, err := os.ReadFile(readyFile)
	ts.Check(err)
	a := strings.TrimSpace(string(addr))
	// The process's own identity; a sidecar without it in /status is
	// known by the holder of a job it runs.
	holder, err := getStatus(a, "process")
	if err != nil || holder == "" {
		if state, err := getStatus(a, "jobs.0.state"); err != nil || (state != "reindexing" && state != "following") {
			ts.Fatalf("jobs.0 is %q (%v), want reindexing or following: its holder is this process then", state, err)
		}
		holder, err = getStatus(a, "jobs.0.holder")
		ts.Check(err)
	}
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
