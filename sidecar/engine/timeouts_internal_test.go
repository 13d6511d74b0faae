package engine

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func intID(i int32) bson.RawValue {
	return bson.RawValue{Type: bson.TypeInt32, Value: binary.LittleEndian.AppendUint32(nil, uint32(i))}
}

func timedOutErr() error {
	return errs.Wrap(errs.TransformFailed, "items", transform.ErrTimeout, "the transform did not finish within 50ms")
}

// Documents out of time are due again after a growing backoff under a
// doubled limit, each attempt counted, and given up after
// maxTimeoutRetries; one that succeeds or fails otherwise ends its
// attempts; a burst is logged once per window.
func TestTimedOutDocumentsAreDueAgainUntilGivenUp(t *testing.T) {
	defer func(was time.Duration) { timeoutRetryBase = was }(timeoutRetryBase)
	timeoutRetryBase = time.Second
	logs := &logBuf{}
	to := newTimeouts(50*time.Millisecond, hclog.New(&hclog.LoggerOptions{Output: logs}))

	var bad []DocError
	for i := int32(0); i < timeoutBurst; i++ {
		bad = append(bad, DocError{ID: intID(i), Err: timedOutErr()})
	}
	to.note(nil, bad)
	to.note(nil, []DocError{{ID: intID(99), Err: errors.New("boom")}}) // not a timeout: not retried
	if n := logs.count("ran out of time in a burst"); n != 1 {
		t.Fatalf("a burst of %d timeouts logged %d times, want once", timeoutBurst, n)
	}
	if r := to.take(time.Now()); r != nil {
		t.Fatalf("due at once: %d ids; want after the backoff", len(r.IDs))
	}
	r := to.take(time.Now().Add(2 * time.Second))
	if r == nil || len(r.IDs) != timeoutBurst || r.Limit != 100*time.Millisecond {
		t.Fatalf("after the first backoff: %+v; want %d ids under a 100ms limit", r, timeoutBurst)
	}
	if again := to.take(time.Now().Add(time.Hour)); again != nil {
		t.Fatalf("handed twice: %d ids", len(again.IDs))
	}
	// Document 0 succeeds; 1 fails otherwise; 2.. time out again.
	to.note([]Item{{ID: intID(0)}, {ID: intID(1)}, {ID: intID(2)}}, []DocError{{ID: intID(1), Err: errors.New("boom")}, {ID: intID(2), Err: timedOutErr()}})
	if logs.count("ran out of time in a burst") != 1 {
		t.Fatalf("logged again within the window")
	}
	if r := to.take(time.Now().Add(2 * time.Second)); r != nil {
		t.Fatalf("the second backoff is longer than the first: %d ids due", len(r.IDs))
	}
	r = to.take(time.Now().Add(10 * time.Second))
	if r == nil || len(r.IDs) != 1 || r.Limit != 200*time.Millisecond {
		t.Fatalf("after the second backoff: %+v; want document 2 under 200ms", r)
	}
	for range maxTimeoutRetries - 1 {
		to.note(nil, []DocError{{ID: intID(2), Err: timedOutErr()}})
		to.take(time.Now().Add(time.Hour))
	}
	if n := logs.count("ran out of time on every automatic attempt"); n != 1 {
		t.Fatalf("given up said %d times, want once", n)
	}
	if r := to.take(time.Now().Add(24 * time.Hour)); r != nil {
		t.Fatalf("tried again after the last attempt: %d ids", len(r.IDs))
	}
}
