package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// verifyResult is how one document compares.
type verifyResult struct {
	kind  DriftKind
	field string // the first differing field of a stale document
	err   bool   // the transform failed on it: an error, never drift
}

// fetchChunk reads the documents of items back from the destination
// (checked: the documents compared before them, for messages).
func (v *verifier) fetchChunk(ctx context.Context, items []Item, checked int64) ([][]byte, error) {
	ids := make([]bson.RawValue, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	// A read back answers with whole documents: as many at once as make
	// about verifyFetchBytes of source, so an answer of large documents
	// stays well under what the sink reads into memory.
	have := make([][]byte, 0, len(items))
	for lo := 0; lo < len(items); {
		hi, size := lo, 0
		for hi < len(items) && (hi == lo || size+len(items[hi].Doc) <= verifyFetchBytes) {
			size += len(items[hi].Doc)
			hi++
		}
		part, err := v.fetch(ctx, ids[lo:hi], "read documents back from the destination", checked)
		if err != nil {
			return nil, err
		}
		have = append(have, part...)
		lo = hi
	}
	return have, nil
}

// judge transforms items (the reindex's path: lookups, then the
// transform; an item without a document wants none) and compares each
// with have[i], the destination's.
func (v *verifier) judge(ctx context.Context, items []Item, have [][]byte) ([]verifyResult, error) {
	lk, err := v.e.lookups(ctx, v.jc, items)
	if err != nil {
		return nil, errsFor(v.job.Name, err, "resolve the lookups of documents to verify")
	}
	writes, _, bad, err := Transform(ctx, v.job, items, lk, true)
	if err != nil {
		return nil, errsFor(v.job.Name, err, "transform documents to verify")
	}
	var failed map[string]bool
	if len(bad) > 0 {
		failed = make(map[string]bool, len(bad))
		for _, b := range bad {
			failed[jobdef.IDKey(b.ID)] = true
		}
	}
	out := make([]verifyResult, len(items))
	for i := range items {
		if failed != nil && failed[jobdef.IDKey(items[i].ID)] {
			out[i].err = true
			continue
		}
		out[i] = v.diff(writes[i], have[i])
	}
	return out, nil
}

// diff compares what the transform wants with what the destination has.
func (v *verifier) diff(want sink.Write, have []byte) verifyResult {
	switch {
	case want.Delete && have == nil:
		return verifyResult{}
	case want.Delete:
		return verifyResult{kind: DriftExtra}
	case have == nil:
		return verifyResult{kind: DriftMissing}
	}
	var field string
	var same bool
	if v.job.Kind == jobdef.Mirror {
		field, same = diffBSON(want, have)
	} else {
		field, same = diffJSON(want.Doc, have)
	}
	if same {
		return verifyResult{}
	}
	return verifyResult{kind: DriftStale, field: field}
}

// diffJSON compares a search document as Meilisearch returns it: key
// order irrelevant, numbers by value (Meilisearch keeps a number's JSON
// form, an integer or a float, and 1 and 1.0 are one value to a search),
// the primary key included. _vectors is left out: the documents API
// returns it only when asked (retrieveVectors), and then in its own form.
// Members whose bytes are the same are the same; only the others are
// decoded.
func diffJSON(want any, have []byte) (string, bool) {
	var wb []byte
	switch d := want.(type) {
	case json.RawMessage:
		wb = d
	case []byte:
		wb = d
	default:
		b, err := jobdef.AppendJSON(nil, d)
		if err != nil {
			return "", false
		}
		wb = b
	}
	if bytes.Equal(wb, have) {
		return "", true
	}
	wf, ok1 := jobdef.JSONFields(wb)
	hf, ok2 := jobdef.JSONFields(have)
	if !ok1 || !ok2 {
		return diffDecoded(wb, have)
	}
	hv := make(map[string][]byte, len(hf))
	for _, f := range hf {
		hv[f.Key] = f.Raw
	}
	seen := make(map[string]bool, len(wf))
	for _, f := range wf {
		seen[f.Key] = true
		if f.Key == "_vectors" {
			continue
		}
		h, ok := hv[f.Key]
		if !ok {
			return f.Key, false
		}
		if bytes.Equal(f.Raw, h) {
			continue
		}
		var w, hd any
		if decodeJSON(f.Raw, &w) != nil || decodeJSON(h, &hd) != nil {
			return f.Key, false
		}
		if field, same := diffValues(f.Key, w, hd); !same {
			return field, false
		}
	}
	for _, f := range hf {
		if !seen[f.Key] && f.Key != "_vectors" {
			return f.Key, false
		}
	}
	return "", true
}

// diffDecoded is diffJSON by decoding both documents whole.
func diffDecoded(wb, have []byte) (string, bool) {
	var w, h map[string]any
	if decodeJSON(wb, &w) != nil || decodeJSON(have, &h) != nil {
		return "", false
	}
	delete(w, "_vectors")
	delete(h, "_vectors")
	return diffObjects("", w, h, topKeys(wb))
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// diffObjects returns the first differing field (dotted path) of two JSON
// objects: in order first (when known), then the others sorted.
func diffObjects(prefix string, w, h map[string]any, order []string) (string, bool) {
	keys := make([]string, 0, len(w)+len(h))
	listed := make(map[string]bool, len(order))
	for _, k := range order {
		if !listed[k] {
			listed[k] = true
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range w {
		if !listed[k] {
			rest = append(rest, k)
		}
	}
	for k := range h {
		if _, ok := w[k]; !ok && !listed[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	for _, k := range keys {
		wv, wok := w[k]
		hv, hok := h[k]
		path := prefix + k
		if wok != hok {
			return path, false
		}
		if f, same := diffValues(path, wv, hv); !same {
			return f, false
		}
	}
	return "", true
}

func diffValues(path string, w, h any) (string, bool) {
	switch wv := w.(type) {
	case map[string]any:
		hv, ok := h.(map[string]any)
		if !ok {
			return path, false
		}
		return diffObjects(path+".", wv, hv, nil)
	case []any:
		hv, ok := h.([]any)
		if !ok || len(hv) != len(wv) {
			return path, false
		}
		for i := range wv {
			if _, same := diffValues(path, wv[i], hv[i]); !same {
				return path, false
			}
		}
		return "", true
	case json.Number:
		hv, ok := h.(json.Number)
		if !ok || !sameNumber(wv, hv) {
			return path, false
		}
		return "", true
	default:
		if w != h {
			return path, false
		}
		return "", true
	}
}

// sameNumber compares two JSON numbers by value, exactly (big.Float:
// integers beyond 2^53 included).
func sameNumber(a, b json.Number) bool {
	if a == b {
		return true
	}
	x, _, err1 := big.ParseFloat(string(a), 10, 256, big.ToNearestEven)
	y, _, err2 := big.ParseFloat(string(b), 10, 256, big.ToNearestEven)
	return err1 == nil && err2 == nil && x.Cmp(y) == 0
}

// diffBSON compares a mirror's document exactly: every top-level field's
// BSON type and bytes (an int64 is not a double, nor 1 the same as 1.0),
// in any order at the top level (the replica puts _id first), nested
// documents byte for byte. A document without _id has the source's.
func diffBSON(want sink.Write, have []byte) (string, bool) {
	wd, ok := want.Doc.(bson.Raw)
	if !ok {
		if b, isBytes := want.Doc.([]byte); isBytes {
			wd = b
		}
	}
	if bytes.Equal(wd, have) {
		return "", true
	}
	we, err1 := wd.Elements()
	he, err2 := bson.Raw(have).Elements()
	if err1 != nil || err2 != nil {
		return "", false
	}
	hv := make(map[string]bson.RawValue, len(he))
	for _, e := range he {
		hv[e.Key()] = e.Value()
	}
	seen := make(map[string]bool, len(we))
	hasID := false
	for _, e := range we {
		k := e.Key()
		seen[k] = true
		hasID = hasID || k == "_id"
		h, ok := hv[k]
		if !ok || !h.Equal(e.Value()) {
			return k, false
		}
	}
	if !hasID {
		seen["_id"] = true
		if h, ok := hv["_id"]; !ok || !h.Equal(want.SourceID) {
			return "_id", false
		}
	}
	for _, e := range he {
		if !seen[e.Key()] {
			return e.Key(), false
		}
	}
	return "", true
}

// fetch reads ids back from the destination, trying a failed read again a
// few times (with the engine's backoff) before it gives up saying what it
// was doing.
func (v *verifier) fetch(ctx context.Context, ids []bson.RawValue, what string, checked int64) ([][]byte, error) {
	for attempt := 0; ; attempt++ {
		have, err := v.dst.Fetch(ctx, ids)
		if err == nil {
			return have, nil
		}
		if ctx.Err() != nil || attempt >= 3 || errs.CodeOf(err) != errs.Failed && errs.CodeOf(err) != "" {
			return nil, v.destErr(err, what, checked)
		}
		v.log.Warn("reading the destination failed; trying again", "error", err, "attempt", attempt+1)
		if err := v.e.wait(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// topKeys are the keys of a JSON object in their order (the transform's:
// the first differing field is the first in its output).
func topKeys(b []byte) []string {
	fields, _ := jobdef.JSONFields(b)
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	return keys
}

// fetchIDs is fetch for ids alone (a re-check's): documents of unknown
// size, verifyFetchIDs at a time.
func (v *verifier) fetchIDs(ctx context.Context, ids []bson.RawValue, what string) ([][]byte, error) {
	out := make([][]byte, 0, len(ids))
	for lo := 0; lo < len(ids); lo += verifyFetchIDs {
		part, err := v.fetch(ctx, ids[lo:min(lo+verifyFetchIDs, len(ids))], what, v.rep.Checked)
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
	}
	return out, nil
}
