package httpapi

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxConns bounds the connections the server keeps open at once.
// Kubelet probes and a Prometheus scrape use a handful; the rest would be
// clients holding idle keep-alive connections, or opening connections and
// sending nothing.
const DefaultMaxConns = 256

// The server's timeouts. The answers are small and quick (/readyz waits
// at most readyTimeout), so a client that takes longer than these is gone
// or hostile; an idle keep-alive connection is closed after idleTimeout.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
)

// connLimiter bounds the open connections of a listener. At the bound, a
// new connection takes the place of the connection that has been waiting
// longest without a request in progress (a new one that sent nothing yet,
// or an idle keep-alive one), which is closed: so however many idle
// connections a client leaves open, a kubelet probe on a fresh connection
// is answered at once, and the process never nears its file limit. Only
// when every connection is serving a request is the new one refused.
//
// Its Listener wraps the server's; its ConnState must be the server's
// ConnState hook, which tells it which connections are between requests.
type connLimiter struct {
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
}

type connEntry struct {
	active bool      // a request is in progress
	since  time.Time // when it last became idle (or was accepted)
}

func newConnLimiter(max int) *connLimiter {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &connLimiter{max: max, conns: map[net.Conn]*connEntry{}}
}

// Listener returns ln with the bound applied on Accept.
func (l *connLimiter) Listener(ln net.Listener) net.Listener { return limitedListener{ln, l} }

type limitedListener struct {
	net.Listener
	l *connLimiter
}

func (ll limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ll.l.admit(c) {
			return c, nil
		}
		_ = c.Close()
	}
}

// admit registers c, closing the longest-waiting connection without a
// request in progress when at the bound; false (c must be closed) when
// every connection serves a request.
func (l *connLimiter) admit(c net.Conn) bool {
	l.mu.Lock()
	var evict net.Conn
	if len(l.conns) >= l.max {
		var oldest time.Time
		for oc, e := range l.conns {
			if !e.active && (evict == nil || e.since.Before(oldest)) {
				evict, oldest = oc, e.since
			}
		}
		if evict == nil {
			l.mu.Unlock()
			return false
		}
		delete(l.conns, evict)
	}
	l.conns[c] = &connEntry{since: time.Now()}
	l.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
	return true
}

// ConnState is the server's ConnState hook.
func (l *connLimiter) ConnState(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	case http.StateActive:
		if ok {
			e.active = true
		}
	case http.StateIdle:
		if ok {
			e.active, e.since = false, time.Now()
		}
	}
}

// open returns how many connections are open, for tests.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
