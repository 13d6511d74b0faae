package meili

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meilisearch/meilisearch-go"
)

// meiliClient is the client NewClient makes: meilisearch-go's, and
// what the sink needs to post document batches itself.
type meiliClient struct {
	meilisearch.ServiceManager
	url, key string
	hc       *http.Client
}

// NewClient returns the sidecar's Meilisearch client for baseURL and
// apiKey (may be empty): meilisearch-go's without retries of its
// own (the engine retries 5xx and connection errors itself), with two
// changes for the cost of a batch, the sidecar's main work. Responses are
// not compressed: they are small (task summaries and statuses), so
// gunzipping each one (a flate decoder set up per response) costs CPU and
// saves next to nothing. A Sink on this client posts its document
// batches itself: meilisearch-go copies a body it is given whole (io.ReadAll
// into growing buffers) before sending it, a second and third copy of every
// batch.
func NewClient(baseURL, apiKey string) meilisearch.ServiceManager {
	// meilisearch-go's own transport (baseTransport in its options.go),
	// compression off.
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return bodyConn{c}, nil
		},
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		DisableCompression:    true,
	}
	hc := &http.Client{Transport: tr}
	opts := []meilisearch.Option{meilisearch.DisableRetries(), meilisearch.WithCustomClient(hc)}
	if apiKey != "" {
		opts = append(opts, meilisearch.WithAPIKey(apiKey))
	}
	return &meiliClient{ServiceManager: meilisearch.New(baseURL, opts...), url: baseURL, key: apiKey, hc: hc}
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

// addDocuments posts body (a JSON array) to uid's documents with primary
// key pk, as meilisearch-go's AddDocuments does, and returns the task uid.
// Errors are the *meilisearch.Error meilisearch-go would return. It reports
// whether body may be reused.
func (c *meiliClient) addDocuments(ctx context.Context, uid, pk string, body []byte) (task int64, reusable bool, err error) {
	endpoint := "/indexes/" + uid + "/documents?" + url.Values{"primaryKey": {pk}}.Encode()
	tb := &trackedBody{closed: make(chan struct{})}
	tb.Reset(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+endpoint, tb)
	if err != nil {
		return 0, false, fmt.Errorf("unable to create request: %w", err)
	}
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) {
		tb.rewound.Store(true)
		return io.NopCloser(bytes.NewReader(body)), nil
	}
	req.Header.Set("Content-Type", "application/json")
	b, me, err := c.do(req, endpoint, "AddDocuments", http.StatusAccepted)
	free := func() bool {
		select {
		case <-tb.closed:
			return !tb.rewound.Load()
		default:
			return false
		}
	}
	if err != nil {
		return 0, free(), err
	}
	var ti struct {
		TaskUID int64 `json:"taskUid"`
	}
	if err := json.Unmarshal(b, &ti); err != nil {
		me.ResponseToString = string(b)
		return 0, free(), me.WithErrCode(meilisearch.ErrCodeResponseUnmarshalBody, err)
	}
	return ti.TaskUID, free(), nil
}

// call sends a request with a small JSON body (nil for none) to endpoint
// and returns the response body, or the *meilisearch.Error meilisearch-go
// would return when the status is not want.
func (c *meiliClient) call(ctx context.Context, method, endpoint, function string, body []byte, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+endpoint, rd)
	if err != nil {
		return nil, fmt.Errorf("unable to create request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	b, _, err := c.do(req, endpoint, function, want)
	return b, err
}

// do sends req (to endpoint, for errors) with the client's key and returns
// the response body when its status is want. Errors are the
// *meilisearch.Error meilisearch-go would return; me is returned too, for
// a caller that fails later on the body.
func (c *meiliClient) do(req *http.Request, endpoint, function string, want int) (b []byte, me *meilisearch.Error, err error) {
	me = &meilisearch.Error{
		Endpoint:           endpoint,
		Method:             req.Method,
		Function:           function,
		RequestToString:    "empty request",
		ResponseToString:   "empty response",
		StatusCodeExpected: []int{want},
	}
	me.APIError.Message = "empty meilisearch message"
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("User-Agent", meilisearch.GetQualifiedVersion())
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, me, me.WithErrCode(meilisearch.TimeoutError, err)
		}
		return nil, me, me.WithErrCode(meilisearch.CommunicationError, err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, me, err
	}
	me.StatusCode = resp.StatusCode
	if resp.StatusCode != want {
		me.ErrorBody(b)
		if me.APIError.Code == "" {
			return nil, me, me.WithErrCode(meilisearch.APIErrorWithoutMessage)
		}
		return nil, me, me.WithErrCode(meilisearch.APIError)
	}
	return b, me, nil
}
