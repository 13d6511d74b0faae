package meilitest

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/andybalholm/brotli"
)

// readBody reads the request body, decompressing gzip, deflate or br
// (Content-Encoding), and enforces MaxPayloadBytes on the decompressed size
// as crates/meilisearch/src/extractors/payload.rs does.
func (s *Server) readBody(r *http.Request) ([]byte, *apiError) {
	var rd io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, errf("malformed_payload", "The payload could not be decompressed: %v", err)
		}
		rd = zr
	case "deflate":
		// HTTP's "deflate" is zlib-wrapped (RFC 9110 8.4.1.2; meilisearch-go
		// sends zlib); raw deflate is accepted too.
		zb, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxPayloadBytes+1))
		if err != nil {
			return nil, errf("malformed_payload", "The payload could not be read: %v", err)
		}
		if zr, err := zlib.NewReader(bytes.NewReader(zb)); err == nil {
			rd = zr
		} else {
			rd = flate.NewReader(bytes.NewReader(zb))
		}
	case "br":
		rd = brotli.NewReader(r.Body)
	default:
		return nil, errf("invalid_content_type", "meilitest: unsupported Content-Encoding `%s` (gzip, deflate and br only)", enc)
	}
	limit := s.opts.MaxPayloadBytes
	if rd == r.Body && r.ContentLength >= 0 {
		// Known length: one allocation of exactly that size (a growing
		// buffer would copy a 100 MB payload several times).
		if r.ContentLength > limit {
			return nil, errPayloadTooLarge(limit)
		}
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, errf("malformed_payload", "The payload could not be read: %v", err)
		}
		return buf, nil
	}
	// Unknown length (chunked, as meilisearch-go sends []byte bodies, or
	// compressed): read fixed blocks, then join them once, rather than
	// copying a growing buffer again and again.
	var blocks [][]byte
	var total int64
	for {
		blk := make([]byte, 256<<10)
		n, err := io.ReadFull(rd, blk)
		if n > 0 {
			blocks = append(blocks, blk[:n])
			total += int64(n)
			if total > limit {
				return nil, errPayloadTooLarge(limit)
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, errf("malformed_payload", "The payload could not be read: %v", err)
		}
	}
	if len(blocks) == 1 {
		return blocks[0], nil
	}
	buf := make([]byte, 0, total)
	for _, blk := range blocks {
		buf = append(buf, blk...)
	}
	return buf, nil
}

func errPayloadTooLarge(limit int64) *apiError {
	return errf("payload_too_large",
		"The provided payload reached the size limit. The maximum accepted payload size is %s.", humanBytes(limit))
}

// humanBytes formats a byte count the way byte_unit's
// get_appropriate_unit does for Meilisearch's messages ("100 MB",
// "10 MiB"): the largest unit that divides it exactly, else decimal units
// with two decimals.
func humanBytes(n int64) string {
	units := []struct {
		name string
		size int64
	}{
		{"TB", 1e12}, {"TiB", 1 << 40}, {"GB", 1e9}, {"GiB", 1 << 30},
		{"MB", 1e6}, {"MiB", 1 << 20}, {"KB", 1e3}, {"KiB", 1 << 10},
	}
	for _, u := range units {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	for _, u := range units {
		if n >= u.size && !strings.Contains(u.name, "i") {
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 2, 64) + " " + u.name
		}
	}
	return fmt.Sprintf("%d B", n)
}

