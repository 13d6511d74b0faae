package meilitest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// indexingDepthLimit is how deep a top-level field's value may nest when
// milli indexes it. The payload readers take an array or NDJSON payload as
// raw values without a depth limit, but indexing turns each searchable or
// faceted top-level field into a serde_json Value
// (crates/milli/src/update/new/extract/searchable/tokenize_document.rs and
// faceted/facet_document.rs: serde_json::to_value of the field's RawValue,
// which serde_json's RawValueEmitter parses with from_str, value/ser.rs),
// under serde_json's recursion limit of 128 (de.rs, remaining_depth): the
// 128th container of a field's value, the value itself counted, is
// "recursion limit exceeded". milli reports it as an internal error
// (InternalError::SerdeJson), which fails every task of the batch.
const indexingDepthLimit = 128

// checkIndexingDepth fails the batch as milli does when a document about to
// be added to uid has a field, searchable or faceted there, nested
// indexingDepthLimit containers deep. Runs with s.mu held.
func (s *Server) checkIndexingDepth(uid string, docs [][]field) *apiError {
	ix := s.indexes[uid]
	if ix == nil {
		ix = newIndex(uid)
	}
	for _, fields := range docs {
		for _, f := range fields {
			line, col, deep := tooDeep(f.raw, indexingDepthLimit)
			if deep && ix.extracted(f.name) {
				return errf("internal", "Index `%s`: internal: recursion limit exceeded at line %d column %d.", uid, line, col)
			}
		}
	}
	return nil
}

// tooDeep reports whether raw (one JSON value) opens a limit-th nested
// container, and where, as serde_json's peek_error reports it (line from 1,
// column: the container's byte offset in its line plus one).
func tooDeep(raw []byte, limit int) (line, col int, deep bool) {
	level, inStr := 0, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			if level++; level >= limit {
				start := bytes.LastIndexByte(raw[:i], '\n') + 1
				return 1 + bytes.Count(raw[:start], []byte{'\n'}), i - start + 1, true
			}
		case c == '}' || c == ']':
			level--
		}
	}
	return 0, 0, false
}

// extracted reports whether indexing parses top-level field name: it is
// searchable (searchableAttributes "*", the default, or naming it or a
// field under it) or faceted (filterable or sortable). Attribute patterns
// are matched exactly, by "*" alone, or as a prefix ending in "*"; milli's
// other glob forms are not followed.
func (ix *index) extracted(name string) bool {
	matches := func(attr string) bool {
		switch {
		case attr == "*" || attr == name || strings.HasPrefix(attr, name+"."):
			return true
		case strings.HasSuffix(attr, "*"):
			p := strings.TrimSuffix(attr, "*")
			return strings.HasPrefix(name, p) || strings.HasPrefix(p, name+".")
		}
		return false
	}
	for _, key := range []string{"searchableAttributes", "sortableAttributes"} {
		for _, a := range ix.stringList(key) {
			if matches(a) {
				return true
			}
		}
	}
	var filterable []json.RawMessage
	_ = json.Unmarshal(ix.setting("filterableAttributes"), &filterable)
	for _, f := range filterable {
		var a string
		if json.Unmarshal(f, &a) == nil {
			if matches(a) {
				return true
			}
			continue
		}
		var obj struct {
			AttributePatterns []string `json:"attributePatterns"`
		}
		if json.Unmarshal(f, &obj) == nil {
			for _, p := range obj.AttributePatterns {
				if matches(p) {
					return true
				}
			}
		}
	}
	return false
}
