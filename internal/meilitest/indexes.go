package meilitest

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// index is one index: its documents (by id, and in insertion order), primary
// key and settings. Guarded by Server.mu.
type index struct {
	uid        string
	primaryKey string // "" while not set
	createdAt  time.Time
	updatedAt  time.Time
	docs       map[string]*doc
	list       []*doc // internal docid order; holds deleted docs until compact
	dead       int    // deleted docs still in list
	settings   map[string]json.RawMessage
	// free are the docids deleted documents gave back (ascending), next
	// the one after the highest ever given: a new document takes the
	// smallest free one, as milli's AvailableIds gives them
	// (crates/milli/src/update/available_ids.rs: the ids under the
	// highest one not in documents_ids, then those above it), computed
	// from the index as it stands before a batch, so ids freed by a
	// batch are given again from the next one on (compact).
	free []uint32
	next uint32
}

// add appends d to the index with the docid Meilisearch would give it,
// at its place in docid order.
func (ix *index) add(d *doc) {
	if len(ix.free) > 0 {
		d.docid, ix.free = ix.free[0], ix.free[1:]
	} else {
		d.docid = ix.next
		ix.next++
	}
	ix.docs[d.id] = d
	i, _ := slices.BinarySearchFunc(ix.list, d.docid, func(e *doc, id uint32) int {
		return cmp.Compare(e.docid, id)
	})
	ix.list = slices.Insert(ix.list, i, d)
}

// clearDocs empties the index: milli's ClearDocuments empties
// documents_ids, so docids start again from 0.
func (ix *index) clearDocs() {
	ix.docs = map[string]*doc{}
	ix.list = nil
	ix.dead = 0
	ix.free, ix.next = nil, 0
}

func newIndex(uid string) *index {
	now := time.Now().UTC()
	return &index{uid: uid, createdAt: now, updatedAt: now, docs: map[string]*doc{},
		settings: map[string]json.RawMessage{}}
}

func (ix *index) remove(d *doc) {
	d.dead = true
	delete(ix.docs, d.id)
	ix.dead++
}

// compact drops deleted documents from the list and frees their docids.
func (ix *index) compact() {
	if ix.dead == 0 {
		return
	}
	live := ix.list[:0]
	for _, d := range ix.list {
		if !d.dead {
			live = append(live, d)
		} else {
			ix.free = append(ix.free, d.docid)
		}
	}
	slices.Sort(ix.free)
	clear(ix.list[len(live):])
	ix.list = live
	ix.dead = 0
}

// validIndexUID follows crates/meilisearch-types/src/index_uid.rs: 1 to 400
// bytes of [A-Za-z0-9_-].
func validIndexUID(uid string) bool {
	if len(uid) == 0 || len(uid) > 400 {
		return false
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func errInvalidIndexUID(uid, at string) *apiError {
	prefix := ""
	if at != "" {
		prefix = "Invalid value at `" + at + "`: "
	}
	return errf("invalid_index_uid", "%s`%s` is not a valid index uid. Index uid can be an integer or a string containing only alphanumeric characters, hyphens (-) and underscores (_), and can not be more than 512 bytes.", prefix, uid)
}

// pathIndex returns the {uid} path value, or writes invalid_index_uid.
func pathIndex(w http.ResponseWriter, r *http.Request) (string, bool) {
	uid := r.PathValue("uid")
	if !validIndexUID(uid) {
		writeErr(w, errInvalidIndexUID(uid, ""))
		return "", false
	}
	return uid, true
}

func appendIndex(b []byte, ix *index) []byte {
	b = append(b, `{"uid":`...)
	b = appendString(b, ix.uid)
	b = append(b, `,"createdAt":`...)
	b = appendTime(b, ix.createdAt)
	b = append(b, `,"updatedAt":`...)
	b = appendTime(b, ix.updatedAt)
	b = append(b, `,"primaryKey":`...)
	if ix.primaryKey == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, ix.primaryKey)
	}
	return append(b, '}')
}

func (s *Server) handleGetIndex(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	s.mu.RLock()
	ix := s.indexes[uid]
	var b []byte
	if ix != nil {
		b = appendIndex(nil, ix)
	}
	s.mu.RUnlock()
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	writeRaw(w, http.StatusOK, b)
}