// handleAddDocuments is POST (add or replace) and PUT (add or update)
// /indexes/{uid}/documents (routes/indexes/documents.rs, document_addition).
// The payload is parsed at once (so malformed payloads are refused with 400
// and receivedDocuments is known); ids, the primary key and the index are
// checked when the task is processed, and one bad document fails the whole
// task without writing anything.
func (s *Server) handleAddDocuments(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	update := r.Method == http.MethodPut
	q := r.URL.Query()
	for key := range q {
		switch key {
		case "primaryKey", "csvDelimiter", "customMetadata", "skipCreation":
		default:
			writeErr(w, errBadRequest("Unknown parameter `%s`: expected one of `primaryKey`, `csvDelimiter`, `customMetadata`, `skipCreation`", key))
			return
		}
	}
	ct := r.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	format := ""
	switch mt {
	case "application/json":
		format = "json"
	case "application/x-ndjson":
		format = "ndjson"
	case "text/csv":
		format = "csv"
	case "":
		writeErr(w, errf("missing_content_type", "A Content-Type header is missing. Accepted values for the Content-Type header are: `application/json`, `application/x-ndjson`, `text/csv`"))
		return
	default:
		writeErr(w, errf("invalid_content_type", "The Content-Type `%s` is invalid. Accepted values for the Content-Type header are: `application/json`, `application/x-ndjson`, `text/csv`", ct))
		return
	}
	delim := ','
	if q.Has("csvDelimiter") {
		if format != "csv" {
			writeErr(w, errf("invalid_content_type", "The Content-Type `%s` does not support the use of a csv delimiter. The csv delimiter can only be used with the Content-Type `text/csv`.", ct))
			return
		}
		d := q.Get("csvDelimiter")
		if len(d) != 1 || d[0] >= 0x80 {
			writeErr(w, errf("invalid_document_csv_delimiter", "Invalid value in parameter `csvDelimiter`: expected a string of one character, but found the following string of %d characters: `%s`", len([]rune(d)), d))
			return
		}
		delim = rune(d[0])
	}
	skipCreation := false
	if v := q.Get("skipCreation"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeErr(w, errBadRequest("Invalid value in parameter `skipCreation`: could not parse `%s` as a boolean, expected either `true` or `false`", v))
			return
		}
		skipCreation = b
	}
	pkParam := q.Get("primaryKey")
	body, e := s.readBody(r)
	if e != nil {
		writeErr(w, e)
		return
	}
	if len(bytes.TrimSpace(body)) == 0 {
		writeErr(w, errf("missing_payload", "A %s payload is missing.", format))
		return
	}
	var docs [][]field
	var err error
	switch format {
	case "json":
		docs, err = parseJSONDocs(body)
	case "ndjson":
		docs, err = parseNDJSONDocs(body)
	case "csv":
		docs, err = parseCSVDocs(body, delim)
	}
	if err != nil {
		writeErr(w, errf("malformed_payload", "The `%s` payload provided is malformed. `Couldn't serialize document value: %s`.", format, err))
		return
	}
	t := &task{indexUID: uid, kind: kindDocumentAdditionOrUpdate, batchable: true,
		details: []detail{{"receivedDocuments", len(docs)}, {"indexedDocuments", nil}}}
	t.batchCheck = func() *apiError {
		if e := s.checkGeo(uid, docs, pkParam); e != nil {
			return e
		}
		return s.checkIndexingDepth(uid, docs)
	}
	t.apply = func(t *task) *apiError {
		n, e := s.applyDocuments(uid, docs, pkParam, update, skipCreation)
		if e != nil {
			return e
		}
		t.setDetail("indexedDocuments", n)
		return nil
	}
	s.enqueue(w, r, t)
}

