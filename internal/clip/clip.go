// Package clip cuts text to a size in bytes without cutting a UTF-8
// character in two. Every text that is bounded before it reaches a log
// line, an error, /status or an error record goes through it: a byte cut
// inside a character leaves an invalid sequence that JSON encoders turn
// into U+FFFD (or refuse), and that MongoDB refuses to store in a string
// field it validates. It imports nothing of this module.
package clip

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 character. Bytes that are not valid UTF-8 are no
// character: a cut among them is left where n puts it, so a text of
// invalid bytes is not emptied by looking for a character's start.
func Prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	// s[n] continues a character when it is a continuation byte; the
	// character then starts at most UTFMax-1 bytes before it.
	i := n
	for i > 0 && n-i < utf8.UTFMax-1 && !utf8.RuneStart(s[i]) {
		i--
	}
	if i == n || !utf8.RuneStart(s[i]) {
		return s[:n]
	}
	// s[i] starts a sequence: keep it only if it ends by n (it did not
	// when it reaches s[n], which is why s[n] continues it), else cut
	// before it. An invalid sequence (a start byte followed by too few
	// continuation bytes) is no character either.
	if r, size := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size <= 1 {
		return s[:n]
	}
	return s[:i]
}

// Text returns s when it has at most n bytes, else its Prefix of n bytes
// followed by mark (such as "…" or "..."), which says the text was cut.
func Text(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + mark
}