// handleListIndexes answers {"results","offset","limit","total"}, indexes
// sorted by uid as Meilisearch lists them.
func (s *Server) handleListIndexes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit := 0, 20
	for key := range q {
		if key != "offset" && key != "limit" {
			writeErr(w, errBadRequest("Unknown parameter `%s`: expected one of `offset`, `limit`", key))
			return
		}
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeErr(w, errf("invalid_index_offset", "Invalid value in parameter `offset`: could not parse `%s` as a positive integer", v))
			return
		}
		offset = int(n)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeErr(w, errf("invalid_index_limit", "Invalid value in parameter `limit`: could not parse `%s` as a positive integer", v))
			return
		}
		limit = int(n)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	uids := make([]string, 0, len(s.indexes))
	for uid := range s.indexes {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	b := []byte(`{"results":[`)
	for i := offset; i < len(uids) && i < offset+limit; i++ {
		if i > offset {
			b = append(b, ',')
		}
		b = appendIndex(b, s.indexes[uids[i]])
	}
	b = append(b, `],"offset":`...)
	b = strconv.AppendInt(b, int64(offset), 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(limit), 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(len(uids)), 10)
	b = append(b, '}')
	writeRaw(w, http.StatusOK, b)
}

// readJSONBody reads a JSON body (for routes other than document payloads)
// and checks its Content-Type, answering the error itself.
func (s *Server) readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		// actix's JsonConfig error handler in crates/meilisearch/src/lib.rs.
		writeErr(w, errf("missing_content_type", "A Content-Type header is missing. Accepted values for the Content-Type header are: `application/json`"))
		return nil, false
	}
	if mt, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(strings.ToLower(mt)) != "application/json" {
		writeErr(w, errf("invalid_content_type", "The Content-Type `%s` is invalid. Accepted values for the Content-Type header are: `application/json`", ct))
		return nil, false
	}
	b, e := s.readBody(r)
	if e != nil {
		writeErr(w, e)
		return nil, false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		writeErr(w, errf("missing_payload", "A json payload is missing."))
		return nil, false
	}
	return b, true
}

// decodeObject decodes a JSON object into its fields, refusing unknown keys
// with bad_request as deserr's deny_unknown_fields does.
func decodeObject(b []byte, allowed ...string) (map[string]json.RawMessage, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errBadRequest("Json deserialize error: %s", jsonErrText(err))
	}
	if m == nil {
		return nil, errBadRequest("Json deserialize error: invalid type: null, expected a map")
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			return nil, errBadRequest("Unknown field `%s`: expected one of %s", k, quoteList(allowed))
		}
	}
	return m, nil
}

func jsonErrText(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

func (s *Server) handleCreateIndex(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, "uid", "primaryKey")
	if e != nil {
		writeErr(w, e)
		return
	}
	var uid string
	if raw, ok := m["uid"]; !ok {
		writeErr(w, errf("missing_index_uid", "Missing field `uid`"))
		return
	} else if json.Unmarshal(raw, &uid) != nil || !validIndexUID(uid) {
		writeErr(w, errInvalidIndexUID(strings.Trim(string(raw), `"`), ".uid"))
		return
	}
	var pk *string
	if raw, ok := m["primaryKey"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &pk) != nil {
			writeErr(w, errf("invalid_index_primary_key", "Invalid value type at `.primaryKey`: expected a string, but found %s", string(raw)))
			return
		}
	}
	t := &task{indexUID: uid, kind: kindIndexCreation}
	if pk != nil {
		t.details = []detail{{"primaryKey", *pk}}
	} else {
		t.details = []detail{{"primaryKey", nil}}
	}
	t.apply = func(t *task) *apiError {
		if s.indexes[uid] != nil {
			return errf("index_already_exists", "Index `%s` already exists.", uid)
		}
		ix := newIndex(uid)
		if pk != nil {
			ix.primaryKey = *pk
		}
		s.indexes[uid] = ix
		return nil
	}
	s.enqueue(w, r, t)
}

