package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/meilistream/meilistream/sidecar/config"
)

// probeFlags are the flags of "meilistream probe".
type probeFlags struct {
	ready   bool
	addr    string
	timeout time.Duration
}

func (f *probeFlags) define(fs *flag.FlagSet) {
	fs.BoolVar(&f.ready, "ready", false, "ask /readyz (MongoDB and the destinations reachable, no job\nfailed or stalled) instead of /healthz (alive)")
	fs.StringVar(&f.addr, "addr", "", "the sidecar's address `HOST:PORT`")
	fs.Func("timeout", "how long to wait for the answer, a Go duration `D` (default 3s)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("wants a positive Go duration, e.g. 3s")
		}
		f.timeout = d
		return nil
	})
	f.timeout = 3 * time.Second
}

// runProbe is the body of "meilistream probe": a health check that needs
// no shell or curl, so the distroless image can run it as a Docker
// HEALTHCHECK or a compose healthcheck. It asks the sidecar already running
// in the same container (or pod) over its own HTTP address.
func runProbe(f probeFlags, stdout, stderr io.Writer) int {
	addr, timeout := f.addr, f.timeout
	if addr == "" {
		addr = probeAddr(os.Getenv("MEILISTREAM_HTTP_ADDR"), os.Getenv("MEILISTREAM_READY_FILE"))
	}
	url, err := probeURL(addr, f.ready)
	if err != nil {
		return usageError(stderr, "probe", "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError(stderr, "probe", "%v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "meilistream probe: GET %s: %v (is the sidecar running, on this address?)\n", url, err)
		return exitFailed
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "meilistream probe: GET %s: %s: %s\n", url, resp.Status, body)
		return exitFailed
	}
	fmt.Fprintf(stdout, "ok: GET %s: %s\n", url, resp.Status)
	return exitOK
}

// probeAddr is the address the running sidecar listens on, as far as its
// environment tells: MEILISTREAM_HTTP_ADDR, or, when that asks for a free
// port (":0"), the bound address the sidecar wrote to its ready file.
func probeAddr(httpAddr, readyFile string) string {
	if httpAddr == "" {
		httpAddr = config.DefaultHTTPAddr
	}
	if _, port, err := net.SplitHostPort(httpAddr); err == nil && port == "0" && readyFile != "" {
		if b, err := os.ReadFile(readyFile); err == nil {
			if bound := strings.TrimSpace(string(b)); bound != "" {
				return bound
			}
		}
	}
	return httpAddr
}

// probeURL turns a listen address into the URL that reaches it from the
// same host: an address that listens on every interface (":8080",
// "0.0.0.0:8080", "[::]:8080") is reached on the loopback.
func probeURL(addr string, ready bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q is not host:port (MEILISTREAM_HTTP_ADDR or --addr)", addr)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	path := "/healthz"
	if ready {
		path = "/readyz"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
