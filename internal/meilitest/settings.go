package meilitest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// settingKeys are the settings GET /indexes/{uid}/settings returns, in
// order, with their defaults for a fresh index (crates/meilisearch/tests/
// settings/get_settings.rs, get_settings).
var settingKeys = []string{
	"displayedAttributes", "searchableAttributes", "filterableAttributes", "sortableAttributes",
	"rankingRules", "stopWords", "nonSeparatorTokens", "separatorTokens", "dictionary", "synonyms",
	"distinctAttribute", "proximityPrecision", "typoTolerance", "faceting", "pagination", "embedders",
	"searchCutoffMs", "localizedAttributes", "facetSearch", "prefixSearch",
}

var settingDefaults = map[string]json.RawMessage{
	"displayedAttributes":  json.RawMessage(`["*"]`),
	"searchableAttributes": json.RawMessage(`["*"]`),
	"filterableAttributes": json.RawMessage(`[]`),
	"sortableAttributes":   json.RawMessage(`[]`),
	"rankingRules":         json.RawMessage(`["words","typo","proximity","attributeRank","sort","wordPosition","exactness"]`),
	"stopWords":            json.RawMessage(`[]`),
	"nonSeparatorTokens":   json.RawMessage(`[]`),
	"separatorTokens":      json.RawMessage(`[]`),
	"dictionary":           json.RawMessage(`[]`),
	"synonyms":             json.RawMessage(`{}`),
	"distinctAttribute":    json.RawMessage(`null`),
	"proximityPrecision":   json.RawMessage(`"byWord"`),
	"typoTolerance":        json.RawMessage(`{"enabled":true,"minWordSizeForTypos":{"oneTypo":5,"twoTypos":9},"disableOnWords":[],"disableOnAttributes":[],"disableOnNumbers":false}`),
	"faceting":             json.RawMessage(`{"maxValuesPerFacet":100,"sortFacetValuesBy":{"*":"alpha"}}`),
	"pagination":           json.RawMessage(`{"maxTotalHits":1000}`),
	"embedders":            json.RawMessage(`{}`),
	"searchCutoffMs":       json.RawMessage(`null`),
	"localizedAttributes":  json.RawMessage(`null`),
	"facetSearch":          json.RawMessage(`true`),
	"prefixSearch":         json.RawMessage(`"indexingTime"`),
}

// settings accepted by PATCH besides settingKeys (experimental ones are kept
// and returned as sent). chat and vectorStore need experimental features
// that are off by default (and cannot be turned on here): setting them is
// refused, as validate_settings in routes/indexes/settings.rs does.
var extraSettingKeys = []string{"chat", "foreignKeys", "vectorStore"}

// objectSettings are merged key by key by PATCH, as Meilisearch's Setting<T>
// sub-fields are.
var objectSettings = map[string]bool{"typoTolerance": true, "faceting": true, "pagination": true}

// stringListSettings must be arrays of strings.
var stringListSettings = map[string]string{
	"displayedAttributes":  "invalid_settings_displayed_attributes",
	"searchableAttributes": "invalid_settings_searchable_attributes",
	"sortableAttributes":   "invalid_settings_sortable_attributes",
	"rankingRules":         "invalid_settings_ranking_rules",
}

func (ix *index) setting(key string) json.RawMessage {
	if v, ok := ix.settings[key]; ok {
		return v
	}
	return settingDefaults[key]
}

// stringList returns a setting that is an array of strings.
func (ix *index) stringList(key string) []string {
	var out []string
	_ = json.Unmarshal(ix.setting(key), &out)
	return out
}

func (ix *index) appendSettings(b []byte) []byte {
	b = append(b, '{')
	for i, k := range settingKeys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = append(b, ix.setting(k)...)
	}
	for _, k := range extraSettingKeys {
		if v, ok := ix.settings[k]; ok {
			b = append(b, ',')
			b = appendString(b, k)
			b = append(b, ':')
			b = append(b, v...)
		}
	}
	return append(b, '}')
}

func (s *Server) handleGetSettings(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	s.mu.RLock()
	ix := s.indexes[uid]
	var b []byte
	if ix != nil {
		b = ix.appendSettings(nil)
	}
	s.mu.RUnlock()
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	writeRaw(w, http.StatusOK, b)
}

