package budget

import (
	"context"
	"errors"
	"testing"
)

func TestAcquireTakesWhatFits(t *testing.T) {
	b := New(10)
	ctx := context.Background()
	if err := b.Acquire(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if b.used != 10 {
		t.Fatalf("used %d, want 10", b.used)
	}
}

func TestAFullBudgetRefusesUntilReleased(t *testing.T) {
	b := New(10)
	if err := b.Acquire(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	if err := b.Acquire(ctx, 3); !errors.Is(err, stop) {
		t.Fatalf("acquire over the budget with an ended context: %v, want its cause", err)
	}
	if b.used != 8 {
		t.Fatalf("a refused acquire took bytes: used %d", b.used)
	}

	got := make(chan error, 1)
	go func() { got <- b.Acquire(context.Background(), 3) }()
	b.Release(8)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.used != 3 {
		t.Fatalf("used %d, want 3", b.used)
	}
}

func TestOneItemLargerThanTheBudgetPassesAlone(t *testing.T) {
	b := New(10)
	if err := b.Acquire(context.Background(), 50); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Acquire(ctx, 1); err == nil {
		t.Fatal("a second item was let in beside an oversized one")
	}
	b.Release(50)
	if err := b.Acquire(ctx, 1); err != nil {
		t.Fatalf("after the oversized item left: %v", err)
	}
}

func TestReleaseOfNothingIsANoOp(t *testing.T) {
	b := New(0)
	if b.max != 16<<20 {
		t.Fatalf("default budget %d", b.max)
	}
	b.Release(0)
	b.Release(-3)
	if b.used != 0 {
		t.Fatalf("used %d", b.used)
	}
}