// handleUpdateIndex changes the primary key ({"primaryKey"}) and/or renames
// the index ({"uid"}, Meilisearch >= 1.18).
func (s *Server) handleUpdateIndex(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, "primaryKey", "uid")
	if e != nil {
		writeErr(w, e)
		return
	}
	var pk *string
	if raw, ok := m["primaryKey"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &pk) != nil {
			writeErr(w, errf("invalid_index_primary_key", "Invalid value type at `.primaryKey`: expected a string, but found %s", string(raw)))
			return
		}
	}
	newUID := ""
	if raw, ok := m["uid"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &newUID) != nil || !validIndexUID(newUID) {
			writeErr(w, errInvalidIndexUID(strings.Trim(string(raw), `"`), ".uid"))
			return
		}
	}
	t := &task{indexUID: uid, kind: kindIndexUpdate}
	if pk != nil {
		t.details = []detail{{"primaryKey", *pk}}
	} else {
		t.details = []detail{{"primaryKey", nil}}
	}
	if newUID != "" {
		t.details = append(t.details, detail{"oldIndexUid", uid}, detail{"newIndexUid", newUID})
	}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		if pk != nil && *pk != ix.primaryKey {
			if ix.primaryKey != "" && len(ix.docs) > 0 {
				return errf("index_primary_key_already_exists", "Index `%s`: Index already has a primary key: `%s`.", uid, ix.primaryKey)
			}
		}
		if newUID != "" && newUID != uid && s.indexes[newUID] != nil {
			return errf("index_already_exists", "Index `%s` already exists.", newUID)
		}
		if pk != nil {
			ix.primaryKey = *pk
		}
		ix.updatedAt = time.Now().UTC()
		if newUID != "" && newUID != uid {
			delete(s.indexes, uid)
			ix.uid = newUID
			s.indexes[newUID] = ix
			s.renameTasks(map[string]string{uid: newUID}, t.uid)
		}
		return nil
	}
	s.enqueue(w, r, t)
}

func (s *Server) handleDeleteIndex(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	t := &task{indexUID: uid, kind: kindIndexDeletion, details: []detail{{"deletedDocuments", nil}}}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		delete(s.indexes, uid)
		t.setDetail("deletedDocuments", len(ix.docs))
		return nil
	}
	s.enqueue(w, r, t)
}

// renameTasks rewrites the indexUid of tasks before uid `before`, as
// apply_index_swap does (crates/index-scheduler/src/scheduler/process_batch.rs).
func (s *Server) renameTasks(names map[string]string, before int64) {
	for _, t := range s.tasks[:before] {
		if t == nil || t.global {
			continue
		}
		if n, ok := names[t.indexUID]; ok {
			t.indexUID = n
		}
	}
}

