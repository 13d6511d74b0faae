package sink_test

import (
	"errors"
	"testing"

	"github.com/meilistream/meilistream/sidecar/sink"
)

// A guard answers what its check answers; one nobody made refuses, so a
// sink that forgot its lease sends nothing.
func TestGuardAnswersItsCheckAndTheZeroOneRefuses(t *testing.T) {
	lost := errors.New("lease lost")
	var held error
	g := sink.NewGuard(func() error { return held })
	if err := g.Check(); err != nil {
		t.Errorf("a held lease: %v", err)
	}
	held = lost
	if err := g.Check(); !errors.Is(err, lost) {
		t.Errorf("a lost lease: %v, want the check's own error", err)
	}
	if err := sink.Unguarded.Check(); err != nil {
		t.Errorf("Unguarded: %v", err)
	}
	if err := (sink.Guard{}).Check(); err == nil {
		t.Error("the zero Guard let a request through")
	}
}
