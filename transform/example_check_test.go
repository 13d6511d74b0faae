package transform_test

import (
	"bytes"
	"testing"

	"github.com/meilistream/meilistream/transform"
)

// TestExamplesPassCheck runs `check` on the shipped examples with their own
// samples, as a user's CI would.
func TestExamplesPassCheck(t *testing.T) {
	var out bytes.Buffer
	err := transform.Check(&out, "../examples/transforms", "", transform.Options{Pool: 1})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("check failed: %v", err)
	}
}
