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

func memoryErr() error {
	return errs.Wrap(errs.TransformFailed, "items", transform.ErrMemory, "the transform call was stopped: the heap grew by more than 16 MiB while it ran, the memory bound of a call (MEILISTREAM_TRANSFORM_MEMORY)")
}

// Documents out of time, or stopped by the memory bound, are due again
// after a growing backoff and given up after maxTimeoutRetries, each
// attempt counted; one that succeeds or fails otherwise ends its
// attempts. Out of time, each attempt doubles the limit and a burst is
// logged once per window; stopped by the memory bound, the job's own
// limit stays (time was not what they lacked), no burst of timeouts is
// logged, and one abandoned in a built-in is not tried again. Given up,
// the error says how many attempts failed and what to raise.
func TestDocumentsOutOfTimeOrMemoryAreDueAgainUntilGivenUp(t *testing.T) {
	abandoned := errs.New(errs.TransformFailed, "items", "the transform call was stopped: the heap grew by more than 16 MiB while it ran, the memory bound of a call (MEILISTREAM_TRANSFORM_MEMORY), and it was still in a built-in function 500ms later, so it was abandoned")
	for _, c := range []struct {
		name     string
		err      func() error
		cause    error
		extra    []DocError // never due again
		bursts   int        // "in a burst" lines for a burst of them
		limits   [2]time.Duration
		gaveUp   string // logged once when given up
		recorded string
	}{{
		name: "out of time", err: timedOutErr, cause: transform.ErrTimeout,
		extra:    []DocError{{ID: intID(99), Err: errors.New("boom")}},
		bursts:   1,
		limits:   [2]time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		gaveUp:   "ran out of time on every automatic attempt",
		recorded: "the transform ran out of time on all 4 attempts, 3 of them automatic, the last under 400ms; raise transformTimeout or lighten the transform, then `meilistream retry items`",
	}, {
		name: "memory", err: memoryErr, cause: transform.ErrMemory,
		extra:    []DocError{{ID: intID(99), Err: abandoned}},
		bursts:   0,
		limits:   [2]time.Duration{50 * time.Millisecond, 50 * time.Millisecond},
		gaveUp:   "stopped by the transform memory bound on every automatic attempt",
		recorded: "the memory bound stopped the transform on all 4 attempts, 3 of them automatic; raise MEILISTREAM_TRANSFORM_MEMORY or lighten the transform, then `meilistream retry items`",
	}} {
		t.Run(c.name, func(t *testing.T) {
			defer func(was time.Duration) { timeoutRetryBase = was }(timeoutRetryBase)
			timeoutRetryBase = time.Second
			logs := &logBuf{}
			to := newTimeouts(50*time.Millisecond, hclog.New(&hclog.LoggerOptions{Output: logs}))

			var bad []DocError
			for i := int32(0); i < timeoutBurst; i++ {
				bad = append(bad, DocError{ID: intID(i), Err: c.err()})
			}
			to.note(nil, append(bad, c.extra...))
			if n := logs.count("in a burst"); n != c.bursts {
				t.Fatalf("a burst of %d logged %d times, want %d", timeoutBurst, n, c.bursts)
			}
			if r := to.take(time.Now()); r != nil {
				t.Fatalf("due at once: %d ids; want after the backoff", len(r.IDs))
			}
			r := to.take(time.Now().Add(2 * time.Second))
			if r == nil || len(r.IDs) != timeoutBurst || r.Limit != c.limits[0] {
				t.Fatalf("after the first backoff: %+v; want %d ids under a %v limit", r, timeoutBurst, c.limits[0])
			}
			if again := to.take(time.Now().Add(time.Hour)); again != nil {
				t.Fatalf("handed twice: %d ids", len(again.IDs))
			}
			// Document 0 succeeds; 1 fails otherwise; 2 fails so again.
			to.note([]Item{{ID: intID(0)}, {ID: intID(1)}, {ID: intID(2)}}, []DocError{{ID: intID(1), Err: errors.New("boom")}, {ID: intID(2), Err: c.err()}})
			if n := logs.count("in a burst"); n != c.bursts {
				t.Fatalf("logged again within the window")
			}
			if r := to.take(time.Now().Add(2 * time.Second)); r != nil {
				t.Fatalf("the second backoff is longer than the first: %d ids due", len(r.IDs))
			}
			r = to.take(time.Now().Add(10 * time.Second))
			if r == nil || len(r.IDs) != 1 || r.Limit != c.limits[1] {
				t.Fatalf("after the second backoff: %+v; want document 2 under %v", r, c.limits[1])
			}
			var last []DocError
			for range maxTimeoutRetries - 1 {
				last = []DocError{{ID: intID(2), Err: c.err()}}
				to.note(nil, last)
				to.take(time.Now().Add(time.Hour))
			}
			if n := logs.count(c.gaveUp); n != 1 {
				t.Fatalf("given up said %d times, want once", n)
			}
			if r := to.take(time.Now().Add(24 * time.Hour)); r != nil {
				t.Fatalf("tried again after the last attempt: %d ids", len(r.IDs))
			}
			err := last[0].Err
			if !strings.Contains(err.Error(), c.recorded) || errs.CodeOf(err) != errs.TransformFailed || !errors.Is(err, c.cause) {
				t.Fatalf("recorded when given up: %v (%s); want TRANSFORM_FAILED saying %q", err, errs.CodeOf(err), c.recorded)
			}
		})
	}
}