// applyDocuments validates every document, then writes them all. It runs
// with s.mu held for writing.
func (s *Server) applyDocuments(uid string, docs [][]field, pkParam string, update, skipCreation bool) (int, *apiError) {
	ix := s.indexes[uid]
	created := ix == nil
	if created {
		ix = newIndex(uid)
	}
	// Primary key: guess_primary_key.rs in crates/milli/src/update/new/indexer.
	pk := ix.primaryKey
	if pkParam != "" {
		if pk != "" && pk != pkParam {
			return 0, errf("index_primary_key_already_exists", "Index already has a primary key: `%s`.", pk)
		}
		pk = pkParam
	}
	if pk == "" && len(docs) > 0 {
		var candidates []string
		for _, f := range docs[0] {
			if strings.HasSuffix(strings.ToLower(f.name), "id") && !slices.Contains(candidates, f.name) {
				candidates = append(candidates, f.name)
			}
		}
		slices.Sort(candidates)
		switch len(candidates) {
		case 0:
			return 0, errf("index_primary_key_no_candidate_found", "The primary key inference failed as the engine did not find any field ending with `id` in its name. Please specify the primary key manually using the `primaryKey` query parameter.")
		case 1:
			pk = candidates[0]
		default:
			return 0, errf("index_primary_key_multiple_candidates_found", "The primary key inference failed as the engine found %d fields ending with `id` in their names: '%s' and '%s'. Please specify the primary key manually using the `primaryKey` query parameter.", len(candidates), candidates[0], candidates[1])
		}
	}
	ids := make([]string, len(docs))
	for i, fields := range docs {
		raw, ok := getField(fields, pk)
		if !ok {
			return 0, errf("missing_document_id", "Document doesn't have a `%s` attribute: `%s`.", pk, canonicalDoc(fields))
		}
		id, ok := parseID(raw)
		if !ok {
			return 0, errf("invalid_document_id", "Document identifier `%s` is invalid. A document identifier can be of type integer or string, only composed of alphanumeric characters (a-z A-Z 0-9), hyphens (-) and underscores (_), and can not be more than 511 bytes.", canonicalJSON(raw))
		}
		ids[i] = id
	}
	// Everything is valid: write.
	if created {
		s.indexes[uid] = ix
	}
	ix.primaryKey = pk
	ix.updatedAt = time.Now().UTC()
	n := 0
	for i, fields := range docs {
		id := ids[i]
		old := ix.docs[id]
		switch {
		case old == nil && skipCreation:
			continue
		case old == nil:
			ix.add(&doc{id: id, fields: fields})
		case update:
			old.fields = mergeFields(old.fields, fields)
		default:
			// A replaced document keeps its place (its internal docid).
			old.fields = fields
		}
		n++
	}
	return n, nil
}

func getField(fields []field, name string) ([]byte, bool) {
	for i := len(fields) - 1; i >= 0; i-- {
		if fields[i].name == name {
			return fields[i].raw, true
		}
	}
	return nil, false
}

// mergeFields is PUT's top-level merge: new values win, fields missing from
// the update are kept, object values are replaced whole (docs:
// capabilities/indexing/how_to/add_and_update_documents.mdx).
func mergeFields(old, upd []field) []field {
	out := make([]field, len(old), len(old)+len(upd))
	copy(out, old)
outer:
	for _, f := range upd {
		for i := range out {
			if out[i].name == f.name {
				out[i].raw = f.raw
				continue outer
			}
		}
		out = append(out, f)
	}
	return out
}

// canonicalJSON re-encodes a raw value the way serde_json prints it in
// Meilisearch's messages: compact, without Go's HTML escaping (the client
// sends "&" as "\u0026"; the server's message shows "&").
func canonicalJSON(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func canonicalDoc(fields []field) string {
	b := []byte{'{'}
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, f.name)
		b = append(b, ':')
		b = append(b, canonicalJSON(f.raw)...)
	}
	return string(append(b, '}'))
}

func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// parseCSVDocs reads CSV with a header line. A header "name:number" or
// "name:boolean" types its column (docs: "CSV" in add_and_update_documents);
// other columns are strings, and empty cells are null.
func parseCSVDocs(b []byte, delim rune) ([][]field, error) {
	cr := csv.NewReader(bytes.NewReader(b))
	cr.Comma = delim
	cr.FieldsPerRecord = 0
	header, err := cr.Read()
	if err != nil {
		return nil, err
	}
	type col struct{ name, typ string }
	cols := make([]col, len(header))
	for i, h := range header {
		name, typ, _ := strings.Cut(h, ":")
		switch typ {
		case "", "string":
			typ = "string"
		case "number", "boolean":
		default:
			name, typ = h, "string"
		}
		cols[i] = col{name, typ}
	}
	var out [][]field
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		fields := make([]field, len(cols))
		for i, c := range cols {
			v := rec[i]
			var raw []byte
			switch {
			case v == "":
				raw = []byte("null")
			case c.typ == "number":
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil, fmt.Errorf("invalid number %q in column %q", v, c.name)
				}
				raw = strconv.AppendFloat(nil, f, 'f', -1, 64)
			case c.typ == "boolean":
				bv, err := strconv.ParseBool(strings.TrimSpace(v))
				if err != nil {
					return nil, fmt.Errorf("invalid boolean %q in column %q", v, c.name)
				}
				raw = strconv.AppendBool(nil, bv)
			default:
				raw = appendString(nil, v)
			}
			fields[i] = field{name: c.name, raw: raw}
		}
		out = append(out, fields)
	}
}

