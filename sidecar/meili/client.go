package meili

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meilisearch/meilisearch-go"
)

// Defaults of Options.
const (
	// DefaultRequestTimeout bounds a request other than a document upload
	// or a task poll: connecting, sending, Meilisearch's answer and its last
	// byte.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultUploadRate is the slowest rate, in bytes per second, a document
	// upload is given time for on top of the request timeout: 64 MiB may
	// take 30 s + 64 s.
	DefaultUploadRate = 1 << 20
	// DefaultPollTimeout bounds one poll of a task (GET /tasks/{uid}).
	DefaultPollTimeout = 10 * time.Second
	// DefaultPollPatience is how long polls of one task may fail in a row
	// before Wait gives up with a retryable error (the engine shows it and
	// sends the batch again).
	DefaultPollPatience = time.Minute
	// DefaultMaxPayloadBytes is the largest request body the sink sends:
	// below Meilisearch's default --http-payload-size-limit of 100 MB
	// (100,000,000 bytes), with room to spare. A smaller limit of a proxy in
	// front of Meilisearch is learnt from its 413 answers.
	DefaultMaxPayloadBytes = 64 << 20
	// DefaultMaxEnqueuedTasks bounds the tasks a job has enqueued in one
	// index and not yet seen processed: a few batches in flight, and
	// enough for Meilisearch to take consecutive additions as one
	// indexing batch (its autobatching).
	DefaultMaxEnqueuedTasks = 8
	// DefaultMaxEnqueuedBytes bounds the request bytes of those tasks:
	// two of the largest requests, one indexed while the next waits.
	DefaultMaxEnqueuedBytes = 2 * DefaultMaxPayloadBytes
)

// Bounds on what the client accepts from the other side.
const (
	// maxAnswer bounds the body of an answer read into memory: Meilisearch's
	// answers to the sink's requests are task summaries, tasks, settings and
	// pages of ids, far below it; a proxy streaming without end is cut.
	maxAnswer = 32 << 20
	// maxRetryAfter caps a 429's Retry-After: a hostile or broken answer
	// must not park every job for days.
	maxRetryAfter = 5 * time.Minute
)

// Options tune the client NewClientWithOptions makes. Zero fields take
// the defaults.
type Options struct {
	// RequestTimeout bounds one request other than a document upload or a
	// task poll, from connecting to the last byte of the answer.
	RequestTimeout time.Duration
	// UploadRate is the slowest transfer rate, bytes per second, a document
	// upload is given time for: an upload of n bytes may take
	// RequestTimeout + n/UploadRate.
	UploadRate int64
	// PollTimeout bounds one poll of a task.
	PollTimeout time.Duration
	// PollPatience is how long polls of one task may fail in a row before
	// Wait returns the last failure.
	PollPatience time.Duration
	// MaxPayloadBytes is the largest request body the sink sends: batches
	// are cut into requests under it, and a document larger on its own is
	// refused (payload_too_large) without being sent.
	MaxPayloadBytes int64
	// MaxEnqueuedTasks and MaxEnqueuedBytes bound what a job has
	// enqueued in one index and not yet seen processed (queue.go): a
	// request that would go over them waits for the oldest task. A
	// request always goes when nothing is enqueued.
	MaxEnqueuedTasks int
	MaxEnqueuedBytes int64
}

