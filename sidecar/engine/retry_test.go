package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
)

// The engine retries by the same rule the supervisor parks by (errs.CodeOf):
// only what is FAILED all the way down is retried.
func TestRetryableFollowsTheCodeRule(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("connection reset"), true},
		{errs.New(errs.Failed, "a", "task failed"), true},
		{fmt.Errorf("send: %w", errs.Wrap(errs.Failed, "a", errors.New("503"), "add documents")), true},
		{errs.New(errs.ConfigInvalid, "a", "key refused"), false},
		{errs.Wrap(errs.Failed, "a", errs.New(errs.ConfigInvalid, "a", "key refused"), "prepare"), false},
		{errs.Wrap(errs.Failed, "a", errs.New(errs.LeaseLost, "a", "taken over"), "record"), false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%s) = %v, want %v", errs.Format(c.err), got, c.want)
		}
	}
}
