package jobdef_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
)

// wantErr checks err's code and that its message holds every part.
func wantErr(t testing.TB, err error, code errs.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if got := errs.CodeOf(err); got != code {
		t.Fatalf("code %s, want %s: %v", got, code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}
