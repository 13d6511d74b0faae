package meilitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A document is kept as its top-level fields, each the raw JSON bytes it was
// sent as (slices of the request body: a payload is parsed once, and values
// are never re-encoded). Numbers and ids therefore come back exactly as sent.
type field struct {
	name string
	raw  []byte
}

type doc struct {
	id     string // the external id (a string, or an integer in decimal)
	docid  uint32 // the internal id: the order of fetches (index.add)
	dead   bool   // deleted; dropped from index.list at the next compaction
	fields []field
}

func (d *doc) get(name string) ([]byte, bool) {
	for i := len(d.fields) - 1; i >= 0; i-- {
		if d.fields[i].name == name {
			return d.fields[i].raw, true
		}
	}
	return nil, false
}

// appendJSON appends the document as a JSON object, keeping only the fields
// in keep when keep is not nil.
func appendDoc(b []byte, fields []field, keep func(string) bool) []byte {
	b = append(b, '{')
	first := true
	for _, f := range fields {
		if keep != nil && !keep(f.name) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, f.name)
		b = append(b, ':')
		b = append(b, f.raw...)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	simple := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			simple = false
			break
		}
	}
	if simple {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return append(b, bytes.TrimRight(buf.Bytes(), "\n")...)
}

// parser is a small validating JSON scanner that splits documents into their
// top-level fields in one pass over the payload, without building values.
type parser struct {
	b []byte
	i int
	// limit is the deepest a container may be nested under a document's
	// top-level fields (depth 1 is a field's own value).
	limit int
}

// Nesting limits. Meilisearch reads a JSON array or NDJSON payload a
// document at a time as serde_json RawValues
// (crates/meilisearch-types/src/document_formats.rs read_json, read_ndjson),
// and serde_json skips a raw value with an explicit stack that counts no
// depth (de.rs ignore_value): no limit there; this server stops at Go's
// encoding/json limit of 10000 levels, to keep its own recursion bounded.
// A payload that is one object is parsed as a serde_json Map, under
// serde_json's recursion limit of 128: the 128th nested container, the
// document itself counted, is "recursion limit exceeded".
const (
	rawValueDepthLimit  = 10000
	singleDocDepthLimit = 127
)

type syntaxError struct {
	msg  string
	line int
	col  int
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("%s at line %d column %d", e.msg, e.line, e.col)
}

func (p *parser) fail(msg string) error {
	line, col := 1, 1
	end := p.i
	if end > len(p.b) {
		end = len(p.b)
	}
	for _, c := range p.b[:end] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &syntaxError{msg: msg, line: line, col: col}
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// str scans a string starting at p.i (a '"') and returns its content bounds
// and whether it holds escapes.
func (p *parser) str() (start, end int, escaped bool, err error) {
	p.i++
	start = p.i
	b := p.b
	for p.i < len(b) {
		c := b[p.i]
		switch {
		case c == '"':
			end = p.i
			p.i++
			return start, end, escaped, nil
		case c == '\\':
			escaped = true
			p.i++
			if p.i >= len(b) {
				return 0, 0, false, p.fail("EOF while parsing a string")
			}
			switch b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if p.i+4 >= len(b) {
					return 0, 0, false, p.fail("EOF while parsing a string")
				}
				for k := 1; k <= 4; k++ {
					if !isHex(b[p.i+k]) {
						p.i += k
						return 0, 0, false, p.fail("invalid escape")
					}
				}
				p.i += 5
			default:
				return 0, 0, false, p.fail("invalid escape")
			}
		case c < 0x20:
			return 0, 0, false, p.fail("control character (\\u0000-\\u001F) found while parsing a string")
		default:
			p.i++
		}
	}
	return 0, 0, false, p.fail("EOF while parsing a string")
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (p *parser) number() error {
	b := p.b
	if p.i < len(b) && b[p.i] == '-' {
		p.i++
	}
	if p.i >= len(b) {
		return p.fail("EOF while parsing a value")
	}
	switch {
	case b[p.i] == '0':
		p.i++
	case b[p.i] >= '1' && b[p.i] <= '9':
		for p.i < len(b) && b[p.i] >= '0' && b[p.i] <= '9' {
			p.i++
		}
	default:
		return p.fail("invalid number")
	}
	if p.i < len(b) && b[p.i] == '.' {
		p.i++
		n := p.i
		for p.i < len(b) && b[p.i] >= '0' && b[p.i] <= '9' {
			p.i++
		}
		if p.i == n {
			return p.fail("invalid number")
		}
	}
	if p.i < len(b) && (b[p.i] == 'e' || b[p.i] == 'E') {
		p.i++
		if p.i < len(b) && (b[p.i] == '+' || b[p.i] == '-') {
			p.i++
		}
		n := p.i
		for p.i < len(b) && b[p.i] >= '0' && b[p.i] <= '9' {
			p.i++
		}
		if p.i == n {
			return p.fail("invalid number")
		}
	}
	return nil
}

func (p *parser) literal(lit string) error {
	if !bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
		return p.fail("expected value")
	}
	p.i += len(lit)
	return nil
}

