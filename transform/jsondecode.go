package transform

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// hexDigits are the digits of a \u escape.
const hexDigits = "0123456789abcdef"

// decodeJSON reads JSON as AppendJSON's Go values: integers as int64 (or
// uint64 beyond it), other numbers as float64, objects as map[string]any.
// It is how Apply gives the written document as Go values.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n
			}
			if n, err := strconv.ParseUint(s, 10, 64); err == nil {
				return n
			}
		}
		f, _ := strconv.ParseFloat(s, 64)
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}
