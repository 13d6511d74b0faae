package jobdef

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends v, a JSON-ready value (map[string]any, []any,
// string, int64, float64, bool, nil, json.Number, or json.RawMessage such
// as a Result's JSON, appended as it is), to b. It writes what
// encoding/json writes (minus HTML escaping and key sorting, which
// Meilisearch does not need) without reflection. Other types go through
// encoding/json.
func AppendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case json.RawMessage:
		return append(b, x...), nil
	case string:
		return AppendJSONString(b, x), nil
	case map[string]any:
		b = append(b, '{')
		first := true
		for k, e := range x {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = AppendJSONString(b, k)
			b = append(b, ':')
			var err error
			if b, err = AppendJSON(b, e); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = AppendJSON(b, e); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case float64:
		return AppendJSONFloat(b, x)
	case bool:
		return strconv.AppendBool(b, x), nil
	case json.Number:
		if x == "" {
			return append(b, '0'), nil
		}
		return append(b, x...), nil
	case []string:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, e)
		}
		return append(b, ']'), nil
	}
	m, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, m...), nil
}

var errNotFinite = errors.New("json: unsupported value: NaN or Inf")

// AppendJSONFloat formats like encoding/json (floatEncoder, 64 bits).
func AppendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, errNotFinite
	}
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	b = strconv.AppendFloat(b, f, fmt, -1, 64)
	if fmt == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// SWAR constants: a byte repeated in each of the 8 bytes of a word.
const (
	swarLSB = 0x0101010101010101
	swarMSB = 0x8080808080808080
)

// plainWord reports whether none of the 8 bytes of x (a string's bytes,
// the first lowest) needs work in a JSON string: no control character,
// quote, backslash or non-ASCII byte. It tests them at once ("has less
// than" and "has zero byte" tricks,
// https://graphics.stanford.edu/~seander/bithacks.html#HasLessInWord):
// article text is almost all plain bytes, and a loop over single bytes was
// most of the encoder's time.
func plainWord(x uint64) bool {
	q := x ^ (swarLSB * '"')
	bs := x ^ (swarLSB * '\\')
	return (x|(x-swarLSB*0x20)|(q-swarLSB)&^q|(bs-swarLSB)&^bs)&swarMSB == 0
}

// AppendJSONString quotes s as encoding/json does with HTML escaping off:
// control characters escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Written this way, the 8 bytes are one load with no bounds
			// check, and plainWord is inlined.
			w := s[i : i+8]
			if plainWord(uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56) {
				i += 8
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
