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
	if got, want := errs.Format(e), "LEASE_LOST articles: renew lease: connection refused"; got != want {
		t.Fatalf("Format = %q, want %q", got, want)
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
		{"a FAILED layer keeps the precise code inside it", errs.Wrap(errs.Failed, "a", errs.New(errs.ConfigInvalid, "a", "bad key"), "prepare"), errs.ConfigInvalid},
		{"through a plain wrapper too", fmt.Errorf("run: %w", errs.Wrap(errs.Failed, "a", errs.New(errs.HistoryLost, "a", "gone"), "follow")), errs.HistoryLost},
		{"the outermost precise code wins", errs.Wrap(errs.LeaseLost, "a", errs.New(errs.ConfigInvalid, "a", "x"), "write"), errs.LeaseLost},
		{"FAILED all the way is FAILED", errs.Wrap(errs.Failed, "a", errs.New(errs.Failed, "a", "x"), "y"), errs.Failed},
		{"the first of joined errors", errors.Join(errors.New("plain"), errs.New(errs.TransformFailed, "a", "x")), errs.TransformFailed},
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

func TestFormatPrintsTheCodeAndJobOnce(t *testing.T) {
	inner := errs.New(errs.ConfigInvalid, "people", "a mirror job needs MEILISTREAM_REPLICA_URI")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"one layer", inner, "CONFIG_INVALID people: a mirror job needs MEILISTREAM_REPLICA_URI"},
		{"layers of the same job", errs.WithJob("people", errs.Wrap(errs.Failed, "people", fmt.Errorf("load: %w", inner), "start")),
			"CONFIG_INVALID people: start: load: a mirror job needs MEILISTREAM_REPLICA_URI"},
		{"no job", errs.New(errs.Failed, "", "read samples"), "FAILED: read samples"},
		{"a plain error", errors.New("boom"), "FAILED: boom"},
		{"the job from an inner layer", errs.Wrap(errs.Failed, "", inner, "check"), "CONFIG_INVALID people: check: a mirror job needs MEILISTREAM_REPLICA_URI"},
		{"a sentinel", errs.ErrLeaseLost, "LEASE_LOST"},
		{"joined errors one per line", errors.Join(inner, errs.New(errs.TransformFailed, "books", "books.js:2:1: syntax error")),
			"CONFIG_INVALID people: a mirror job needs MEILISTREAM_REPLICA_URI\nTRANSFORM_FAILED books: books.js:2:1: syntax error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errs.Format(tt.err); got != tt.want {
				t.Fatalf("Format = %q, want %q", got, tt.want)
			}
		})
	}
	if got := inner.Error(); got != "a mirror job needs MEILISTREAM_REPLICA_URI" {
		t.Fatalf("Error() = %q, want the message without code and job", got)
	}
}

func TestJobOf(t *testing.T) {
	err := fmt.Errorf("x: %w", errs.Wrap(errs.Failed, "", errs.New(errs.Running, "books", "held"), "acquire"))
	if got := errs.JobOf(err); got != "books" {
		t.Fatalf("JobOf = %q, want books", got)
	}
	if got := errs.JobOf(errors.New("plain")); got != "" {
		t.Fatalf("JobOf(plain) = %q", got)
	}
}
