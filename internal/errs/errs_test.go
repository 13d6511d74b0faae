package errs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
)

func TestErrorMatchesItsSentinelWhateverTheMessage(t *testing.T) {
	cause := errors.New("connection refused")
	err := fmt.Errorf("keep lease: %w", errs.Wrap(errs.LeaseLost, "articles", cause, "renew lease"))

	if !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("errors.Is(%v, ErrLeaseLost) = false", err)
	}
	if errors.Is(err, errs.ErrRunning) {
		t.Fatalf("errors.Is(%v, ErrRunning) = true", err)
	}
	if !errors.Is(err, cause) {
		t.Fatalf("the cause is lost: %v", err)
	}
	if !errors.Is(err, &errs.Error{Code: errs.LeaseLost, Job: "articles"}) {
		t.Fatal("a sentinel naming the job does not match")
	}
	if errors.Is(err, &errs.Error{Code: errs.LeaseLost, Job: "other"}) {
		t.Fatal("a sentinel naming another job matches")
	}
	var e *errs.Error
	if !errors.As(err, &e) || e.Job != "articles" || e.Code != errs.LeaseLost {
		t.Fatalf("errors.As gave %+v", e)
	}
	if got, want := e.Error(), "LEASE_LOST articles: renew lease: connection refused"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want errs.Code
	}{
		{"nil is no code", nil, ""},
		{"a plain error is FAILED", errors.New("boom"), errs.Failed},
		{"a wrapped project error keeps its code", fmt.Errorf("x: %w", errs.New(errs.Running, "a", "held")), errs.Running},
		{"a context cause keeps its code", context.Cause(cancelled(errs.New(errs.LeaseLost, "a", "lost"))), errs.LeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errs.CodeOf(tt.err); got != tt.want {
				t.Fatalf("CodeOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestWrapOfNilIsNil(t *testing.T) {
	if err := errs.Wrap(errs.Failed, "a", nil, "nothing"); err != nil {
		t.Fatalf("Wrap(nil) = %v", err)
	}
}

func TestWithJob(t *testing.T) {
	if err := errs.WithJob("a", nil); err != nil {
		t.Fatalf("WithJob(nil) = %v", err)
	}
	plain := errors.New("boom")
	err := errs.WithJob("articles", plain)
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.Failed || e.Job != "articles" || !errors.Is(err, plain) {
		t.Fatalf("WithJob(plain) = %#v", err)
	}
	named := errs.WithJob("articles", errs.New(errs.HistoryLost, "", "resume"))
	if !errors.As(named, &e) || e.Job != "articles" || e.Code != errs.HistoryLost {
		t.Fatalf("WithJob(unnamed) = %#v", named)
	}
	kept := errs.WithJob("other", errs.New(errs.HistoryLost, "articles", "resume"))
	if !errors.As(kept, &e) || e.Job != "articles" {
		t.Fatalf("WithJob replaced a job name: %v", kept)
	}
}

func cancelled(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}
