package meili

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
)

// Fetch reads the documents of ids back from the index, whole, through
// POST /indexes/{uid}/documents/fetch with "ids" (Meilisearch v1.14 on,
// meilisearch/documentation#3190; meilistream needs v1.18): the documents API
// returns every field whatever displayedAttributes says (since v0.28,
// meilisearch/meilisearch#2372), in the index's own order, so the answer
// is matched back to ids by its primary key. A missing index holds
// nothing.
func (s *Sink) Fetch(ctx context.Context, ids []bson.RawValue) ([][]byte, error) {
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	want := make([]any, 0, len(ids))
	at := make(map[string][]int, len(ids))
	for i, id := range ids {
		v, err := jobdef.IndexID(id)
		if err != nil {
			continue // never written: nothing to read back
		}
		k := jobdef.IDKey(id)
		if _, dup := at[k]; !dup {
			want = append(want, v)
		}
		at[k] = append(at[k], i)
	}
	if len(want) == 0 {
		return out, nil
	}
	docs, err := s.api.fetchDocs(ctx, s.uid, want)
	if err != nil {
		if isCode(err, "index_not_found") {
			return out, nil
		}
		return nil, s.classify(err, "read documents back from index "+s.uid)
	}
	for _, d := range docs {
		pkRaw, ok := memberOf(d, s.pk)
		if !ok {
			continue
		}
		v, ok := decodeID(pkRaw)
		if !ok {
			continue
		}
		id, err := jobdef.ParseIndexID(v)
		if err != nil {
			continue
		}
		for _, i := range at[jobdef.IDKey(id)] {
			out[i] = d
		}
	}
	return out, nil
}

func (c guarded) fetchDocs(ctx context.Context, uid string, ids []any) ([]json.RawMessage, error) {
	p := indexPath(uid) + "/documents/fetch"
	body, _ := json.Marshal(map[string]any{"ids": ids, "limit": len(ids)})
	b, err := c.do(ctx, request{method: http.MethodPost, path: p, body: body, want: http.StatusOK, timeout: c.opts.RequestTimeout})
	if err != nil {
		return nil, err
	}
	results := resultsOf(b)
	if results == nil {
		return nil, &Error{Method: http.MethodPost, Path: p, Status: http.StatusOK, Err: errors.New("the answer is not a page of documents")}
	}
	return results, nil
}

// memberOf is the raw value of doc's member key.
func memberOf(doc []byte, key string) ([]byte, bool) {
	if raw, ok := jobdef.JSONMember(doc, key); ok {
		return raw, true
	}
	var head map[string]json.RawMessage
	if json.Unmarshal(doc, &head) != nil {
		return nil, false
	}
	raw, ok := head[key]
	return raw, ok
}

// resultsOf are the documents of a page of the documents API
// ({"results": [...], ...}), split without decoding them, in one pass over
// the page (it is read for every document verify compares); nil when b is
// no such page.
func resultsOf(b []byte) []json.RawMessage {
	if elems, ok := jobdef.JSONMemberElements(b, "results"); ok {
		out := make([]json.RawMessage, len(elems))
		for i, e := range elems {
			out[i] = e
		}
		return out
	}
	var page struct {
		Results []json.RawMessage `json:"results"`
	}
	if json.Unmarshal(b, &page) != nil {
		return nil
	}
	return page.Results
}

// decodeID decodes an index id as it is in a document: a string, or an
// integer (a json.Number), as ParseIndexID takes it. Plain strings and
// numbers, the ids meilistream writes, are read without a decoder.
func decodeID(raw []byte) (any, bool) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw[1:n-1], '\\') < 0 && bytes.IndexByte(raw[1:n-1], '"') < 0 {
		return string(raw[1 : n-1]), true
	}
	if isInteger(raw) {
		return json.Number(raw), true
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}

// isInteger says whether raw is a JSON integer: an optional minus, then
// digits without a leading zero (or 0 alone).
func isInteger(raw []byte) bool {
	d := raw
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 1 && d[0] == '0' {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