// handleSwap implements POST /swap-indexes (routes/swap_indexes.rs): an
// array of {"indexes":[a,b],"rename":bool}, applied atomically by one task.
func (s *Server) handleSwap(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		writeErr(w, errBadRequest("Invalid value type: expected an array, but found %s", describe(strings.TrimSpace(string(body))[0])))
		return
	}
	type swap struct {
		a, b   string
		rename bool
	}
	var swaps []swap
	seen := map[string]bool{}
	var dup []string
	for i, raw := range items {
		m, e := decodeObject(raw, "indexes", "rename")
		if e != nil {
			writeErr(w, e)
			return
		}
		rawIdx, ok := m["indexes"]
		if !ok {
			writeErr(w, errf("missing_swap_indexes", "Missing field `indexes` inside `.[%d]`", i))
			return
		}
		var uids []string
		if err := json.Unmarshal(rawIdx, &uids); err != nil || len(uids) != 2 {
			writeErr(w, errf("invalid_swap_indexes", "Invalid value at `.[%d].indexes`: Two indexes must be given for each swap. The list `%s` contains %d indexes.", i, string(rawIdx), len(uids)))
			return
		}
		for _, u := range uids {
			if !validIndexUID(u) {
				writeErr(w, errInvalidIndexUID(u, ".["+strconv.Itoa(i)+"].indexes"))
				return
			}
			if seen[u] && !slices.Contains(dup, u) {
				dup = append(dup, u)
			}
			seen[u] = true
		}
		var rename bool
		if raw, ok := m["rename"]; ok {
			if json.Unmarshal(raw, &rename) != nil {
				writeErr(w, errf("invalid_swap_rename", "Invalid value type at `.[%d].rename`: expected a boolean, but found %s", i, string(raw)))
				return
			}
		}
		swaps = append(swaps, swap{uids[0], uids[1], rename})
	}
	if len(dup) > 0 {
		// crates/index-scheduler/src/queue/mod.rs checks this at registration.
		writeErr(w, errf("invalid_swap_duplicate_index_found", "Indexes must be declared only once during a swap. %s was specified several times.", quoteList(dup)))
		return
	}
	detailSwaps := make([]any, len(swaps))
	for i, sw := range swaps {
		detailSwaps[i] = map[string]any{"indexes": []string{sw.a, sw.b}, "rename": sw.rename}
	}
	t := &task{global: true, kind: kindIndexSwap, details: []detail{{"swaps", detailSwaps}}}
	t.apply = func(t *task) *apiError {
		// Check everything first: the swaps apply all together or not at
		// all. As process_batch.rs Batch::IndexSwap: every missing index
		// (a BTreeSet, so sorted) is reported before any rename target
		// that exists.
		var missing []string
		type pair struct{ a, b string }
		var present []pair
		for _, sw := range swaps {
			if s.indexes[sw.a] == nil {
				missing = append(missing, sw.a)
			}
			switch exists := s.indexes[sw.b] != nil; {
			case exists && sw.rename:
				present = append(present, pair{sw.a, sw.b})
			case !exists && !sw.rename:
				missing = append(missing, sw.b)
			}
		}
		slices.Sort(missing)
		missing = slices.Compact(missing)
		switch len(missing) {
		case 0:
		case 1:
			return errIndexNotFound(missing[0])
		default:
			q := make([]string, len(missing))
			for i, u := range missing {
				q[i] = "`" + u + "`"
			}
			return errf("index_not_found", "Indexes %s not found.", strings.Join(q, ", "))
		}
		slices.SortFunc(present, func(x, y pair) int {
			if c := strings.Compare(x.a, y.a); c != 0 {
				return c
			}
			return strings.Compare(x.b, y.b)
		})
		switch len(present) {
		case 0:
		case 1:
			sw := present[0]
			return errf("index_already_exists", "Cannot rename `%s` to `%s` as the index already exists. Hint: You can remove `%s` first and then do your remove.", sw.a, sw.b, sw.b)
		default:
			// SwapIndexesFoundDuringRename: its text is not in the
			// sources read; the code is index_already_exists.
			q := make([]string, len(present))
			for i, p := range present {
				q[i] = "`" + p.b + "`"
			}
			return errf("index_already_exists", "Cannot rename indexes as the indexes %s already exist.", strings.Join(q, ", "))
		}
		names := map[string]string{}
		now := time.Now().UTC()
		for _, sw := range swaps {
			a, b := s.indexes[sw.a], s.indexes[sw.b]
			if sw.rename {
				delete(s.indexes, sw.a)
				a.uid = sw.b
				a.updatedAt = now
				s.indexes[sw.b] = a
				names[sw.a] = sw.b
				continue
			}
			a.uid, b.uid = sw.b, sw.a
			a.updatedAt, b.updatedAt = now, now
			s.indexes[sw.a], s.indexes[sw.b] = b, a
			names[sw.a], names[sw.b] = sw.b, sw.a
		}
		s.renameTasks(names, t.uid)
		return nil
	}
	s.enqueue(w, r, t)
}

// handleCompactIndex is POST /indexes/{uid}/compact (Meilisearch 1.23+,
// routes/indexes/compact.rs): an indexCompaction task whose details give
// the sizes before and after. Nothing here fragments, so both are the
// index's raw document size; a missing index fails the task.
func (s *Server) handleCompactIndex(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	t := &task{indexUID: uid, kind: kindIndexCompaction,
		details: []detail{{"preCompactionSize", nil}, {"postCompactionSize", nil}}}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			return errIndexNotFound(uid)
		}
		var st struct {
			Raw int64 `json:"rawDocumentDbSize"`
		}
		_ = json.Unmarshal(s.appendIndexStats(nil, ix), &st)
		t.setDetail("preCompactionSize", humanBytes(st.Raw))
		t.setDetail("postCompactionSize", humanBytes(st.Raw))
		return nil
	}
	s.enqueue(w, r, t)
}
