package meilitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultMaxPayloadBytes is Meilisearch's default --http-payload-size-limit,
// "100 MB" = 100,000,000 bytes (crates/meilisearch/src/option.rs).
const DefaultMaxPayloadBytes = 100_000_000

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on; "" means 127.0.0.1:0 (a free port).
	Addr string
	// MasterKey, when set, is required as "Authorization: Bearer <key>" on
	// every route but GET /health.
	MasterKey string
	// MaxPayloadBytes limits request bodies (after decompression), as
	// --http-payload-size-limit; 0 means DefaultMaxPayloadBytes.
	MaxPayloadBytes int64
	// TaskDelay is an artificial processing time per batch of tasks: tasks
	// stay "processing" that long before they finish. 0 means none.
	TaskDelay time.Duration
	// ProxyBodyLimit plays a reverse proxy in front of the server with a
	// request body limit, as nginx's client_max_body_size (1 MB by
	// default): a request whose body is larger never reaches Meilisearch
	// and is answered 413 with the proxy's HTML page, not Meilisearch's
	// JSON error. 0 means no proxy.
	ProxyBodyLimit int64
}

// FailMode says how FailNext makes requests fail.
type FailMode int

const (
	// Fail5xx answers 503 Service Unavailable with a Meilisearch error object
	// (code "internal") and Retry-After: 10, as Meilisearch does for a 503.
	// meilisearch-go retries 502/503/504 three times with 1+2+3 s of backoff
	// unless the client was built with meilisearch.DisableRetries().
	Fail5xx FailMode = iota
	// FailDrop closes the connection without answering.
	FailDrop
)

func (m FailMode) String() string {
	switch m {
	case Fail5xx:
		return "Fail5xx"
	case FailDrop:
		return "FailDrop"
	}
	return fmt.Sprintf("FailMode(%d)", int(m))
}

// Server is a running Meilisearch-compatible test server.
type Server struct {
	opts Options
	ln   net.Listener
	hs   *http.Server
	url  string

	// mu guards the data: indexes, tasks, the queue and the processing state.
	mu         sync.RWMutex
	indexes    map[string]*index
	tasks      []*task // by uid: uids are dense from 0; nil once deleted
	queue      []*task // enqueued: priority tasks first, then in uid order
	batches    []*batchRecord
	current    []*task       // the batch being processed
	abort      chan struct{} // buffered(1): stop the batch being processed
	features   features
	nextBatch  int64
	processing int             // tasks in the batch being processed
	busy       map[string]bool // indexes of the batch being processed
	paused     bool
	failTask   *apiError
	lastUpdate time.Time
	progress   chan struct{} // closed and replaced whenever a task changes state

	wake chan struct{} // buffered(1): work may be available

	// ctl guards the request-level test controls.
	ctl       sync.Mutex
	failN     int
	failMode  FailMode
	failRoute map[string]*routeFail
	counts    map[string]int

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
	wg        sync.WaitGroup
}

type routeFail struct {
	n    int
	mode FailMode
}

// Start listens on opts.Addr and serves until Close.
func Start(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.MaxPayloadBytes <= 0 {
		opts.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("meilitest: listen %s: %w", opts.Addr, err)
	}
	s := &Server{
		opts:      opts,
		ln:        ln,
		url:       "http://" + ln.Addr().String(),
		indexes:   map[string]*index{},
		progress:  make(chan struct{}),
		wake:      make(chan struct{}, 1),
		abort:     make(chan struct{}, 1),
		failRoute: map[string]*routeFail{},
		counts:    map[string]int{},
		done:      make(chan struct{}),
	}
	s.hs = &http.Server{Handler: normalizePath(s.routes()), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.closeErr = err
		}
	}()
	go func() {
		defer s.wg.Done()
		s.worker()
	}()
	return s, nil
}

