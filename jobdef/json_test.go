package jobdef

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestAppendJSONWritesWhatEncodingJSONWrites(t *testing.T) {
	values := []any{
		nil, true, false, "", "plain", "quote\" back\\slash", "ctl\x00\x01\x1f\n\r\t\b\f", "é ü 日本 🙂",
		"bad utf8 \xff\xfe end", "line\u2028sep\u2029", "<html> & co",
		int64(0), int64(-42), int64(math.MaxInt64), 0.0, 1.5, -2.25, 1e21, 1e-7, 123456789.125, 1e20, 5e-324,
		json.Number("12.50"), []any{}, []any{int64(1), "a", nil, []any{true}}, []string{"x", "y"},
		map[string]any{}, map[string]any{"k": map[string]any{"f": 0.1}}, map[string]any{"n": int64(3)},
	}
	for _, v := range values {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		got, err := AppendJSON(nil, v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, w)
		}
	}
	if _, err := AppendJSON(nil, math.NaN()); err == nil {
		t.Error("NaN encoded")
	}
}

// Every byte value at every position of strings around the 8-byte words
// the string scanner tests at once.
func TestAppendJSONStringEscapesAtEveryPosition(t *testing.T) {
	specials := []string{"\x00", "\x1f", " ", "\"", "\\", "\x7f", "é", "\u2028", "\xff", "<", "~"}
	for c := 0; c < 256; c++ {
		specials = append(specials, string([]byte{byte(c)}))
	}
	for _, sp := range specials {
		for n := 0; n < 20; n++ {
			for at := 0; at <= n; at++ {
				s := strings.Repeat("a", at) + sp + strings.Repeat("b", n-at)
				var want bytes.Buffer
				enc := json.NewEncoder(&want)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(s); err != nil {
					t.Fatal(err)
				}
				if got, w := AppendJSONString(nil, s), bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got, w) {
					t.Fatalf("%q:\n got %s\nwant %s", s, got, w)
				}
			}
		}
	}
}
