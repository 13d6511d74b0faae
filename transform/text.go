package transform

import (
	"strings"

	"github.com/meilistream/meilistream/internal/clip"
)

// clipText cuts s to at most n bytes, never inside a UTF-8 character,
// marking the cut with "…".
func clipText(s string, n int) string { return clip.Text(s, n, "…") }

// maxKeyText caps one key (a document's field name, an option's name) in
// an error: keys are the document's shape, which an error may name, but
// one may be long, or hold what is really data (a map keyed by e-mail).
const maxKeyText = 64

// pathText is the path to a value in an error ("a.b.0"), each key cut
// to maxKeyText and the whole to 512 bytes.
func pathText(path []string) string {
	parts := make([]string, len(path))
	for i, k := range path {
		parts[i] = clipText(k, maxKeyText)
	}
	return clipText(strings.Join(parts, "."), 512)
}
