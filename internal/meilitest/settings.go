package meilitest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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

// chatDefault is an index's chat setting before it is set
// (crates/meilisearch/tests/settings/get_settings.rs, the chat default).
const chatDefault = `{"description":"","documentTemplate":"{% for field in fields %}{% if field.is_searchable and field.value != nil %}{{ field.name }}: {{ field.value }}\n{% endif %}{% endfor %}","documentTemplateMaxBytes":400,"searchParameters":{}}`

func init() {
	settingDefaults["chat"] = json.RawMessage(chatDefault)
	settingDefaults["foreignKeys"] = json.RawMessage(`[]`)
}

// extraSettingKeys are settings behind experimental features: GET
// /settings shows them only while their feature is on, and setting them
// with it off is refused (routes/indexes/settings.rs get_all and
// validate_settings).
var extraSettingKeys = []string{"chat", "foreignKeys"}

var settingFeature = map[string]string{"chat": "chatCompletions", "foreignKeys": "foreignKeys"}

// objectSettings are merged key by key by PATCH, as Meilisearch's Setting<T>
// sub-fields are.
var objectSettings = map[string]bool{"typoTolerance": true, "faceting": true, "pagination": true, "chat": true}

// stringListSettings must be arrays of strings.
var stringListSettings = map[string]string{
	"displayedAttributes":  "invalid_settings_displayed_attributes",
	"searchableAttributes": "invalid_settings_searchable_attributes",
	"sortableAttributes":   "invalid_settings_sortable_attributes",
	"rankingRules":         "invalid_settings_ranking_rules",
	"stopWords":            "invalid_settings_stop_words",
	"nonSeparatorTokens":   "invalid_settings_non_separator_tokens",
	"separatorTokens":      "invalid_settings_separator_tokens",
	"dictionary":           "invalid_settings_dictionary",
}

// settingRoutes are the per-setting routes /indexes/{uid}/settings/<route>
// with the verb that updates each (make_setting_routes! in
// routes/indexes/settings.rs): PUT replaces, PATCH merges an object's keys.
var settingRoutes = []struct{ route, key, verb string }{
	{"filterable-attributes", "filterableAttributes", "PUT"},
	{"sortable-attributes", "sortableAttributes", "PUT"},
	{"displayed-attributes", "displayedAttributes", "PUT"},
	{"typo-tolerance", "typoTolerance", "PATCH"},
	{"searchable-attributes", "searchableAttributes", "PUT"},
	{"stop-words", "stopWords", "PUT"},
	{"non-separator-tokens", "nonSeparatorTokens", "PUT"},
	{"separator-tokens", "separatorTokens", "PUT"},
	{"dictionary", "dictionary", "PUT"},
	{"synonyms", "synonyms", "PUT"},
	{"distinct-attribute", "distinctAttribute", "PUT"},
	{"proximity-precision", "proximityPrecision", "PUT"},
	{"localized-attributes", "localizedAttributes", "PUT"},
	{"ranking-rules", "rankingRules", "PUT"},
	{"faceting", "faceting", "PATCH"},
	{"pagination", "pagination", "PATCH"},
	{"embedders", "embedders", "PATCH"},
	{"search-cutoff-ms", "searchCutoffMs", "PUT"},
	{"facet-search", "facetSearch", "PUT"},
	{"prefix-search", "prefixSearch", "PUT"},
	{"chat", "chat", "PATCH"},
	{"foreign-keys", "foreignKeys", "PUT"},
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

// appendSettings renders the settings object in the order of Meilisearch's
// Settings struct (crates/meilisearch-types/src/settings.rs): foreignKeys
// after sortableAttributes and chat last, each only while its experimental
// feature is on.
func (ix *index) appendSettings(b []byte, f *features) []byte {
	b = append(b, '{')
	add := func(k string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = append(b, ix.settingView(k)...)
	}
	for _, k := range settingKeys {
		add(k)
		if k == "sortableAttributes" && f.enabled("foreignKeys") {
			add("foreignKeys")
		}
	}
	if f.enabled("chatCompletions") {
		add("chat")
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
		b = ix.appendSettings(nil, &s.features)
	}
	s.mu.RUnlock()
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	writeRaw(w, http.StatusOK, b)
}

// checkSetting checks the type of a new setting value (not null) as
// deserr does for each key of Settings, with the key's error code.
func checkSetting(k string, v json.RawMessage) *apiError {
	code := "invalid_settings_" + camelToSnake(k)
	switch k {
	case "chat":
		code = "invalid_settings_index_chat"
	case "distinctAttribute", "proximityPrecision", "prefixSearch":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return errf(code, "Invalid value type at `.%s`: expected a string, but found %s", k, compactJSON(v))
		}
		return nil
	case "searchCutoffMs":
		var n uint64
		if json.Unmarshal(v, &n) != nil {
			return errf(code, "Invalid value type at `.%s`: expected a positive integer, but found %s", k, compactJSON(v))
		}
		return nil
	case "facetSearch":
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return errf(code, "Invalid value type at `.%s`: expected a boolean, but found %s", k, compactJSON(v))
		}
		return nil
	case "localizedAttributes":
		var rules []struct {
			AttributePatterns []string `json:"attributePatterns"`
			Locales           []string `json:"locales"`
		}
		if json.Unmarshal(v, &rules) != nil {
			return errf(code, "Invalid value type at `.%s`: expected an array of rules with `attributePatterns` and `locales`, but found %s", k, compactJSON(v))
		}
		for i, r := range rules {
			for j, l := range r.Locales {
				if !slices.Contains(locales, l) {
					return errf(code, "Invalid value at `.localizedAttributes[%d].locales[%d]`: Unsupported locale `%s`, expected one of %s", i, j, l, strings.Join(locales, ", "))
				}
			}
		}
		return nil
	case "filterableAttributes", "foreignKeys":
		var l []json.RawMessage
		if json.Unmarshal(v, &l) != nil {
			return errf(code, "Invalid value type at `.%s`: expected an array, but found %s", k, compactJSON(v))
		}
		return nil
	case "synonyms":
		var m map[string][]string
		if json.Unmarshal(v, &m) != nil {
			return errf(code, "Invalid value type at `.%s`: expected an object, but found %s", k, compactJSON(v))
		}
		return nil
	}
	if c, ok := stringListSettings[k]; ok {
		var l []string
		if json.Unmarshal(v, &l) != nil {
			return errf(c, "Invalid value type at `.%s`: expected an array, but found %s", k, compactJSON(v))
		}
		return nil
	}
	if objectSettings[k] || k == "embedders" {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil || m == nil {
			return errf(code, "Invalid value type at `.%s`: expected an object, but found %s", k, compactJSON(v))
		}
	}
	return nil
}