// URL returns the base URL, e.g. http://127.0.0.1:7700.
func (s *Server) URL() string { return s.url }

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and its task worker. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.hs.Shutdown(ctx); err != nil {
			_ = s.hs.Close()
		}
		s.wg.Wait()
	})
	return s.closeErr
}

// FailNext makes the next n requests (on any route but GET /health, which a
// readiness probe may call at any moment) fail in the given mode. The
// requests are still counted by Requests. n <= 0 cancels.
func (s *Server) FailNext(n int, mode FailMode) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	s.failN, s.failMode = max(n, 0), mode
}

// FailNextOn makes the next n requests to one route key (as for Requests,
// e.g. "POST /indexes/{uid}/documents") fail in the given mode.
func (s *Server) FailNextOn(route string, n int, mode FailMode) {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	if n <= 0 {
		delete(s.failRoute, route)
		return
	}
	s.failRoute[route] = &routeFail{n: n, mode: mode}
}

// Requests returns how many requests were made to a route key. Keys are the
// method and the route pattern with Meilisearch's path parameters named
// {uid} (index uid), {id} (document id) and {taskUid}:
//
//	GET /  GET /health  GET /version  GET /stats
//	GET /indexes  POST /indexes
//	GET /indexes/{uid}  PATCH /indexes/{uid}  DELETE /indexes/{uid}
//	GET /indexes/{uid}/stats  POST /indexes/{uid}/compact
//	GET /indexes/{uid}/documents  POST /indexes/{uid}/documents
//	PUT /indexes/{uid}/documents  DELETE /indexes/{uid}/documents
//	POST /indexes/{uid}/documents/fetch
//	POST /indexes/{uid}/documents/delete-batch
//	POST /indexes/{uid}/documents/delete
//	GET /indexes/{uid}/documents/{id}  DELETE /indexes/{uid}/documents/{id}
//	POST /indexes/{uid}/search  GET /indexes/{uid}/search
//	GET /indexes/{uid}/settings  PATCH /indexes/{uid}/settings
//	DELETE /indexes/{uid}/settings
//	GET|PUT|PATCH|DELETE /indexes/{uid}/settings/<setting> (e.g.
//	  PUT /indexes/{uid}/settings/stop-words)
//	GET /tasks  GET /tasks/{taskUid}  POST /tasks/cancel  DELETE /tasks
//	GET /batches  GET /batches/{batchUid}
//	GET /experimental-features  PATCH /experimental-features
//	POST /swap-indexes
//
// Requests that match no route (answered 404, or 405 when the path exists
// for other methods) are counted under "unknown". Every request
// is counted, including ones refused by auth or failed by FailNext.
func (s *Server) Requests(route string) int {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	return s.counts[route]
}

// ResetRequests sets every request count back to zero.
func (s *Server) ResetRequests() {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	clear(s.counts)
}

// PauseTasks stops task processing after the batch being processed (if any):
// new tasks stay "enqueued" until ResumeTasks.
func (s *Server) PauseTasks() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// ResumeTasks restarts task processing.
func (s *Server) ResumeTasks() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	s.kick()
}

// FailNextTask makes the next task processed fail with that error code and
// message, without applying it. The type and link are filled in as
// Meilisearch does (type from the code's table, unknown codes
// invalid_request). A code of type internal or system (e.g. "internal")
// fails every task of the next batch, as an internal error does in
// Meilisearch; any other code fails only the next task, as a document
// error does.
func (s *Server) FailNextTask(code, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTask = errf(code, "%s", message)
}

// WaitIdle returns when no task is enqueued or processing, or with ctx's
// error. While tasks are paused it waits for ctx.
func (s *Server) WaitIdle(ctx context.Context) error {
	for {
		s.mu.RLock()
		idle := len(s.queue) == 0 && s.processing == 0
		ch := s.progress
		s.mu.RUnlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-s.done:
			return errors.New("meilitest: server closed")
		}
	}
}