// Document reads.

// fieldSet is a projection: nil keeps every field.
func fieldSet(fields []string) func(string) bool {
	if fields == nil || slices.Contains(fields, "*") {
		return nil
	}
	set := make(map[string]bool, len(fields))
	for _, f := range fields {
		set[f] = true
	}
	return func(name string) bool { return set[name] }
}

type browseQuery struct {
	offset, limit int
	fields        []string
	ids           []string // nil: all
	filter        any      // nil: none
	hasFilter     bool
	sort          []string // "attr:asc" criteria; nil: index order
}

func (s *Server) handleGetDocuments(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	bq := browseQuery{limit: 20}
	for key := range q {
		switch key {
		case "offset", "limit", "fields", "retrieveVectors", "ids", "filter", "sort", "useNetwork":
		default:
			writeErr(w, errBadRequest("Unknown parameter `%s`: expected one of `offset`, `limit`, `fields`, `retrieveVectors`, `ids`, `filter`, `sort`", key))
			return
		}
	}
	for _, p := range []struct {
		key string
		dst *int
	}{{"offset", &bq.offset}, {"limit", &bq.limit}} {
		if v := q.Get(p.key); v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				writeErr(w, errf("invalid_document_"+p.key, "Invalid value in parameter `%s`: could not parse `%s` as a positive integer", p.key, v))
				return
			}
			*p.dst = int(n)
		}
	}
	split := func(v string) []string {
		var out []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	if q.Has("fields") {
		bq.fields = split(q.Get("fields"))
		if bq.fields == nil {
			bq.fields = []string{}
		}
	}
	if q.Has("ids") {
		bq.ids = split(q.Get("ids"))
	}
	if q.Has("filter") {
		bq.filter, bq.hasFilter = q.Get("filter"), true
	}
	if q.Has("sort") {
		bq.sort = split(q.Get("sort"))
	}
	s.browse(w, uid, bq)
}

func (s *Server) handleFetchDocuments(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, "offset", "limit", "fields", "retrieveVectors", "ids", "filter", "sort", "useNetwork")
	if e != nil {
		writeErr(w, e)
		return
	}
	bq := browseQuery{limit: 20}
	for _, p := range []struct {
		key string
		dst *int
	}{{"offset", &bq.offset}, {"limit", &bq.limit}} {
		if raw, ok := m[p.key]; ok {
			n, err := strconv.ParseUint(string(raw), 10, 32)
			if err != nil {
				writeErr(w, errf("invalid_document_"+p.key, "Invalid value type at `.%s`: expected a positive integer, but found %s", p.key, compactJSON(raw)))
				return
			}
			*p.dst = int(n)
		}
	}
	if raw, ok := m["fields"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &bq.fields); err != nil {
			writeErr(w, errf("invalid_document_fields", "Invalid value type at `.fields`: expected an array, but found %s", compactJSON(raw)))
			return
		}
		if bq.fields == nil {
			bq.fields = []string{}
		}
	}
	if raw, ok := m["ids"]; ok && string(raw) != "null" {
		var ids []any
		if err := json.Unmarshal(raw, &ids); err != nil {
			writeErr(w, errf("invalid_document_ids", "Invalid value type at `.ids`: expected an array, but found %s", compactJSON(raw)))
			return
		}
		bq.ids = make([]string, 0, len(ids))
		for _, v := range ids {
			bq.ids = append(bq.ids, anyID(v))
		}
	}
	if raw, ok := m["filter"]; ok && string(raw) != "null" {
		bq.filter, bq.hasFilter = decodeRaw(raw), true
	}
	if raw, ok := m["sort"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &bq.sort); err != nil {
			writeErr(w, errf("invalid_document_sort", "Invalid value type at `.sort`: expected an array, but found %s", compactJSON(raw)))
			return
		}
	}
	s.browse(w, uid, bq)
}

