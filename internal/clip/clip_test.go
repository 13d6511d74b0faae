package clip_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/meilistream/meilistream/internal/clip"
)

func TestPrefixNeverSplitsACharacter(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"a short text is kept whole", "héllo", 10, "héllo"},
		{"a cut between characters stays where it is", "abcdef", 3, "abc"},
		{"a cut inside a two-byte character moves before it", "aé", 2, "a"},
		{"a cut inside a three-byte character moves before it", "a€b", 3, "a"},
		{"a cut after a three-byte character keeps it", "a€b", 4, "a€"},
		{"a cut inside a four-byte character moves before it", "x😀", 4, "x"},
		{"a cut inside the first character gives nothing", "😀", 2, ""},
		{"a zero size gives nothing", "abc", 0, ""},
		{"a negative size gives nothing", "abc", -1, ""},
		{"invalid bytes are not emptied", strings.Repeat("\x80", 10), 4, strings.Repeat("\x80", 4)},
		{"a start byte without its continuation is not a character", "ab\xe2\x82zz", 3, "ab\xe2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := clip.Prefix(tc.s, tc.n)
			if got != tc.want {
				t.Fatalf("Prefix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if len(got) > max(tc.n, 0) {
				t.Fatalf("Prefix(%q, %d) = %q: longer than %d bytes", tc.s, tc.n, got, tc.n)
			}
		})
	}
}

// Every cut of a valid text is valid and as long as it can be.
func TestPrefixOfValidTextIsValid(t *testing.T) {
	s := "añ€😀b" + strings.Repeat("日本語", 5)
	for n := 0; n <= len(s); n++ {
		p := clip.Prefix(s, n)
		if !utf8.ValidString(p) || !strings.HasPrefix(s, p) || len(p) > n || n-len(p) >= utf8.UTFMax {
			t.Fatalf("Prefix(s, %d) = %q", n, p)
		}
	}
}

func TestTextMarksACut(t *testing.T) {
	if got := clip.Text("héllo", 6, "…"); got != "héllo" {
		t.Fatalf("a text of exactly n bytes: %q", got)
	}
	if got := clip.Text("aéé", 2, "..."); got != "a..." {
		t.Fatalf("cut: %q", got)
	}
}

func FuzzPrefix(f *testing.F) {
	f.Add("héllo wörld", 3)
	f.Add("\xf0\x9f\x98", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		p := clip.Prefix(s, n)
		if !strings.HasPrefix(s, p) || len(p) > max(n, 0) {
			t.Fatalf("Prefix(%q, %d) = %q", s, n, p)
		}
		if utf8.ValidString(s) && !utf8.ValidString(p) {
			t.Fatalf("Prefix(%q, %d) = %q: cut a character", s, n, p)
		}
	})
}
