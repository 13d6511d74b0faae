package transform

import (
	"strings"
	"unicode/utf8"
)

// clip cuts s to at most n bytes, on a rune boundary, marking the cut
// with "…" (a byte cut could split a UTF-8 character and make the text
// invalid where it is logged or stored).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// maxKeyText caps one key (a document's field name, an option's name) in
// an error: keys are the document's shape, which an error may name, but
// one may be long, or hold what is really data (a map keyed by e-mail).
const maxKeyText = 64

// pathText is the path to a value in an error ("a.b.0"), each key cut
// to maxKeyText and the whole to 512 bytes.
func pathText(path []string) string {
	parts := make([]string, len(path))
	for i, k := range path {
		parts[i] = clip(k, maxKeyText)
	}
	return clip(strings.Join(parts, "."), 512)
}