// anyID stringifies a decoded id as Meilisearch does (v.to_string()).
func anyID(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// browse answers {"results","offset","limit","total"} in internal docid
// order, as Meilisearch does (replaced documents keep theirs; a new one
// takes the smallest a deleted one freed: index.add).
func (s *Server) browse(w http.ResponseWriter, uid string, bq browseQuery) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.indexes[uid]
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	var flt *filterExpr
	if bq.hasFilter {
		var e *apiError
		flt, e = compileFilter(bq.filter, "invalid_document_filter")
		if e == nil {
			e = flt.checkFilterable(ix, "invalid_document_filter", "")
		}
		if e != nil {
			writeErr(w, e)
			return
		}
	}
	sorts, e := parseSorts(ix, bq.sort, "invalid_document_sort", "")
	if e != nil {
		writeErr(w, e)
		return
	}
	keep := fieldSet(bq.fields)
	b := make([]byte, 0, 1024+256*min(bq.limit, 10000))
	b = append(b, `{"results":[`...)
	total, written := 0, 0
	emit := func(d *doc) {
		if total >= bq.offset && written < bq.limit {
			if written > 0 {
				b = append(b, ',')
			}
			b = appendDoc(b, d.fields, keep)
			written++
		}
		total++
	}
	switch {
	case len(sorts) > 0:
		// Sorted by the criteria (milli's recursive_sort over the sortable
		// facets), ties in index order.
		var want map[string]bool
		if bq.ids != nil {
			want = make(map[string]bool, len(bq.ids))
			for _, id := range bq.ids {
				want[id] = true
			}
		}
		var docs []*doc
		for _, d := range ix.list {
			if !d.dead && (want == nil || want[d.id]) && (flt == nil || flt.match(d)) {
				docs = append(docs, d)
			}
		}
		slices.SortStableFunc(docs, func(a, b *doc) int {
			for _, sk := range sorts {
				if c := compareSort(a, b, sk); c != 0 {
					return c
				}
			}
			return 0
		})
		for _, d := range docs {
			emit(d)
		}
	case bq.ids != nil:
		// Requested ids come back in index order, not request order.
		want := make(map[string]bool, len(bq.ids))
		for _, id := range bq.ids {
			want[id] = true
		}
		for _, d := range ix.list {
			if !d.dead && want[d.id] && (flt == nil || flt.match(d)) {
				emit(d)
			}
		}
	case flt != nil || ix.dead > 0:
		for _, d := range ix.list {
			if !d.dead && (flt == nil || flt.match(d)) {
				emit(d)
			}
		}
	default:
		// No tombstones outside a batch (compact runs after each), so
		// pages are slices.
		total = len(ix.list)
		end := min(bq.offset+bq.limit, total)
		for i := bq.offset; i < end; i++ {
			if i > bq.offset {
				b = append(b, ',')
			}
			b = appendDoc(b, ix.list[i].fields, keep)
		}
	}
	b = append(b, `],"offset":`...)
	b = strconv.AppendInt(b, int64(bq.offset), 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(bq.limit), 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, '}')
	writeRaw(w, http.StatusOK, b)
}

