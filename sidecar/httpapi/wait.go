package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/durable"
)

// Waits is what GET /wait asks: durable.Waiter has it.
type Waits interface {
	// Wait returns once every change of job at or before after is durable
	// in its destination (durable.Waiter.Wait's contract and errors).
	Wait(ctx context.Context, job string, after bson.Timestamp) (bson.Timestamp, error)
}

// Bounds of GET /wait's timeout parameter.
const (
	DefaultWaitTimeout = 5 * time.Second
	MaxWaitTimeout     = 60 * time.Second
)

// waitConnsKept is how many of the server's connections a flood of waits
// leaves to everything else: a kubelet probe must never find every
// connection held by a wait.
const waitConnsKept = 32

// maxWaits is how many waits the server serves at once.
func maxWaits(maxConns int) int {
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	if maxConns > 2*waitConnsKept {
		return maxConns - waitConnsKept
	}
	return max(maxConns/2, 1)
}

// waitAnswer is the JSON of every GET /wait answer.
type waitAnswer struct {
	Job     string  `json:"job,omitempty"`
	Durable *string `json:"durable"`
	Error   string  `json:"error,omitempty"`
}

// wait serves GET /wait?job=NAME&after=S.I[&timeout=D]: 200 once every
// change of the job at or before after is durable; 400 bad parameters, 404
// unknown job, 429 too many waits at once, 503 no process holds the job
// (or the server shuts down), 504 timeout; each with the job's durable
// time when known.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	jobs := q["job"]
	if len(jobs) != 1 || jobs[0] == "" {
		s.waitReply(w, http.StatusBadRequest, waitAnswer{Error: fmt.Sprintf("want exactly one job=NAME, got %d (wait for each job in its own request)", len(jobs))})
		return
	}
	job := jobs[0]
	if len(q["after"]) != 1 {
		s.waitReply(w, http.StatusBadRequest, waitAnswer{Job: job, Error: "want exactly one after=CLUSTER_TIME: " + durable.Accepted})
		return
	}
	after, err := durable.Parse(q.Get("after"))
	if err != nil {
		s.waitReply(w, http.StatusBadRequest, waitAnswer{Job: job, Error: "after: " + err.Error()})
		return
	}
	timeout, err := waitTimeout(q["timeout"])
	if err != nil {
		s.waitReply(w, http.StatusBadRequest, waitAnswer{Job: job, Error: err.Error()})
		return
	}
	if s.waiting.Add(1) > int64(maxWaits(s.opts.MaxConns)) {
		s.waiting.Add(-1)
		w.Header().Set("Retry-After", "1")
		s.waitReply(w, http.StatusTooManyRequests, waitAnswer{Job: job, Error: "too many waits at once on this sidecar; try again shortly"})
		return
	}
	defer s.waiting.Add(-1)
	// The answer may come after the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + writeTimeout))
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unhook := context.AfterFunc(s.stopping, func() { stop(durable.ErrClosed) })
	defer unhook()
	d, err := s.opts.Wait.Wait(ctx, job, after)
	a := waitAnswer{Job: job}
	if !d.IsZero() {
		f := durable.Format(d)
		a.Durable = &f
	}
	code := http.StatusOK
	switch {
	case err == nil:
	case errors.Is(err, durable.ErrUnknownJob):
		code, a.Error = http.StatusNotFound, fmt.Sprintf("no job %q runs in this sidecar", clipText(job))
	case errors.Is(err, durable.ErrBusy):
		w.Header().Set("Retry-After", "1")
		code, a.Error = http.StatusTooManyRequests, "too many waits at once in this process; try again shortly"
	case errors.Is(err, durable.ErrNoHolder):
		code, a.Error = http.StatusServiceUnavailable, "no sidecar holds the job's lease, so nothing makes its changes durable; try again once one does (GET /status)"
	case errors.Is(err, durable.ErrTimeout):
		code, a.Error = http.StatusGatewayTimeout, fmt.Sprintf("timed out after %s: the job's changes are durable up to the cluster time in \"durable\", not yet up to %s", timeout, durable.Format(after))
		if msg := strings.TrimPrefix(err.Error(), durable.ErrTimeout.Error()); strings.TrimSpace(msg) != "" {
			a.Error += "; " + strings.TrimSpace(msg)
		}
	case errors.Is(err, durable.ErrClosed) || errors.Is(context.Cause(ctx), durable.ErrClosed):
		code, a.Error = http.StatusServiceUnavailable, "the sidecar is shutting down; ask another pod or try again"
	case r.Context().Err() != nil:
		return // the client went away
	default:
		code, a.Error = http.StatusServiceUnavailable, "cannot tell: "+err.Error()
	}
	if s.opts.Waited != nil && code != http.StatusNotFound {
		s.opts.Waited(job, code)
	}
	s.waitReply(w, code, a)
}

// waitTimeout reads the timeout parameter: a Go duration ("250ms", "5s")
// or a number of seconds, above 0 and at most MaxWaitTimeout.
func waitTimeout(v []string) (time.Duration, error) {
	const want = "want a duration above 0 and at most 60s, as Go writes it (250ms, 5s) or in seconds (2.5)"
	switch len(v) {
	case 0:
		return DefaultWaitTimeout, nil
	case 1:
	default:
		return 0, fmt.Errorf("timeout: given %d times; %s", len(v), want)
	}
	d, err := time.ParseDuration(v[0])
	if err != nil {
		secs, ferr := strconv.ParseFloat(v[0], 64)
		if ferr != nil || !isNumber(v[0]) {
			return 0, fmt.Errorf("timeout %q: %s", clipText(v[0]), want)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > MaxWaitTimeout {
		return 0, fmt.Errorf("timeout %q: %s", clipText(v[0]), want)
	}
	return d, nil
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	dot := false
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0:
			dot = true
		default:
			return false
		}
	}
	return true
}

func clipText(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

func (s *Server) waitReply(w http.ResponseWriter, code int, a waitAnswer) {
	b, err := json.Marshal(a)
	if err != nil {
		http.Error(w, "cannot encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(s.scrub(string(b)) + "\n"))
}
