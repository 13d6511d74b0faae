package meili_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// short are deadlines a test can wait for.
var short = meili.Options{RequestTimeout: 300 * time.Millisecond, PollTimeout: 300 * time.Millisecond,
	PollPatience: time.Second, UploadRate: 1 << 30}

// roomy are deadlines no answer of the test server meets, however busy
// the machine: for tests of what an answer means, not of when it comes.
var roomy = meili.Options{RequestTimeout: 30 * time.Second, PollTimeout: 30 * time.Second,
	PollPatience: 30 * time.Second, UploadRate: 1 << 30}

// silentListener accepts connections and never answers: reads nothing,
// writes nothing, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// stallingServer answers every request's headers (status 200, or 202 for
// a write) and the first bytes of a body, then stalls until the test ends.
func stallingServer(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusAccepted)
		}
		_, _ = w.Write([]byte(`{"uid":`))
		w.(http.Flusher).Flush()
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv.URL
}

// wantTimeout checks that err is a FAILED (retried) *meili.Error of a
// request that ran out of its deadline, and that it came in time.
func wantTimeout(t *testing.T, what string, err error, began time.Time) {
	t.Helper()
	var me *meili.Error
	if errs.CodeOf(err) != errs.Failed || !errors.As(err, &me) || me.Timeout == 0 {
		t.Fatalf("%s: %v (code %s), want FAILED: a request over its deadline", what, err, errs.CodeOf(err))
	}
	if !strings.Contains(err.Error(), "no answer from Meilisearch within") {
		t.Errorf("%s: the error does not say the deadline passed: %v", what, err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("%s: failed after %s", what, d)
	}
}

// A Meilisearch, or a proxy, that accepts the connection and never
// answers, or answers the headers and stalls the body, fails each request
// at its deadline as a retryable error, whatever the route: the job backs
// off and /status shows it, instead of waiting for good.
func TestEveryRequestHasADeadline(t *testing.T) {
	job := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	batch := sink.Batch{Writes: []sink.Write{write(1, "a"), {SourceID: write(2, "").SourceID, Delete: true}}}
	for name, addr := range map[string]func(*testing.T) string{
		"a listener that never answers":        silentListener,
		"a server that stalls the answer body": stallingServer,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := meili.NewClientWithOptions(addr(t), "key", short)
			dst := meili.NewSink(client, job, sink.Unguarded, nil)

			began := time.Now()
			wantTimeout(t, "prepare", dst.Prepare(ctx), began)
			began = time.Now()
			_, err := dst.Send(ctx, batch)
			wantTimeout(t, "send", err, began)
			began = time.Now()
			_, err = client.Health(ctx)
			var me *meili.Error
			if !errors.As(err, &me) || me.Timeout == 0 || time.Since(began) > 10*time.Second {
				t.Errorf("health: %v", err)
			}
			// meilisearch-go's own calls on the client have a deadline too.
			began = time.Now()
			if _, err := client.Version(ctx); err == nil || time.Since(began) > 10*time.Second {
				t.Errorf("version: %v after %s", err, time.Since(began))
			}
		})
	}
}

// A task poll that gets no answer is repeated for PollPatience, then Wait
// gives up with a retryable error (the engine sends the batch again),
// rather than polling unseen for ever.
func TestTaskPollsHaveADeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	target, _ := url.Parse(srv.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	done := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/tasks/") {
			select { // a poll never answered
			case <-done:
			case <-r.Context().Done():
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	defer close(done)

	dst := meili.NewSink(meili.NewClientWithOptions(front.URL, "key", short), &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
	r, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(1, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err = dst.Wait(ctx, r)
	var me *meili.Error
	if errs.CodeOf(err) != errs.Failed || !errors.As(err, &me) || me.Timeout == 0 || !strings.Contains(err.Error(), "polls have failed for 1s") {
		t.Fatalf("wait: %v (code %s), want FAILED after the polls' patience", err, errs.CodeOf(err))
	}
	if d := time.Since(began); d < time.Second || d > 15*time.Second {
		t.Errorf("wait gave up after %s, want the patience (1s) and little more", d)
	}
}

// The caller's context ending (a stopped job, a lost lease) is not
// Meilisearch's failure: its cause comes back as it is.
func TestCancellationIsNotAMeilisearchError(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	lost := errs.New(errs.LeaseLost, "items", "lease taken over")
	time.AfterFunc(100*time.Millisecond, func() { cancel(lost) })
	dst := meili.NewSink(meili.NewClientWithOptions(silentListener(t), "", meili.Options{RequestTimeout: time.Minute}),
		&jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
	err := dst.Prepare(ctx)
	var me *meili.Error
	if !errors.Is(err, errs.ErrLeaseLost) || errors.As(err, &me) {
		t.Fatalf("prepare: %v, want the context's cause", err)
	}
}