func (s *Server) handleGetDocument(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	var fields []string
	if q.Has("fields") {
		fields = []string{}
		for _, p := range strings.Split(q.Get("fields"), ",") {
			if p = strings.TrimSpace(p); p != "" {
				fields = append(fields, p)
			}
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.indexes[uid]
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	d := ix.docs[id]
	if d == nil {
		writeErr(w, errf("document_not_found", "Document `%s` not found.", id))
		return
	}
	writeRaw(w, http.StatusOK, appendDoc(nil, d.fields, fieldSet(fields)))
}

// Deletions.

func (s *Server) deleteIDsTask(uid string, ids []string) *task {
	t := &task{indexUID: uid, kind: kindDocumentDeletion, batchable: true,
		details: []detail{{"providedIds", len(ids)}, {"deletedDocuments", nil}, {"originalFilter", nil}}}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		n := 0
		for _, id := range ids {
			if d := ix.docs[id]; d != nil {
				ix.remove(d)
				n++
			}
		}
		ix.updatedAt = time.Now().UTC()
		t.setDetail("deletedDocuments", n)
		return nil
	}
	return t
}

func (s *Server) handleDeleteDocument(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	s.enqueue(w, r, s.deleteIDsTask(uid, []string{r.PathValue("id")}))
}

func (s *Server) handleDeleteBatch(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	var raw []any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		writeErr(w, errBadRequest("Json deserialize error: %s", jsonErrText(err)))
		return
	}
	ids := make([]string, len(raw))
	for i, v := range raw {
		ids[i] = anyID(v)
	}
	s.enqueue(w, r, s.deleteIDsTask(uid, ids))
}

func (s *Server) handleDeleteAll(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	t := &task{indexUID: uid, kind: kindDocumentDeletion, details: []detail{{"deletedDocuments", nil}}}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		t.setDetail("deletedDocuments", len(ix.docs))
		ix.clearDocs()
		ix.updatedAt = time.Now().UTC()
		return nil
	}
	s.enqueue(w, r, t)
}

// handleDeleteByFilter is POST /indexes/{uid}/documents/delete
// (delete_documents_by_filter): syntax is checked now, filterability when
// the task runs.
func (s *Server) handleDeleteByFilter(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, "filter")
	if e != nil {
		writeErr(w, e)
		return
	}
	raw, ok := m["filter"]
	if !ok {
		writeErr(w, errf("missing_document_filter", "Missing field `filter`"))
		return
	}
	fv := decodeRaw(raw)
	flt, e := compileFilter(fv, "invalid_document_filter")
	if e != nil {
		writeErr(w, e)
		return
	}
	if flt == nil {
		writeErr(w, errf("invalid_document_filter", "Sending an empty filter is forbidden."))
		return
	}
	t := &task{indexUID: uid, kind: kindDocumentDeletion,
		details: []detail{{"providedIds", 0}, {"deletedDocuments", nil}, {"originalFilter", compactJSON(raw)}}}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		if e := flt.checkFilterable(ix, "invalid_document_filter", "Index `"+uid+"`: "); e != nil {
			return e
		}
		n := 0
		for _, d := range ix.list {
			if !d.dead && flt.match(d) {
				ix.remove(d)
				n++
			}
		}
		ix.updatedAt = time.Now().UTC()
		t.setDetail("deletedDocuments", n)
		return nil
	}
	s.enqueue(w, r, t)
}

// Documents returns the documents of index uid ordered by id (integer ids
// numerically before string ids, strings in byte order), decoded with
// encoding/json (numbers are float64). It returns nil if there is no such
// index. Only processed tasks are visible.
func (s *Server) Documents(uid string) []map[string]any {
	s.mu.RLock()
	ix := s.indexes[uid]
	if ix == nil {
		s.mu.RUnlock()
		return nil
	}
	docs := make([]*doc, 0, len(ix.docs))
	for _, d := range ix.docs {
		docs = append(docs, d)
	}
	bufs := make([][]byte, len(docs))
	slices.SortFunc(docs, func(a, b *doc) int { return compareIDs(a.id, b.id) })
	for i, d := range docs {
		bufs[i] = appendDoc(nil, d.fields, nil)
	}
	s.mu.RUnlock()
	out := make([]map[string]any, len(bufs))
	for i, b := range bufs {
		_ = json.Unmarshal(b, &out[i])
	}
	return out
}

func compareIDs(a, b string) int {
	ai, aerr := strconv.ParseInt(a, 10, 64)
	bi, berr := strconv.ParseInt(b, 10, 64)
	switch {
	case aerr == nil && berr == nil:
		return cmpInt(ai, bi)
	case aerr == nil:
		return -1
	case berr == nil:
		return 1
	}
	return strings.Compare(a, b)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
