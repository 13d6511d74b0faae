package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// chanLease is a Lease that reports its loss only on Lost, as a fake may.
type chanLease struct {
	lost chan struct{}
	once sync.Once
	err  error
}

func (l *chanLease) Epoch() int64                      { return 1 }
func (l *chanLease) Lost() <-chan struct{}             { return l.lost }
func (l *chanLease) Err() error                        { return l.err }
func (l *chanLease) Confirm(ctx context.Context) error { return l.err }
func (l *chanLease) Held() error                       { return l.err }

func (l *chanLease) lose() {
	l.once.Do(func() {
		l.err = errs.New(errs.LeaseLost, "items", "lease lost: taken over")
		close(l.lost)
	})
}

// ctxLease reports its loss through Context alone (Lost never closes), so
// a context derived from it is cancelled only if leaseContext uses the
// lease's context.
type ctxLease struct {
	chanLease
	held context.Context
	end  context.CancelCauseFunc
}

func newCtxLease() *ctxLease {
	held, end := context.WithCancelCause(context.Background())
	return &ctxLease{chanLease: chanLease{}, held: held, end: end}
}

func (l *ctxLease) Lost() <-chan struct{}    { return nil }
func (l *ctxLease) Context() context.Context { return l.held }

func (l *ctxLease) lose() {
	l.err = errs.New(errs.LeaseLost, "items", "lease lost: taken over")
	l.end(l.err)
}

// cancelledWithin waits (bounded, for a loaded machine) for ctx to end and
// returns its cause.
func cancelledWithin(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("the lease's loss did not cancel the context")
		return nil
	}
}

func TestLeaseContextEndsWithTheLeasesLoss(t *testing.T) {
	t.Run("a lease offering its loss as a context cancels through it", func(t *testing.T) {
		l := newCtxLease()
		ctx, stop := leaseContext(context.Background(), l)
		defer stop()
		if ctx.Err() != nil {
			t.Fatal("cancelled while the lease is held")
		}
		l.lose()
		if err := cancelledWithin(t, ctx); !errors.Is(err, errs.ErrLeaseLost) {
			t.Fatalf("cause %v, want LEASE_LOST", err)
		}
	})
	t.Run("a lease offering only Lost cancels through it", func(t *testing.T) {
		l := &chanLease{lost: make(chan struct{})}
		ctx, stop := leaseContext(context.Background(), l)
		defer stop()
		l.lose()
		if err := cancelledWithin(t, ctx); !errors.Is(err, errs.ErrLeaseLost) {
			t.Fatalf("cause %v, want LEASE_LOST", err)
		}
	})
	t.Run("stop cancels with a plain cause and a later loss changes nothing", func(t *testing.T) {
		l := newCtxLease()
		ctx, stop := leaseContext(context.Background(), l)
		stop()
		l.lose()
		if err := context.Cause(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, errs.ErrLeaseLost) {
			t.Fatalf("cause %v, want context.Canceled", err)
		}
	})
}
