package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/durable"
	"github.com/meilistream/meilistream/sidecar/httpapi"
)

// fakeWaits answers from a table, or blocks until the request's context
// ends when block is set.
type fakeWaits struct {
	durable bson.Timestamp
	err     error
	block   bool
	got     chan waitCall
}

type waitCall struct {
	job      string
	after    bson.Timestamp
	deadline time.Duration
}

func (f *fakeWaits) Wait(ctx context.Context, job string, after bson.Timestamp) (bson.Timestamp, error) {
	dl, _ := ctx.Deadline()
	if f.got != nil {
		f.got <- waitCall{job, after, time.Until(dl)}
	}
	if f.block {
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return f.durable, durable.ErrTimeout
		}
		return f.durable, ctx.Err()
	}
	return f.durable, f.err
}

func startWait(t *testing.T, w httpapi.Waits, maxConns int) *httpapi.Server {
	t.Helper()
	srv, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0", Wait: w, MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func TestWaitAnswers(t *testing.T) {
	d := bson.Timestamp{T: 1764633600, I: 18}
	cases := []struct {
		name  string
		err   error
		query string
		code  int
		body  string // a part of the answer
	}{
		{"durable is 200 with the job and its durable time", nil, "job=books&after=1764633600.17", 200, `{"job":"books","durable":"1764633600.18"}`},
		{"Extended JSON is accepted", nil, "job=books&after=%7B%22%24timestamp%22%3A%7B%22t%22%3A1764633600%2C%22i%22%3A17%7D%7D", 200, `"durable":"1764633600.18"`},
		{"an unknown job is 404", durable.ErrUnknownJob, "job=nosuch&after=1.2", 404, `no job \"nosuch\" runs in this sidecar`},
		{"no holder is 503", durable.ErrNoHolder, "job=books&after=1.2", 503, "no sidecar holds the job"},
		{"a timeout is 504 with the durable time", durable.ErrTimeout, "job=books&after=1.2&timeout=1s", 504, `"durable":"1764633600.18","error":"timed out after 1s`},
		{"too many waits is 429", durable.ErrBusy, "job=books&after=1.2", 429, "too many waits"},
		{"a MongoDB error is 503 saying so", errors.New("connection refused"), "job=books&after=1.2", 503, "cannot tell: connection refused"},
		{"no job is 400", nil, "after=1.2", 400, "want exactly one job=NAME"},
		{"two jobs are 400", nil, "job=a&job=b&after=1.2", 400, "each job in its own request"},
		{"no after is 400", nil, "job=books", 400, "SECONDS.INCREMENT"},
		{"two afters are 400", nil, "job=books&after=1.2&after=1.3", 400, "want exactly one after"},
		{"a bad after is 400 saying what is accepted", nil, "job=books&after=12", 400, `$timestamp`},
		{"a timeout over 60s is 400", nil, "job=books&after=1.2&timeout=61s", 400, "at most 60s"},
		{"a zero timeout is 400", nil, "job=books&after=1.2&timeout=0", 400, "above 0"},
		{"a negative timeout is 400", nil, "job=books&after=1.2&timeout=-1s", 400, "above 0"},
		{"a word for a timeout is 400", nil, "job=books&after=1.2&timeout=soon", 400, "timeout"},
		{"an odd number for a timeout is 400", nil, "job=books&after=1.2&timeout=1e3", 400, "timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := startWait(t, &fakeWaits{durable: d, err: c.err}, 0)
			code, body := get(t, "http://"+srv.Addr()+"/wait?"+c.query)
			if code != c.code || !strings.Contains(body, c.body) {
				t.Fatalf("GET /wait?%s = %d %s; want %d with %s", c.query, code, body, c.code, c.body)
			}
			var a map[string]any
			if err := json.Unmarshal([]byte(body), &a); err != nil {
				t.Fatalf("not JSON: %s", body)
			}
		})
	}
}

func TestWaitTimeoutParameter(t *testing.T) {
	for q, want := range map[string]time.Duration{"": 5 * time.Second, "&timeout=250ms": 250 * time.Millisecond, "&timeout=2.5": 2500 * time.Millisecond, "&timeout=60s": time.Minute} {
		got := make(chan waitCall, 1)
		srv := startWait(t, &fakeWaits{got: got}, 0)
		code, body := get(t, "http://"+srv.Addr()+"/wait?job=books&after=3.4"+q)
		if code != 200 {
			t.Fatalf("%q: %d %s", q, code, body)
		}
		c := <-got
		if c.job != "books" || c.after != (bson.Timestamp{T: 3, I: 4}) || c.deadline > want || c.deadline < want-time.Second {
			t.Errorf("%q: Wait got %+v; want a deadline of %s", q, c, want)
		}
	}
}

func TestWaitsAreBoundedAndLeaveConnectionsForProbes(t *testing.T) {
	// 80 connections: at most 48 waits at once, 32 left for the rest.
	w := &fakeWaits{block: true, got: make(chan waitCall, 100)}
	srv := startWait(t, w, 80)
	url := "http://" + srv.Addr()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 200, MaxIdleConnsPerHost: 200}}
	codes := make(chan int, 100)
	for range 60 {
		go func() {
			resp, err := client.Get(url + "/wait?job=books&after=1.2&timeout=20s")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	for range 48 {
		<-w.got
	}
	busy := 0
	for range 12 {
		if c := <-codes; c == http.StatusTooManyRequests {
			busy++
		} else {
			t.Errorf("a wait beyond the bound answered %d; want 429", c)
		}
	}
	if code, _ := get(t, url+"/healthz"); code != 200 {
		t.Errorf("/healthz with every wait taken: %d", code)
	}
	// Closing the server ends the waits: 503, at once.
	start := time.Now()
	go func() { _ = srv.Close() }()
	for range 48 {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Errorf("a wait cut by Close answered %d; want 503", c)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s with waits in progress", d)
	}
}

func TestWaitAnswersAreCountedForKnownJobsOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	w := &fakeWaits{durable: bson.Timestamp{T: 5}}
	srv, err := httpapi.Start(httpapi.Options{Addr: "127.0.0.1:0", Wait: w, Waited: m.ObserveWait})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := "http://" + srv.Addr() + "/wait?after=1.2&job="
	for _, c := range []struct {
		job string
		err error
	}{{"books", nil}, {"books", nil}, {"books", durable.ErrTimeout}, {"nosuch", durable.ErrUnknownJob}} {
		w.err = c.err
		get(t, url+c.job)
	}
	get(t, url+"books&after=bad")
	counts := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meilistream_waits_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			key := ""
			for _, l := range mt.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[strings.TrimSpace(key)] = mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"kind=search pipeline=books status=200": 2, "kind=search pipeline=books status=504": 1}
	if len(counts) != len(want) {
		t.Fatalf("waits_total = %v; want %v", counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("waits_total{%s} = %v; want %v (all: %v)", k, counts[k], v, counts)
		}
	}
}
