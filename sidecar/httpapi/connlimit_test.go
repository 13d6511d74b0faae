package httpapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIdleConnectionsDoNotStopHealthz: 3,000 connections left open, half
// of them idle keep-alive connections after a request, half never sending
// a byte, and /healthz still answers at once on a new connection, while
// the server never keeps more than its bound open.
func TestIdleConnectionsDoNotStopHealthz(t *testing.T) {
	s, err := Start(Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := s.Addr()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range 3000 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			// A keep-alive connection left idle after one request (a
			// connection evicted meanwhile answers nothing: fine).
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					resp.Body.Close()
				}
			}
		}
	}
	if n := s.limit.open(); n > DefaultMaxConns {
		t.Errorf("%d connections open, want at most %d", n, DefaultMaxConns)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 20 {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz %d with 3000 connections left open: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz %d: status %d", i, resp.StatusCode)
		}
	}
}

// TestBusyConnectionsAreNotEvicted: at the bound, a connection serving a
// request keeps it; the new connection is the one refused.
func TestBusyConnectionsAreNotEvicted(t *testing.T) {
	l := newConnLimiter(2)
	a, b, c := fakeConn("a"), fakeConn("b"), fakeConn("c")
	for _, conn := range []net.Conn{a, b} {
		if !l.admit(conn) {
			t.Fatal("refused under the bound")
		}
		l.ConnState(conn, http.StateActive)
	}
	if l.admit(c) {
		t.Fatal("admitted a third connection while two serve requests")
	}
	l.ConnState(a, http.StateIdle)
	if !l.admit(c) {
		t.Fatal("refused a connection while one was idle")
	}
	if !a.(*stubConn).closed || b.(*stubConn).closed {
		t.Errorf("evicted a=%v b=%v, want only the idle a", a.(*stubConn).closed, b.(*stubConn).closed)
	}
}

type stubConn struct {
	net.Conn
	name   string
	closed bool
}

func fakeConn(name string) net.Conn { return &stubConn{name: name} }

func (c *stubConn) Close() error { c.closed = true; return nil }

func (c *stubConn) String() string { return strings.ToUpper(c.name) }