// settingsTask checks new settings (key -> raw value, null resetting) and
// returns the settingsUpdate task that applies them, creating a missing
// index, as register_new_settings does (s.mu not held).
func (s *Server) settingsTask(uid string, m map[string]json.RawMessage) (*task, *apiError) {
	s.mu.RLock()
	feats := s.features
	s.mu.RUnlock()
	for _, k := range extraSettingKeys {
		if v, ok := m[k]; ok && string(bytes.TrimSpace(v)) != "null" && !feats.enabled(settingFeature[k]) {
			return nil, errFeatureNotEnabled(k)
		}
	}
	for k, v := range m {
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		if e := checkSetting(k, v); e != nil {
			return nil, e
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
			ix.settings[k] = normalizeSetting(k, v)
		}
		ix.updatedAt = time.Now().UTC()
		return nil
	}
	return t, nil
}

// setSettings are BTreeSet<String> in Meilisearch's Settings: stored sorted
// and without duplicates, and so returned.
var setSettings = map[string]bool{"sortableAttributes": true, "stopWords": true, "nonSeparatorTokens": true, "separatorTokens": true, "dictionary": true}

// normalizeSetting stores a value as Meilisearch's types hold it: sets
// sorted and deduplicated, synonyms (a BTreeMap) by sorted key.
func normalizeSetting(k string, v json.RawMessage) json.RawMessage {
	switch {
	case setSettings[k]:
		var l []string
		if json.Unmarshal(v, &l) == nil {
			slices.Sort(l)
			b, _ := json.Marshal(slices.Compact(l))
			return b
		}
	case k == "synonyms":
		var m map[string][]string
		if json.Unmarshal(v, &m) == nil {
			b, _ := json.Marshal(m)
			return b
		}
	}
	return json.RawMessage(compactJSON(v))
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
	t, e := s.settingsTask(uid, m)
	if e != nil {
		writeErr(w, e)
		return
	}
	s.enqueue(w, r, t)
}