// route registers handler h under pattern (a http.ServeMux pattern, which is
// also the key of Requests).
type handlerFunc func(w http.ResponseWriter, r *http.Request)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	add := func(pattern string, h handlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			s.serve(pattern, w, r, h)
		})
	}
	add("GET /health", s.handleHealth)
	add("GET /version", s.handleVersion)
	add("GET /stats", s.handleStats)
	add("GET /indexes", s.handleListIndexes)
	add("POST /indexes", s.handleCreateIndex)
	add("GET /indexes/{uid}", s.handleGetIndex)
	add("PATCH /indexes/{uid}", s.handleUpdateIndex)
	add("DELETE /indexes/{uid}", s.handleDeleteIndex)
	add("GET /indexes/{uid}/stats", s.handleIndexStats)
	add("POST /indexes/{uid}/compact", s.handleCompactIndex)
	add("GET /indexes/{uid}/documents", s.handleGetDocuments)
	add("POST /indexes/{uid}/documents", s.handleAddDocuments)
	add("PUT /indexes/{uid}/documents", s.handleAddDocuments)
	add("DELETE /indexes/{uid}/documents", s.handleDeleteAll)
	add("POST /indexes/{uid}/documents/fetch", s.handleFetchDocuments)
	add("POST /indexes/{uid}/documents/delete-batch", s.handleDeleteBatch)
	add("POST /indexes/{uid}/documents/delete", s.handleDeleteByFilter)
	add("GET /indexes/{uid}/documents/{id}", s.handleGetDocument)
	add("DELETE /indexes/{uid}/documents/{id}", s.handleDeleteDocument)
	add("POST /indexes/{uid}/search", s.handleSearch)
	add("GET /indexes/{uid}/search", s.handleSearch)
	add("GET /indexes/{uid}/settings", s.handleGetSettings)
	add("PATCH /indexes/{uid}/settings", s.handleUpdateSettings)
	add("DELETE /indexes/{uid}/settings", s.handleResetSettings)
	for _, sr := range settingRoutes {
		get, update, reset := s.settingHandlers(sr.key)
		path := "/indexes/{uid}/settings/" + sr.route
		add("GET "+path, get)
		add(sr.verb+" "+path, update)
		add("DELETE "+path, reset)
	}
	add("GET /tasks", s.handleListTasks)
	add("GET /tasks/{taskUid}", s.handleGetTask)
	add("POST /tasks/cancel", s.handleCancelTasks)
	add("DELETE /tasks", s.handleDeleteTasks)
	add("GET /batches", s.handleListBatches)
	add("GET /batches/{batchUid}", s.handleGetBatch)
	add("GET /experimental-features", s.handleGetFeatures)
	add("PATCH /experimental-features", s.handlePatchFeatures)
	add("POST /swap-indexes", s.handleSwap)
	// Meilisearch registers no default service: anything else is a 404 with
	// an empty body (crates/meilisearch/src/routes/mod.rs, configure), or a
	// 405 when the path exists for other methods (actix resources).
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && r.Method == http.MethodGet {
			// routes::running, served when the dashboard is off.
			s.count("GET /")
			writeRaw(w, http.StatusOK, []byte(`{"status":"Meilisearch is running"}`))
			return
		}
		s.count("unknown")
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if m == r.Method {
				continue
			}
			r2 := r.Clone(r.Context())
			r2.Method = m
			if _, pattern := mux.Handler(r2); pattern != "" && pattern != "/" {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
	})
	return mux
}

// normalizePath trims trailing slashes and merges repeated ones before
// routing, as Meilisearch's NormalizePath(TrailingSlash::Trim) middleware
// does (crates/meilisearch/src/lib.rs, create_app); http.ServeMux would
// answer a redirect instead.
func normalizePath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if len(p) > 1 && (strings.HasSuffix(p, "/") || strings.Contains(p, "//")) {
			for strings.Contains(p, "//") {
				p = strings.ReplaceAll(p, "//", "/")
			}
			if len(p) > 1 {
				p = strings.TrimSuffix(p, "/")
			}
			r.URL.Path, r.URL.RawPath = p, ""
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) count(route string) {
	s.ctl.Lock()
	s.counts[route]++
	s.ctl.Unlock()
}

