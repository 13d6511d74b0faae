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
	var last []DocError
	for range maxTimeoutRetries - 1 {
		last = []DocError{{ID: intID(2), Err: timedOutErr()}}
		to.note(nil, last)
		to.take(time.Now().Add(time.Hour))
	}
	if n := logs.count("ran out of time on every automatic attempt"); n != 1 {
		t.Fatalf("given up said %d times, want once", n)
	}
	if r := to.take(time.Now().Add(24 * time.Hour)); r != nil {
		t.Fatalf("tried again after the last attempt: %d ids", len(r.IDs))
	}
	err := last[0].Err
	want := "the transform ran out of time on all 4 attempts, 3 of them automatic, the last under 400ms; raise transformTimeout or lighten the transform, then `meilistream retry items`"
	if !strings.Contains(err.Error(), want) || !errors.Is(err, transform.ErrTimeout) {
		t.Fatalf("recorded when given up: %v; want it saying %q", err, want)
	}
}

func memoryErr() error {
	return errs.Wrap(errs.TransformFailed, "items", transform.ErrMemory, "the transform call was stopped: the heap grew by more than 16 MiB while it ran, the memory bound of a call (MEILISTREAM_TRANSFORM_MEMORY)")
}

// Documents stopped by the memory bound are due again on the schedule of
// those out of time, under the job's own limit (time was not what they
// lacked), and given up after maxTimeoutRetries, their error then saying
// how many attempts the bound stopped and what to raise; one abandoned in
// a built-in is not tried again, and they make no burst of timeouts.
func TestDocumentsStoppedByTheMemoryBoundAreDueAgainUntilGivenUp(t *testing.T) {
	defer func(was time.Duration) { timeoutRetryBase = was }(timeoutRetryBase)
	timeoutRetryBase = time.Second
	logs := &logBuf{}
	to := newTimeouts(50*time.Millisecond, hclog.New(&hclog.LoggerOptions{Output: logs}))

	var bad []DocError
	for i := int32(0); i < timeoutBurst; i++ {
		bad = append(bad, DocError{ID: intID(i), Err: memoryErr()})
	}
	abandoned := errs.New(errs.TransformFailed, "items", "the transform call was stopped: the heap grew by more than 16 MiB while it ran, the memory bound of a call (MEILISTREAM_TRANSFORM_MEMORY), and it was still in a built-in function 500ms later, so it was abandoned")
	bad = append(bad, DocError{ID: intID(99), Err: abandoned})
	to.note(nil, bad)
	if n := logs.count("in a burst"); n != 0 {
		t.Fatalf("memory stops logged as a burst of timeouts %d times", n)
	}
	if r := to.take(time.Now()); r != nil {
		t.Fatalf("due at once: %d ids; want after the backoff", len(r.IDs))
	}
	r := to.take(time.Now().Add(2 * time.Second))
	if r == nil || len(r.IDs) != timeoutBurst || r.Limit != 50*time.Millisecond {
		t.Fatalf("after the first backoff: %+v; want %d ids (not the abandoned one) under the job's 50ms limit", r, timeoutBurst)
	}
	// Document 0 succeeds; 1 fails otherwise; 2 is stopped again.
	to.note([]Item{{ID: intID(0)}, {ID: intID(1)}, {ID: intID(2)}}, []DocError{{ID: intID(1), Err: errors.New("boom")}, {ID: intID(2), Err: memoryErr()}})
	if r := to.take(time.Now().Add(2 * time.Second)); r != nil {
		t.Fatalf("the second backoff is longer than the first: %d ids due", len(r.IDs))
	}
	r = to.take(time.Now().Add(10 * time.Second))
	if r == nil || len(r.IDs) != 1 || r.Limit != 50*time.Millisecond {
		t.Fatalf("after the second backoff: %+v; want document 2 under 50ms", r)
	}
	var last []DocError
	for range maxTimeoutRetries - 1 {
		last = []DocError{{ID: intID(2), Err: memoryErr()}}
		to.note(nil, last)
		to.take(time.Now().Add(time.Hour))
	}
	if n := logs.count("stopped by the transform memory bound on every automatic attempt"); n != 1 {
		t.Fatalf("given up said %d times, want once", n)
	}
	if r := to.take(time.Now().Add(24 * time.Hour)); r != nil {
		t.Fatalf("tried again after the last attempt: %d ids", len(r.IDs))
	}
	// What is recorded for it says how often the bound stopped it and
	// what to do.
	err := last[0].Err
	want := "the memory bound stopped the transform on all 4 attempts, 3 of them automatic; raise MEILISTREAM_TRANSFORM_MEMORY or lighten the transform, then `meilistream retry items`"
	if !strings.Contains(err.Error(), want) || errs.CodeOf(err) != errs.TransformFailed || !errors.Is(err, transform.ErrMemory) {
		t.Fatalf("recorded when given up: %v (%s); want TRANSFORM_FAILED saying %q", err, errs.CodeOf(err), want)
	}
}
