package meili

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

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
//
// A primary key comes back as it was written (the index id meilistream
// sent), so it is matched by its JSON text first, without decoding it;
// one in another form (the string "5" for the integer 5) is parsed into
// its source _id and matched by that _id's index id. Verify reads every
// document of a collection back, so this is per-document work.
func (s *Sink) Fetch(ctx context.Context, ids []bson.RawValue) ([][]byte, error) {
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	req := fetchRequest{at: make(map[string]int, len(ids))}
	body := append(make([]byte, 0, 32+len(ids)*28), `{"ids":[`...)
	for i, id := range ids {
		body = req.add(body, id, i) // an id without an index id was never written: nothing to read back
	}
	if len(req.at) == 0 {
		return out, nil
	}
	body = append(body[:len(body)-1], `],"limit":`...) // the last id's comma
	body = append(strconv.AppendInt(body, int64(len(req.at)), 10), '}')
	docs, err := s.api.fetchDocs(ctx, s.uid, body)
	if err != nil {
		if isCode(err, "index_not_found") {
			return out, nil
		}
		return nil, s.classify(err, "read documents back from index "+s.uid)
	}
	var text []byte
	for _, d := range docs {
		pkRaw, ok := memberOf(d, s.pk)
		if !ok {
			continue
		}
		i, ok := req.at[string(pkRaw)]
		if !ok {
			v, ok := decodeID(pkRaw)
			if !ok {
				continue
			}
			id, err := jobdef.ParseIndexID(v)
			if err != nil {
				continue
			}
			if text, err = appendIndexID(text[:0], id); err != nil {
				continue
			}
			if i, ok = req.at[string(text)]; !ok {
				continue
			}
		}
		for ; i >= 0; i = req.next(i) {
			out[i] = d
		}
	}
	return out, nil
}

// fetchRequest is where each id of a read back is among the ids asked
// for: at maps an index id's JSON text to its first place, dup the places
// of an id asked for more than once (rare: nil until one is).
type fetchRequest struct {
	at  map[string]int
	dup map[int]int // a place -> the next place of the same id
}

// add appends id's index id and a comma to body, unless it was asked for
// already or has none, and records place i.
func (r *fetchRequest) add(body []byte, id bson.RawValue, i int) []byte {
	n := len(body)
	body, err := appendIndexID(body, id)
	if err != nil {
		return body[:n]
	}
	text := string(body[n:])
	if first, ok := r.at[text]; ok {
		if r.dup == nil {
			r.dup = map[int]int{}
		}
		last := first
		for next, ok := r.dup[last]; ok; next, ok = r.dup[last] {
			last = next
		}
		r.dup[last] = i
		return body[:n]
	}
	r.at[text] = i
	return append(body, ',')
}

// next is the place after i of the same id, -1 after the last.
func (r *fetchRequest) next(i int) int {
	if n, ok := r.dup[i]; ok {
		return n
	}
	return -1
}

// appendIndexID appends the JSON of id's index id (jobdef.IndexID: a
// string in Meilisearch's id alphabet, or an integer).
func appendIndexID(b []byte, id bson.RawValue) ([]byte, error) {
	v, err := jobdef.IndexID(id)
	if err != nil {
		return b, err
	}
	switch v := v.(type) {
	case string:
		return jobdef.AppendJSONString(b, v), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	}
	raw, err := json.Marshal(v)
	return append(b, raw...), err
}

func (c guarded) fetchDocs(ctx context.Context, uid string, body []byte) ([]json.RawMessage, error) {
	p := indexPath(uid) + "/documents/fetch"
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
