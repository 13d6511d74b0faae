package synccheck

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func docs(t *testing.T, src ...string) Docs {
	t.Helper()
	out := Docs{}
	for _, s := range src {
		d, k, err := decode([]byte(s), "id")
		if err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

func TestDiff(t *testing.T) {
	for _, c := range []struct {
		name           string
		expected, have []string
		want           []string // substrings of the diff; none: equal
	}{
		{"equal documents are equal whatever the key order", []string{`{"id":1,"a":"x","b":[1,2]}`}, []string{`{"b":[1,2],"a":"x","id":1}`}, nil},
		{"a string id and a number id differ", []string{`{"id":"1"}`}, []string{`{"id":1}`}, []string{`missing "1"`, "unexpected 1"}},
		{"numbers compare by value", []string{`{"id":1,"n":1.5}`}, []string{`{"id":1,"n":1.50}`}, nil},
		{"different values differ", []string{`{"id":1,"n":[1,{"x":"a"}]}`}, []string{`{"id":1,"n":[1,{"x":"b"}]}`}, []string{"differs 1"}},
		{"a missing document is reported", []string{`{"id":"a"}`, `{"id":"b"}`}, []string{`{"id":"a"}`}, []string{`missing "b"`, "1 differences"}},
		{"an extra document is reported", nil, []string{`{"id":"z"}`}, []string{`unexpected "z"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Diff(docs(t, c.expected...), docs(t, c.have...))
			if len(c.want) == 0 && d != "" {
				t.Fatalf("want equal, got %s", d)
			}
			for _, w := range c.want {
				if !strings.Contains(d, w) {
					t.Fatalf("diff %q lacks %q", d, w)
				}
			}
		})
	}
}

func TestDecodeKeepsNumbersExact(t *testing.T) {
	d, k, err := decode([]byte(`{"id":12345678901234567,"f":0.1}`), "id")
	if err != nil || k != "12345678901234567" || d["f"] != json.Number("0.1") {
		t.Fatalf("%v %q %v", d, k, err)
	}
}

// A difference between long documents is cut for its line, never inside
// a UTF-8 character: the text goes to test logs and error messages.
func TestDiffCutsLongDocumentsOnCharacters(t *testing.T) {
	// 199 bytes of the line's JSON before the first two-byte character
	// put a byte cut at 200 inside it.
	const head = `{"id":"1","t":"`
	long := func(c string) string {
		return head + strings.Repeat("a", 199-len(head)) + strings.Repeat(c, 200) + `"}`
	}
	d := Diff(docs(t, long("é")), docs(t, long("è")))
	if !utf8.ValidString(d) || !strings.Contains(d, "...") {
		t.Fatalf("diff line is not valid UTF-8 or was not cut: %q", d)
	}
}