func (o Options) withDefaults() Options {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.UploadRate <= 0 {
		o.UploadRate = DefaultUploadRate
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = DefaultPollTimeout
	}
	if o.PollPatience <= 0 {
		o.PollPatience = DefaultPollPatience
	}
	if o.MaxPayloadBytes <= 0 {
		o.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if o.MaxEnqueuedTasks <= 0 {
		o.MaxEnqueuedTasks = DefaultMaxEnqueuedTasks
	}
	if o.MaxEnqueuedBytes <= 0 {
		o.MaxEnqueuedBytes = DefaultMaxEnqueuedBytes
	}
	return o
}

// uploadTimeout is the deadline of an upload of n bytes.
func (o Options) uploadTimeout(n int) time.Duration {
	return o.RequestTimeout + time.Duration(float64(n)/float64(o.UploadRate)*float64(time.Second))
}

// Client is the client NewClient makes, the one a Sink takes:
// meilisearch-go's, for whoever wants its API (the sidecar's /readyz
// probe, tests reading an index), and the requests of the sink, which it
// makes itself so that every one has a deadline and every answer is
// classified (see the package doc).
type Client struct {
	meilisearch.ServiceManager
	base   string // scheme://host[/path], without userinfo or query: safe to show
	badURL bool   // the URL did not parse: every request fails, naming no part of it
	key    string
	hc     *http.Client
	opts   Options
	// secrets are the strings no error text may carry: the API key, the
	// URL's password and query values.
	secrets []string
	// notBefore is when requests may go again after a 429 with
	// Retry-After (unix nanoseconds; 0: now). Shared by every job of the
	// client: a rate limit is the server's, or its proxy's.
	notBefore atomic.Int64
}

// NewClient returns the sidecar's Meilisearch client for baseURL and
// apiKey (may be empty), with the default Options.
func NewClient(baseURL, apiKey string) *Client {
	return NewClientWithOptions(baseURL, apiKey, Options{})
}

// NewClientWithOptions returns the sidecar's Meilisearch client for
// baseURL and apiKey (may be empty): meilisearch-go's, without retries of
// its own (the engine retries with its backoff and keeps batches in
// order), and what a Sink on it uses to make its requests itself.
//
// Every request has a deadline (Options); redirects are not followed (a
// POST would come back as a GET: the answer is the error); a 429's
// Retry-After holds every request of the client until it passes. The URL
// may carry credentials for a proxy in front of Meilisearch (userinfo, a
// query string): they are sent with every request, and never appear in an
// error, which names the method and the path only.
//
// Responses are not compressed: they are small (task summaries and
// statuses), so gunzipping each one (a flate decoder set up per response)
// costs CPU and saves next to nothing. Document batches are posted by the
// sink itself: meilisearch-go copies a body it is given whole (io.ReadAll
// into growing buffers) before sending it, a second and third copy of
// every batch.
func NewClientWithOptions(baseURL, apiKey string, o Options) *Client {
	c := &Client{key: apiKey, opts: o.withDefaults()}
	var user *url.Userinfo
	var query url.Values
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil || u.Scheme == "" || u.Host == "" {
		c.badURL = true
	} else {
		user, query = u.User, u.Query()
		if p, ok := user.Password(); ok && p != "" {
			c.secrets = append(c.secrets, p)
		}
		for _, vs := range query {
			for _, v := range vs {
				if len(v) >= 4 {
					c.secrets = append(c.secrets, v)
				}
			}
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/")
	}
	if apiKey != "" {
		c.secrets = append(c.secrets, apiKey)
	}
	// meilisearch-go's own transport (baseTransport in its options.go),
	// compression off, dialling and TLS bounded: a request's own deadline
	// (do) covers the rest.
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return bodyConn{c}, nil
		},
		// Each job's batches and task polls take a connection while
		// they run; a process of hundreds of mostly quiet jobs keeps
		// fewer of them open between bursts.
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		DisableCompression:    true,
	}
	c.hc = &http.Client{
		Transport: &urlTransport{next: tr, user: user, query: query, timeout: c.opts.RequestTimeout},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	opts := []meilisearch.Option{meilisearch.DisableRetries(), meilisearch.WithCustomClient(c.hc)}
	if apiKey != "" {
		opts = append(opts, meilisearch.WithAPIKey(apiKey))
	}
	base := c.base
	if c.badURL {
		base = "http://invalid.invalid"
	}
	c.ServiceManager = meilisearch.New(base, opts...)
	return c
}

// urlTransport puts back on every request what the client keeps out of
// the URLs it builds (and so out of any *url.Error a request fails with):
// the base URL's userinfo and query string. A request that is not the
// sink's own (one of meilisearch-go's methods) gets the request timeout
// as its deadline, held until its answer's body is closed.
type urlTransport struct {
	next    http.RoundTripper
	user    *url.Userinfo
	query   url.Values
	timeout time.Duration
}

func (t *urlTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var cancel context.CancelFunc
	if ctx.Value(ownDeadline{}) == nil {
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
	}
	if t.user != nil || len(t.query) > 0 || cancel != nil {
		r := req.Clone(ctx)
		if t.user != nil {
			r.URL.User = t.user
		}
		if len(t.query) > 0 {
			q := r.URL.Query()
			for k, vs := range t.query {
				for _, v := range vs {
					q.Add(k, v)
				}
			}
			r.URL.RawQuery = q.Encode()
		}
		req = r
	}
	resp, err := t.next.RoundTrip(req)
	if cancel != nil {
		if err != nil {
			cancel()
		} else {
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
		}
	}
	return resp, err
}

// ownDeadline marks the context of a request made by do, which set its
// deadline itself.
type ownDeadline struct{}

// cancelBody ends a request's deadline once its answer is read.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// bodyConn writes a document batch's body with one write: the transport
// copies a body of known length through a 32 KB buffer (io.Copy of an
// io.LimitedReader), a copy and a write syscall per 32 KB, and each write
// long enough for the runtime to hand the goroutine's processor to another
// thread and wake one. Other bodies go as the transport sends them.
type bodyConn struct{ net.Conn }

func (c bodyConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if tb, ok := lr.R.(*trackedBody); ok && int64(tb.Len()) <= lr.N {
			n, err := tb.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// trackedBody is a request body that says when the transport closed it:
// only then may its bytes be reused (http.RoundTripper: the body may be
// closed, and so read, after RoundTrip returns).
type trackedBody struct {
	bytes.Reader
	closed  chan struct{}
	once    sync.Once
	rewound atomic.Bool // GetBody was called: another reader of the bytes exists
}

func (b *trackedBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// request is one request of the sink: what do sends and expects.
type request struct {
	method string
	path   string // escaped path and query; never a secret (the base URL's are added by urlTransport)
	body   []byte // nil: none
	want   int    // the status of success
	// timeout bounds the whole exchange; tracked, when set, is the body as
	// a trackedBody (uploads), to tell when body may be reused.
	timeout time.Duration
	tracked *trackedBody
	// guard is the job's check (sink.Guard) made right before the
	// request goes; nil for a request of no job (Health).
	guard func() error
}

// do sends rq and returns the answer's body when its status is rq.want.
// Any other outcome is an *Error, except the end of ctx (the caller's:
// a stopped job, a lost lease), returned as context.Cause(ctx).
func (c *Client) do(ctx context.Context, rq request) ([]byte, error) {
	if c.badURL {
		return nil, &Error{Method: rq.method, Path: pathOnly(rq.path), badURL: true}
	}
	if err := c.waitRetryAfter(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, rq.timeout)
	defer cancel()
	rctx = context.WithValue(rctx, ownDeadline{}, true)
	var body io.Reader
	if rq.tracked != nil {
		body = rq.tracked
	} else if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(rctx, rq.method, c.base+rq.path, body)
	if err != nil {
		// The path is the client's own; nothing of the URL is shown.
		return nil, &Error{Method: rq.method, Path: pathOnly(rq.path), Err: errors.New("the request could not be made")}
	}
	if rq.tracked != nil {
		b := rq.body
		req.ContentLength = int64(len(b))
		req.GetBody = func() (io.ReadCloser, error) {
			rq.tracked.rewound.Store(true)
			return io.NopCloser(bytes.NewReader(b)), nil
		}
	}
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("User-Agent", meilisearch.GetQualifiedVersion())
	// Last, after any wait above: a lease that lapsed meanwhile sends
	// nothing.
	if rq.guard != nil {
		if err := rq.guard(); err != nil {
			return nil, err
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.noAnswer(ctx, rctx, rq, err)
	}
	defer resp.Body.Close()
	b, tooLarge, err := readAnswer(resp)
	if err != nil {
		return nil, c.noAnswer(ctx, rctx, rq, err)
	}
	if tooLarge {
		return nil, &Error{Method: rq.method, Path: pathOnly(rq.path), Status: resp.StatusCode,
			Err: errors.New("the answer is larger than 32 MiB: not Meilisearch's")}
	}
	if resp.StatusCode == rq.want {
		return b, nil
	}
	e := c.answerError(rq.method, pathOnly(rq.path), resp, b)
	if e.Status == http.StatusTooManyRequests && e.retryAfter > 0 {
		c.holdUntil(time.Now().Add(e.retryAfter))
	}
	return nil, e
}

// readAnswer reads resp's body, tooLarge when it is over maxAnswer. A
// body of a given length is read into one buffer of that length: a page
// of documents read back is megabytes, and growing a buffer to it copies
// it again and again. A length over maxAnswer is refused before anything
// is allocated or read, as a length is only the other side's word.
func readAnswer(resp *http.Response) (b []byte, tooLarge bool, err error) {
	if n := resp.ContentLength; n > maxAnswer {
		return nil, true, nil
	} else if n >= 0 {
		b = make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, false, err
		}
		return b, false, nil
	}
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, false, err
	}
	return b, len(b) > maxAnswer, nil
}

// noAnswer is the error of a request that got no (whole) answer: the
// caller's ctx ended (its cause, as it is), the request's deadline passed,
// or the connection failed.
func (c *Client) noAnswer(ctx, rctx context.Context, rq request, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	e := &Error{Method: rq.method, Path: pathOnly(rq.path)}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) {
		e.Timeout = rq.timeout
		return e
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	e.Err = c.redactErr(err)
	return e
}

// answerError builds the *Error of an answer other than the wanted one:
// Meilisearch's error object when the body is one, else only the status
// and what kind of body came (a proxy's page is never copied into it).
func (c *Client) answerError(method, path string, resp *http.Response, b []byte) *Error {
	e := &Error{Method: method, Path: path, Status: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var obj struct {
		Message *string `json:"message"`
		Code    string  `json:"code"`
		Type    string  `json:"type"`
	}
	if json.Unmarshal(b, &obj) == nil && obj.Code != "" && obj.Message != nil && len(obj.Code) <= 128 && len(obj.Type) <= 64 {
		e.Code, e.Type, e.Message = obj.Code, obj.Type, c.redact(cut(*obj.Message, maxMessage))
		return e
	}
	ct := resp.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	e.ContentType, e.BodyLen = cut(strings.TrimSpace(ct), 64), len(b)
	return e
}

// waitRetryAfter waits until a 429's Retry-After has passed.
func (c *Client) waitRetryAfter(ctx context.Context) error {
	until := c.notBefore.Load()
	if until == 0 {
		return nil
	}
	d := time.Until(time.Unix(0, until))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// holdUntil holds requests until t (never shortening a longer hold).
func (c *Client) holdUntil(t time.Time) {
	for {
		cur := c.notBefore.Load()
		if cur >= t.UnixNano() || c.notBefore.CompareAndSwap(cur, t.UnixNano()) {
			return
		}
	}
}

// parseRetryAfter reads a Retry-After header (RFC 9110 10.2.3: seconds, or
// an HTTP date), capped at maxRetryAfter; 0 when absent or unreadable.
func parseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if n, err := parseSeconds(h); err == nil {
		d = n
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

func parseSeconds(s string) (time.Duration, error) {
	var n int64
	if s == "" || len(s) > 12 {
		return 0, errors.New("not seconds")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, errors.New("not seconds")
		}
		n = n*10 + int64(r-'0')
	}
	return time.Duration(n) * time.Second, nil
}

// redact replaces the client's secrets in s.
func (c *Client) redact(s string) string {
	for _, sec := range c.secrets {
		s = strings.ReplaceAll(s, sec, "[redacted]")
	}
	return s
}

// redactErr is err with the client's secrets out of its text (still
// matching errors.Is and As on err).
func (c *Client) redactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := c.redact(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redacted{msg: msg, err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// pathOnly is a request path without its query string.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

// Health answers GET /health through the client's own requests, so that
// its error (shown by /readyz) has a deadline and names no part of the
// URL. An error is an *Error.
func (c *Client) Health(ctx context.Context) (*meilisearch.Health, error) {
	b, err := c.do(ctx, request{method: http.MethodGet, path: "/health", want: http.StatusOK, timeout: c.opts.RequestTimeout})
	if err != nil {
		return nil, err
	}
	h := &meilisearch.Health{}
	if err := json.Unmarshal(b, h); err != nil {
		return nil, &Error{Method: http.MethodGet, Path: "/health", Status: http.StatusOK, Err: errors.New("the answer is not Meilisearch's health status")}
	}
	return h, nil
}

// IsHealthy reports whether Health succeeds with status "available",
// within the request timeout.
func (c *Client) IsHealthy() bool {
	h, err := c.Health(context.Background())
	return err == nil && h.Status == "available"
}