// serve runs the common steps of every route: count, injected failures,
// auth, then the handler.
func (s *Server) serve(route string, w http.ResponseWriter, r *http.Request, h handlerFunc) {
	s.ctl.Lock()
	s.counts[route]++
	fail, mode := false, Fail5xx
	if rf := s.failRoute[route]; rf != nil {
		fail, mode = true, rf.mode
		if rf.n--; rf.n <= 0 {
			delete(s.failRoute, route)
		}
	} else if s.failN > 0 && route != "GET /health" {
		fail, mode = true, s.failMode
		s.failN--
	}
	s.ctl.Unlock()
	if s.opts.ProxyBodyLimit > 0 && !s.proxyAccepts(w, r) {
		return
	}
	if fail {
		if mode == FailDrop {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		writeErr(w, &apiError{status: http.StatusServiceUnavailable,
			Message: "meilitest: injected failure", Code: "internal", Type: "internal",
			Link: "https://docs.meilisearch.com/errors#internal"})
		return
	}
	w = &encodingWriter{ResponseWriter: w, enc: acceptedEncoding(r.Header.Get("Accept-Encoding"))}
	if route != "GET /health" && s.opts.MasterKey != "" {
		if e := s.authenticate(r); e != nil {
			writeErr(w, e)
			return
		}
	}
	h(w, r)
}

// proxyHTML413 is the page nginx answers a body over client_max_body_size
// with (ngx_http_special_response.c, ngx_http_error_413_page and the
// common tail).
const proxyHTML413 = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n" +
	"<body>\r\n<center><h1>413 Request Entity Too Large</h1></center>\r\n" +
	"<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"

// proxyAccepts plays the proxy of Options.ProxyBodyLimit: a body over the
// limit (by its Content-Length, or counted as it is read when chunked) is
// answered 413 with the proxy's HTML page, and the connection closed, as
// nginx does; it reports whether the request goes on to Meilisearch.
func (s *Server) proxyAccepts(w http.ResponseWriter, r *http.Request) bool {
	limit := s.opts.ProxyBodyLimit
	if r.ContentLength < 0 {
		b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		if int64(len(b)) <= limit {
			r.Body = io.NopCloser(bytes.NewReader(b))
			return true
		}
	} else if r.ContentLength <= limit {
		return true
	}
	h := w.Header()
	h.Set("Content-Type", "text/html")
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = io.WriteString(w, proxyHTML413)
	return false
}

// authenticate follows extract_token_from_request and ActionPolicy in
// crates/meilisearch/src/extractors/authentication/mod.rs: no header or a
// scheme other than Bearer is 401 missing_authorization_header; a wrong key
// is 403 invalid_api_key. Only the master key is known here (no /keys).
func (s *Server) authenticate(r *http.Request) *apiError {
	h := r.Header.Get("Authorization")
	if h == "" {
		return errMissingAuth()
	}
	scheme, token, _ := strings.Cut(h, " ")
	if scheme != "Bearer" {
		return errMissingAuth()
	}
	if strings.TrimSpace(token) != s.opts.MasterKey {
		return errf("invalid_api_key", "The provided API key is invalid.")
	}
	return nil
}

func errMissingAuth() *apiError {
	return errf("missing_authorization_header",
		"The Authorization header is missing. It must use the bearer authorization method.")
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeRaw(w, http.StatusOK, []byte(`{"status":"available"}`))
}

// Version is what GET /version reports as pkgVersion: the Meilisearch
// version whose behaviour this server follows.
const Version = "1.50.0"

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{
		"commitSha": "unknown", "commitDate": "unknown", "pkgVersion": Version,
	})
}