// value validates one JSON value at p.i and leaves p.i after it.
func (p *parser) value(depth int) error {
	p.ws()
	if p.i >= len(p.b) {
		return p.fail("EOF while parsing a value")
	}
	if c := p.b[p.i]; (c == '{' || c == '[') && depth >= p.limit {
		return p.fail("recursion limit exceeded")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, _, _, err := p.str()
		return err
	case c == '{':
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return nil
		}
		for {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return p.fail("key must be a string")
			}
			if _, _, _, err := p.str(); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return p.fail("expected `:`")
			}
			p.i++
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) {
				return p.fail("EOF while parsing an object")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == '}' {
				p.i++
				return nil
			}
			return p.fail("expected `,` or `}`")
		}
	case c == '[':
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return nil
		}
		for {
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.b) {
				return p.fail("EOF while parsing a list")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == ']' {
				p.i++
				return nil
			}
			return p.fail("expected `,` or `]`")
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return p.fail("expected value")
	}
}

// object parses one object at p.i into its fields.
func (p *parser) object() ([]field, error) {
	p.ws()
	if p.i >= len(p.b) {
		return nil, p.fail("EOF while parsing a value")
	}
	if p.b[p.i] != '{' {
		start := p.i
		if err := p.value(1); err != nil {
			return nil, err
		}
		p.i = start
		return nil, p.fail(fmt.Sprintf("invalid type: %s, expected a map", describe(p.b[start])))
	}
	p.i++
	fields := make([]field, 0, 8)
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return fields, nil
	}
	for {
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.fail("key must be a string")
		}
		ks, ke, esc, err := p.str()
		if err != nil {
			return nil, err
		}
		var name string
		if esc || !utf8.Valid(p.b[ks:ke]) {
			if err := json.Unmarshal(p.b[ks-1:ke+1], &name); err != nil {
				return nil, p.fail("invalid key")
			}
		} else {
			name = string(p.b[ks:ke])
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.fail("expected `:`")
		}
		p.i++
		p.ws()
		vs := p.i
		if err := p.value(1); err != nil {
			return nil, err
		}
		fields = append(fields, field{name: name, raw: p.b[vs:p.i:p.i]})
		p.ws()
		if p.i >= len(p.b) {
			return nil, p.fail("EOF while parsing an object")
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] == '}' {
			p.i++
			return fields, nil
		}
		return nil, p.fail("expected `,` or `}`")
	}
}

func describe(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == '[':
		return "sequence"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}

// parseJSONDocs parses a JSON payload: an array of objects or one object.
func parseJSONDocs(b []byte) ([][]field, error) {
	p := &parser{b: b, limit: rawValueDepthLimit}
	p.ws()
	if p.i >= len(b) {
		return nil, p.fail("EOF while parsing a value")
	}
	var out [][]field
	if b[p.i] == '[' {
		p.i++
		p.ws()
		if p.i < len(b) && b[p.i] == ']' {
			p.i++
		} else {
			for {
				f, err := p.object()
				if err != nil {
					return nil, err
				}
				out = append(out, f)
				p.ws()
				if p.i >= len(b) {
					return nil, p.fail("EOF while parsing a list")
				}
				if b[p.i] == ',' {
					p.i++
					continue
				}
				if b[p.i] == ']' {
					p.i++
					break
				}
				return nil, p.fail("expected `,` or `]`")
			}
		}
	} else {
		p.limit = singleDocDepthLimit
		f, err := p.object()
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	p.ws()
	if p.i != len(b) {
		return nil, p.fail("trailing characters")
	}
	return out, nil
}

// parseNDJSONDocs parses one object per line (blank lines are skipped).
func parseNDJSONDocs(b []byte) ([][]field, error) {
	p := &parser{b: b, limit: rawValueDepthLimit}
	var out [][]field
	for {
		p.ws()
		if p.i >= len(b) {
			return out, nil
		}
		f, err := p.object()
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		// The next object must start on a new line.
		for p.i < len(b) && (b[p.i] == ' ' || b[p.i] == '\t' || b[p.i] == '\r') {
			p.i++
		}
		if p.i < len(b) && b[p.i] != '\n' {
			return nil, p.fail("trailing characters")
		}
	}
}

// parseID checks a primary-key value against Meilisearch's id rules
// (crates/milli/src/documents/primary_key.rs, validate_document_id_*): a
// JSON integer (negative allowed), or a string of 1 to 511 bytes of
// [A-Za-z0-9_-]. It returns the external id.
func parseID(raw []byte) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if bytes.IndexByte(raw, '\\') >= 0 {
			if json.Unmarshal(raw, &s) != nil {
				return "", false
			}
		} else {
			s = string(raw[1 : len(raw)-1])
		}
		if !validIDString(s) {
			return "", false
		}
		return s, true
	case c == '-' || c >= '0' && c <= '9':
		if bytes.ContainsAny(raw, ".eE") {
			return "", false
		}
		// i64 or u64 range, as serde's integer visitors.
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return string(raw), true
		}
		if _, err := strconv.ParseUint(string(raw), 10, 64); err == nil {
			return string(raw), true
		}
		return "", false
	}
	return "", false
}

func validIDString(s string) bool {
	if len(s) == 0 || len(s) > 511 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// decodeRaw decodes a raw JSON value (for filters, search and Documents).
func decodeRaw(raw []byte) any {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil
	}
	return v
}
