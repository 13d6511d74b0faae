package supervisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
)

// Only HISTORY_LOST under onHistoryLost: fail ends a job for good; the
// engine's HISTORY_LOST for an oplog shorter than a reindex (under
// onHistoryLost: reindex) and every other error are restarted as before.
func TestHistoryLostForGood(t *testing.T) {
	errHistoryLost := errors.New("change stream history lost") // the engine's cause

	engineFail := errs.WithJob("books", errs.Wrap(errs.HistoryLost, "books", errHistoryLost,
		"the recorded position is older than the server's change history (onHistoryLost: fail)"))
	tooShort := errs.Wrap(errs.HistoryLost, "books", errHistoryLost,
		"the change history (oplog window) is shorter than a reindex of books takes; enlarge the oplog")
	other := errs.New(errs.Failed, "books", "send batch: refused")

	got := historyLostForGood("books", "fail", engineFail)
	if !errors.Is(got, ErrFatal) || errs.CodeOf(got) != errs.HistoryLost {
		t.Fatalf("fail + HISTORY_LOST = %v, want it marked fatal with its code", got)
	}
	want := "HISTORY_LOST books: the recorded position is older than the server's change history (onHistoryLost: fail): change stream history lost; " +
		"to repair it, run `meilistream reindex books` (from any pod"
	if msg := errs.Format(got); !strings.HasPrefix(msg, want) || !strings.Contains(msg, `onHistoryLost: "reindex"`) ||
		!strings.Contains(msg, "MEILISTREAM_ON_HISTORY_LOST=reindex") || strings.Count(msg, "HISTORY_LOST books") != 1 {
		t.Errorf("message = %q, want the engine's message once, then the fix", msg)
	}
	for _, c := range []struct {
		policy string
		err    error
	}{
		{"reindex", tooShort},
		{"fail", other},
		{"reindex", other},
		{"fail", nil},
	} {
		if got := historyLostForGood("books", c.policy, c.err); got != c.err {
			t.Errorf("onHistoryLost %s, %v = %v, want it unchanged", c.policy, c.err, got)
		}
	}
}
