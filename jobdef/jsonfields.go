package jobdef

import (
	"bytes"
	"encoding/json"
)

// JSONField is one member of a JSON object: its key, and its value's
// bytes as they are in the object.
type JSONField struct {
	Key string
	Raw []byte
}

// JSONFields splits the JSON object b into its members, in order, without
// decoding their values (verify compares a destination's documents member
// by member, and reads their primary key, without building maps of every
// value). ok is false when b is not an object this scanner can split; the
// caller then decodes b in full. Raw slices b.
func JSONFields(b []byte) (fields []JSONField, ok bool) {
	ok = EachJSONField(b, func(key string, raw []byte) bool {
		fields = append(fields, JSONField{Key: key, Raw: raw})
		return true
	})
	if !ok {
		return nil, false
	}
	return fields, true
}

// JSONMember returns the raw value of member key of the JSON object b
// (the first, if b holds it twice); ok is false when b holds none or
// cannot be split.
func JSONMember(b []byte, key string) (raw []byte, ok bool) {
	walkObject(b, func(k []byte, i int) (int, bool) {
		end := valueEnd(b, i)
		if end >= 0 && string(k) == key {
			raw, ok = b[i:end], true
			return end, false
		}
		return end, true
	})
	return raw, ok
}

// EachJSONField calls fn with each member of the JSON object b, in order,
// until fn returns false; false when b is not an object it can split
// (as far as it read).
func EachJSONField(b []byte, fn func(key string, raw []byte) bool) bool {
	return walkObject(b, func(key []byte, i int) (int, bool) {
		end := valueEnd(b, i)
		if end < 0 {
			return -1, false
		}
		return end, fn(string(key), b[i:end])
	})
}

// JSONMemberElements splits the array that is member key of the JSON
// object b (the first, if b holds it twice) into its elements' bytes, in
// the same pass that finds it: the array is read once, not skipped and
// then split. ok is false when b holds no such member, it is not an array
// that splits, or b cannot be split as far as the member.
func JSONMemberElements(b []byte, key string) (elems [][]byte, ok bool) {
	walkObject(b, func(k []byte, i int) (int, bool) {
		if string(k) != key {
			return valueEnd(b, i), true
		}
		var end int
		elems, end = splitArray(b, i)
		ok = end >= 0
		return end, false
	})
	if !ok {
		return nil, false
	}
	return elems, true
}

// walkObject walks the members of the JSON object b: member gets each key
// and where its value starts, and returns the index after the value (-1
// when it does not end) and whether to go on. false when b is not an
// object it can split as far as it read. The key is b's own bytes unless
// it holds an escape (then decoded), so finding a member by its key
// allocates nothing; member must not keep it.
func walkObject(b []byte, member func(key []byte, i int) (end int, more bool)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := stringEnd(b, i)
		if end < 0 {
			return false
		}
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if json.Unmarshal(b[i:end], &k) != nil {
				return false
			}
			key = []byte(k)
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend, more := member(key, i)
		if vend < 0 {
			return false
		}
		if !more {
			return true
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			return skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return false
		}
		i = skipSpace(b, i+1)
	}
}

// JSONElements splits the JSON array b into its elements' bytes, in
// order, without decoding them; ok is false when b is not an array it can
// split. The elements slice b.
func JSONElements(b []byte) (elems [][]byte, ok bool) {
	i := skipSpace(b, 0)
	elems, end := splitArray(b, i)
	if end < 0 || skipSpace(b, end) != len(b) {
		return nil, false
	}
	return elems, true
}

// splitArray splits the JSON array starting at b[i] into its elements'
// bytes and returns the index after it; -1 when there is no array there
// that splits.
func splitArray(b []byte, i int) (elems [][]byte, end int) {
	if i >= len(b) || b[i] != '[' {
		return nil, -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return [][]byte{}, i + 1
	}
	for {
		end := valueEnd(b, i)
		if end < 0 {
			return nil, -1
		}
		elems = append(elems, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, -1
		}
		if b[i] == ']' {
			return elems, i + 1
		}
		if b[i] != ',' {
			return nil, -1
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string starting at b[i] (a
// quote); -1 when it does not end. It jumps from quote to quote: a quote
// ends the string unless an odd run of backslashes stands before it (each
// pair is an escaped backslash), so the bytes between are never looked at
// one by one.
func stringEnd(b []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for q-1-n > i && b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// valueEnd returns the index after the JSON value starting at b[i]; -1
// when it does not end. Objects and arrays are skipped by their brackets
// (strings inside them skipped whole); scalars run to the next delimiter.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := stringEnd(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
