package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the HTTP server.
type Options struct {
	// Addr is the listen address (Config.HTTPAddr); port 0 picks one.
	Addr string
	// ReadyFile, when set (Config.ReadyFile), receives the bound address
	// ("127.0.0.1:43121") once the server listens, written atomically; it
	// is removed by Close.
	ReadyFile string
	// Status answers /status and /readyz. Nil: no jobs, always ready.
	Status status.Source
	// Gatherer is served on /metrics (the registry from NewRegistry). Nil:
	// /metrics answers 404.
	Gatherer prometheus.Gatherer
	// Config, when set, is the configuration shown in /status: its JSON
	// must mask the secrets, as the configuration's own MarshalJSON does.
	Config json.Marshaler
	// Scrub, when set, masks secrets in the answers of /status and
	// /readyz (the configuration's, see config.Scrubber): the last line of
	// defence against an error text that carries a URL or a key.
	Scrub func(string) string
	// Version is shown in /status.
	Version string
	// Log receives the server's own errors. Nil: discarded.
	Log hclog.Logger
	// MaxConns bounds the open connections (default DefaultMaxConns); see
	// connLimiter for what happens at the bound. Waits (GET /wait) take at
	// most all but 32 of them.
	MaxConns int
	// Wait answers GET /wait (read your writes). Nil: /wait answers 404.
	Wait Waits
	// Waited, when set, is told each GET /wait answer for a job the
	// waiter knows (Metrics.ObserveWait): not a 400, a 404, nor a 429 of
	// the server's own bound, given before the job is looked at.
	Waited func(job string, status int)
}

// Server serves /healthz, /readyz, /status and /metrics.
type Server struct {
	opts  Options
	ln    net.Listener
	srv   *http.Server
	limit *connLimiter
	done  chan struct{}
	// waiting counts the GET /wait requests in progress; stopping ends
	// them when the server closes.
	waiting   atomic.Int64
	stopping  context.Context
	stop      context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

// readyTimeout bounds one /readyz check.
const readyTimeout = 3 * time.Second

// Start listens on o.Addr, writes o.ReadyFile, and serves in the
// background until Close.
//
//	GET /healthz  200 "ok" while the process serves (liveness)
//	GET /readyz   200 "ok", or 503 with what is wrong (Status.Ready)
//	GET /status   200 StatusReport as JSON
//	GET /wait     read your writes (wait.go)
//	GET /metrics  Prometheus text format
func Start(o Options) (*Server, error) {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	s := &Server{opts: o, ln: ln, done: make(chan struct{})}
	s.stopping, s.stop = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /status", s.status)
	if o.Wait != nil {
		mux.HandleFunc("GET /wait", s.wait)
	}
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
			ErrorLog: hclogPrintln{o.Log},
		}))
	}
	limit := newConnLimiter(o.MaxConns)
	s.limit = limit
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    16 << 10,
		ConnState:         limit.ConnState,
		ErrorLog:          o.Log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limit.Listener(ln)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error("http server stopped", "error", err)
		}
	}()
	if o.ReadyFile != "" {
		if err := writeFileAtomic(o.ReadyFile, []byte(s.Addr()+"\n")); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("write ready file: %w", err)
		}
	}
	return s, nil
}

// Addr returns the address the server listens on, with an unspecified
// host (":8080", "[::]:8080") given as 127.0.0.1 so it can be dialled.
func (s *Server) Addr() string {
	a, ok := s.ln.Addr().(*net.TCPAddr)
	if !ok {
		return s.ln.Addr().String()
	}
	host := a.IP.String()
	if a.IP == nil || a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, fmt.Sprint(a.Port))
}

// Close stops the server: no new connections, requests in flight get a
// few seconds to finish. It removes the ready file. Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.srv.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, s.srv.Close())
		}
		<-s.done
		if s.opts.ReadyFile != "" {
			if rerr := os.Remove(s.opts.ReadyFile); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
		s.closeErr = err
	})
	return s.closeErr
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "ok")
}

func (s *Server) ready(ctx context.Context) error {
	if s.opts.Status == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.opts.Status.Ready(ctx)
}

// readyNow is ready without waiting on a probe when the source can answer
// from memory (QuickReadier): what /status shows.
func (s *Server) readyNow(ctx context.Context) error {
	q, ok := s.opts.Status.(status.QuickReadier)
	if !ok {
		return s.ready(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return q.ReadyNow(ctx)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, s.scrub(fmt.Sprintf("not ready: %v\n", err)+s.scanLines()))
		return
	}
	fmt.Fprint(w, "ok\n"+s.scrub(s.scanLines()))
}

// scanLines are /readyz's lines after its verdict for the scan-mode jobs
// this process holds: the mode, the recorded cursor and the scan's lag
// (never a reason to be unready: a quiet collection's cursor ages).
func (s *Server) scanLines() string {
	if s.opts.Status == nil {
		return ""
	}
	var b strings.Builder
	for _, j := range s.opts.Status.Status() {
		if j.Scan == nil {
			continue
		}
		cursor := j.Scan.Cursor
		if cursor == "" {
			cursor = "none yet"
		}
		fmt.Fprintf(&b, "job %s: mode scan by %s, cursor %s", j.Name, j.Scan.Key, cursor)
		if !j.Scan.CursorTime.IsZero() {
			fmt.Fprintf(&b, ", scan lag %.1fs", j.Scan.LagSeconds)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	rep := status.Report{
		Version: s.opts.Version,
		Time:    time.Now().UTC(),
		Ready:   s.readyNow(r.Context()) == nil,
		Jobs:    []status.Job{},
	}
	if s.opts.Status != nil {
		if jobs := s.opts.Status.Status(); jobs != nil {
			rep.Jobs = jobs
		}
		if w, ok := s.opts.Status.(status.OplogWindower); ok {
			if v, known := w.OplogWindow(); known {
				rep.OplogWindowSeconds = &v
			}
		}
	}
	if s.opts.Config != nil {
		rep.Config = s.opts.Config
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		s.opts.Log.Error("encode /status", "error", err)
		http.Error(w, "cannot encode the status", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if _, err := io.WriteString(w, s.scrub(buf.String())); err != nil {
		s.opts.Log.Debug("write /status", "error", err)
	}
}

// scrub masks secrets in an answer (Options.Scrub).
func (s *Server) scrub(text string) string {
	if s.opts.Scrub == nil {
		return text
	}
	return s.opts.Scrub(text)
}

// writeFileAtomic writes b to path through a temporary file and a rename,
// so a reader polling for path never sees it half written.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// hclogPrintln adapts a logger to promhttp.Logger.
type hclogPrintln struct{ log hclog.Logger }

func (l hclogPrintln) Println(v ...any) { l.log.Error("serve /metrics", "error", fmt.Sprint(v...)) }