// handleUpdateSettings is PATCH /indexes/{uid}/settings: a partial update,
// null resetting a key to its default; it creates a missing index
// (routes/indexes/settings.rs).
func (s *Server) handleUpdateSettings(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, append(slices.Clone(settingKeys), extraSettingKeys...)...)
	if e != nil {
		writeErr(w, e)
		return
	}
	for _, k := range []string{"chat", "vectorStore"} {
		if v, ok := m[k]; ok && string(bytes.TrimSpace(v)) != "null" {
			writeErr(w, errFeatureNotEnabled(k))
			return
		}
	}
	for k, v := range m {
		if string(v) == "null" {
			continue
		}
		if code, ok := stringListSettings[k]; ok {
			var l []string
			if json.Unmarshal(v, &l) != nil {
				writeErr(w, errf(code, "Invalid value type at `.%s`: expected an array, but found %s", k, compactJSON(v)))
				return
			}
		}
		if k == "filterableAttributes" {
			var l []any
			if json.Unmarshal(v, &l) != nil {
				writeErr(w, errf("invalid_settings_filterable_attributes", "Invalid value type at `.filterableAttributes`: expected an array, but found %s", compactJSON(v)))
				return
			}
		}
	}
	t := &task{indexUID: uid, kind: kindSettingsUpdate}
	for _, k := range append(slices.Clone(settingKeys), extraSettingKeys...) {
		if v, ok := m[k]; ok {
			t.details = append(t.details, detail{k, json.RawMessage(compactJSON(v))})
		}
	}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			ix = newIndex(uid)
			s.indexes[uid] = ix
		}
		for k, v := range m {
			if string(bytes.TrimSpace(v)) == "null" {
				delete(ix.settings, k)
				continue
			}
			if objectSettings[k] {
				var cur, upd map[string]json.RawMessage
				_ = json.Unmarshal(ix.setting(k), &cur)
				if json.Unmarshal(v, &upd) == nil && cur != nil {
					for kk, vv := range upd {
						if string(vv) == "null" {
							var def map[string]json.RawMessage
							_ = json.Unmarshal(settingDefaults[k], &def)
							cur[kk] = def[kk]
						} else {
							cur[kk] = vv
						}
					}
					merged, _ := json.Marshal(cur)
					ix.settings[k] = merged
					continue
				}
			}
			ix.settings[k] = json.RawMessage(compactJSON(v))
		}
		ix.updatedAt = time.Now().UTC()
		return nil
	}
	s.enqueue(w, r, t)
}

func (s *Server) handleResetSettings(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	t := &task{indexUID: uid, kind: kindSettingsUpdate}
	for _, k := range settingKeys {
		t.details = append(t.details, detail{k, settingDefaults[k]})
	}
	t.apply = func(t *task) *apiError {
		ix := s.indexes[uid]
		if ix == nil {
			ix = newIndex(uid)
			s.indexes[uid] = ix
		}
		clear(ix.settings)
		ix.updatedAt = time.Now().UTC()
		return nil
	}
	s.enqueue(w, r, t)
}

// appendAny appends a detail value.
func appendAny(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case string:
		return appendString(b, x)
	case json.RawMessage:
		return append(b, x...)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// Stats.

func (s *Server) appendIndexStats(b []byte, ix *index) []byte {
	size := 0
	dist := map[string]int{}
	for _, d := range ix.list {
		if d.dead {
			continue
		}
		for _, f := range d.fields {
			size += len(f.name) + len(f.raw) + 4
			dist[f.name]++
		}
	}
	n := len(ix.docs)
	avg := 0
	if n > 0 {
		avg = size / n
	}
	b = append(b, `{"numberOfDocuments":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"rawDocumentDbSize":`...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, `,"avgDocumentSize":`...)
	b = strconv.AppendInt(b, int64(avg), 10)
	b = append(b, `,"isIndexing":`...)
	b = strconv.AppendBool(b, s.isIndexing(ix.uid))
	b = append(b, `,"numberOfEmbeddings":0,"numberOfEmbeddedDocuments":0,"fieldDistribution":`...)
	j, _ := json.Marshal(dist)
	b = append(b, j...)
	return append(b, '}')
}

// isIndexing reports whether a task of index uid is being processed.
func (s *Server) isIndexing(uid string) bool {
	return s.busy[uid]
}

func (s *Server) handleIndexStats(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.indexes[uid]
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	writeRaw(w, http.StatusOK, s.appendIndexStats(nil, ix))
}

// handleStats is GET /stats (routes/mod.rs, get_stats). Sizes are
// estimates of the raw JSON held, not LMDB sizes.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	uids := make([]string, 0, len(s.indexes))
	for uid := range s.indexes {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var inner []byte
	total := 0
	for i, uid := range uids {
		if i > 0 {
			inner = append(inner, ',')
		}
		inner = appendString(inner, uid)
		inner = append(inner, ':')
		start := len(inner)
		inner = s.appendIndexStats(inner, s.indexes[uid])
		var st struct {
			Raw int `json:"rawDocumentDbSize"`
		}
		_ = json.Unmarshal(inner[start:], &st)
		total += st.Raw
	}
	b := []byte(`{"databaseSize":`)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"usedDatabaseSize":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"lastUpdate":`...)
	b = appendTime(b, s.lastUpdate)
	b = append(b, `,"indexes":{`...)
	b = append(b, inner...)
	b = append(b, "}}"...)
	writeRaw(w, http.StatusOK, b)
}

// errFeatureNotEnabled is validate_settings' refusal of a setting whose
// experimental feature is off (crates/index-scheduler/src/features.rs:
// check_chat_completions, check_vector_store_setting; the message is
// FeatureNotEnabledError's "{action} requires enabling the `{feature}`
// experimental feature. See {link}").
func errFeatureNotEnabled(key string) *apiError {
	feature, link := "chat completions", "https://github.com/orgs/meilisearch/discussions/835"
	if key == "vectorStore" {
		feature, link = "vector_store_setting", "https://github.com/orgs/meilisearch/discussions/860"
	}
	return errf("feature_not_enabled", "setting `%s` in the index settings requires enabling the `%s` experimental feature. See %s", key, feature, link)
}
