package transform

import "unicode/utf8"

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