// settingHandlers returns the GET, update and DELETE handlers of one
// setting's route. GET shows the value whatever the experimental features
// (only the whole settings object hides chat and foreignKeys); the update
// takes the value itself (null resets it); DELETE resets it.
func (s *Server) settingHandlers(key string) (get, update, reset handlerFunc) {
	get = func(w http.ResponseWriter, r *http.Request) {
		uid, ok := pathIndex(w, r)
		if !ok {
			return
		}
		s.mu.RLock()
		ix := s.indexes[uid]
		var v json.RawMessage
		if ix != nil {
			v = ix.settingView(key)
		}
		s.mu.RUnlock()
		if ix == nil {
			writeErr(w, errIndexNotFound(uid))
			return
		}
		writeRaw(w, http.StatusOK, v)
	}
	update = func(w http.ResponseWriter, r *http.Request) {
		uid, ok := pathIndex(w, r)
		if !ok {
			return
		}
		body, ok := s.readJSONBody(w, r)
		if !ok {
			return
		}
		if !json.Valid(body) {
			var x any
			err := json.Unmarshal(body, &x)
			writeErr(w, errBadRequest("Json deserialize error: %s", jsonErrText(err)))
			return
		}
		t, e := s.settingsTask(uid, map[string]json.RawMessage{key: json.RawMessage(bytes.TrimSpace(body))})
		if e != nil {
			writeErr(w, e)
			return
		}
		s.enqueue(w, r, t)
	}
	reset = func(w http.ResponseWriter, r *http.Request) {
		uid, ok := pathIndex(w, r)
		if !ok {
			return
		}
		t, e := s.settingsTask(uid, map[string]json.RawMessage{key: json.RawMessage("null")})
		if e != nil {
			writeErr(w, e)
			return
		}
		s.enqueue(w, r, t)
	}
	return get, update, reset
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
// check_chat_completions, check_foreign_keys_setting; the message is
// FeatureNotEnabledError's "{action} requires enabling the `{feature}`
// experimental feature. See {link}").
func errFeatureNotEnabled(key string) *apiError {
	feature, link := "chat completions", "https://github.com/orgs/meilisearch/discussions/835"
	if key == "foreignKeys" {
		feature, link = "foreign_keys", "https://github.com/orgs/meilisearch/discussions/873"
	}
	return errf("feature_not_enabled", "setting `%s` in the index settings requires enabling the `%s` experimental feature. See %s", key, feature, link)
}

// locales are the languages localizedAttributes (and search's locales)
// accept: ISO 639-1 and 639-3 codes of the tokenizer's languages, plus cmn,
// in the order Meilisearch lists them, shortest first
// (crates/meilisearch-types/src/locales.rs, make_locale!).
var locales = func() []string {
	pairs := "af afr ak aka am amh ar ara az aze be bel bn ben bg bul ca cat cs ces da dan de deu el ell en eng eo epo et est " +
		"fi fin fr fra gu guj he heb hi hin hr hrv hu hun hy hye id ind it ita jv jav ja jpn kn kan ka kat km khm ko kor la lat " +
		"lv lav lt lit ml mal mr mar mk mkd my mya ne nep nl nld nb nob or ori pa pan fa pes pl pol pt por ro ron ru rus si sin " +
		"sk slk sl slv sn sna es spa sr srp sv swe ta tam te tel tl tgl th tha tk tuk tr tur uk ukr ur urd uz uzb vi vie yi yid " +
		"zh zho zu zul cmn"
	l := strings.Fields(pairs)
	slices.SortFunc(l, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	return l
}()

// settingView is a setting as GET shows it. Embedders are shown as
// Meilisearch's settings() renders them with SecretPolicy::HideSecrets
// (crates/meilisearch-types/src/settings.rs): API keys redacted by
// hide_secret, and a rest embedder's defaults filled in (headers {}, and
// without fragments the default documentTemplate and its 400-byte limit).
func (ix *index) settingView(key string) json.RawMessage {
	v := ix.setting(key)
	if key != "embedders" {
		return v
	}
	var emb map[string]map[string]json.RawMessage
	if json.Unmarshal(v, &emb) != nil || len(emb) == 0 {
		return v
	}
	var view func(e map[string]json.RawMessage)
	view = func(e map[string]json.RawMessage) {
		if k, ok := e["apiKey"]; ok {
			var key string
			if json.Unmarshal(k, &key) == nil {
				e["apiKey"], _ = json.Marshal(hideSecret(key))
			}
		}
		if string(e["source"]) == `"rest"` {
			if _, ok := e["headers"]; !ok {
				e["headers"] = json.RawMessage(`{}`)
			}
			_, fragments := e["indexingFragments"]
			if _, ok := e["documentTemplate"]; !ok && !fragments {
				e["documentTemplate"] = json.RawMessage(strconv.Quote(defaultDocumentTemplate))
			}
			if _, ok := e["documentTemplateMaxBytes"]; !ok && !fragments {
				e["documentTemplateMaxBytes"] = json.RawMessage(`400`)
			}
		}
		for _, sub := range []string{"searchEmbedder", "indexingEmbedder"} {
			var se map[string]json.RawMessage
			if json.Unmarshal(e[sub], &se) == nil && se != nil {
				view(se)
				e[sub], _ = json.Marshal(se)
			}
		}
	}
	for _, e := range emb {
		view(e)
	}
	out, _ := json.Marshal(emb)
	return out
}

// defaultDocumentTemplate is the template an embedder renders documents
// with when it is given none.
const defaultDocumentTemplate = "{% for field in fields %}{% if field.is_searchable and field.value != nil %}{{ field.name }}: {{ field.value }}\n{% endif %}{% endfor %}"

// hideSecret redacts a secret as Meilisearch's hide_secret does with offset
// 0: the first 0, 2, 3 or 5 characters kept (by the secret's length, under
// 10, 20, 30 bytes or more), then XXX..., XXXX..., XXXXX... or XXXXXX....
func hideSecret(s string) string {
	keep, mask := 5, "XXXXXX..."
	switch n := len(s); {
	case n < 10:
		keep, mask = 0, "XXX..."
	case n < 20:
		keep, mask = 2, "XXXX..."
	case n < 30:
		keep, mask = 3, "XXXXX..."
	}
	// Up to a character boundary, as ceil_char_boundary does.
	for keep < len(s) && !utf8.RuneStart(s[keep]) {
		keep++
	}
	return s[:keep] + mask
}
