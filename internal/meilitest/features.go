package meilitest

import (
	"encoding/json"
	"net/http"
	"slices"
)

// featureNames are Meilisearch's runtime-togglable experimental features,
// in the order GET /experimental-features shows them
// (crates/meilisearch/src/routes/features.rs, RuntimeTogglableFeatures).
// Only chatCompletions and foreignKeys change anything here: they show
// and allow the chat and foreignKeys index settings.
var featureNames = []string{
	"metrics", "logsRoute", "editDocumentsByFunction", "containsFilter", "dynamicSearchRules",
	"network", "getTaskDocumentsRoute", "taskQueueCompactionRoute", "compositeEmbedders",
	"chatCompletions", "multimodal", "foreignKeys", "disableDocumentsFetchQueue", "legacySearch",
	"renderRoute",
}

// features holds the experimental features' values; legacySearch is the
// one that may be unset (null).
type features struct {
	on           map[string]bool
	legacySearch *bool
}

func (f *features) enabled(name string) bool { return f.on[name] }

func (f *features) appendJSON(b []byte) []byte {
	b = append(b, '{')
	for i, n := range featureNames {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, n)
		b = append(b, ':')
		switch {
		case n == "legacySearch" && f.legacySearch == nil:
			b = append(b, "null"...)
		case n == "legacySearch":
			b = appendAny(b, *f.legacySearch)
		default:
			b = appendAny(b, f.on[n])
		}
	}
	return append(b, '}')
}

func (s *Server) handleGetFeatures(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	b := s.features.appendJSON(nil)
	s.mu.RUnlock()
	writeRaw(w, http.StatusOK, b)
}

// handlePatchFeatures is PATCH /experimental-features: the features given
// (true or false; null or absent keeps the value) change, at once and for
// the whole instance.
func (s *Server) handlePatchFeatures(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readJSONBody(w, r)
	if !ok {
		return
	}
	m, e := decodeObject(body, featureNames...)
	if e != nil {
		writeErr(w, e)
		return
	}
	set := map[string]bool{}
	for k, v := range m {
		if string(v) == "null" {
			continue
		}
		var on bool
		if json.Unmarshal(v, &on) != nil {
			writeErr(w, errBadRequest("Invalid value type at `.%s`: expected a boolean, but found %s", k, compactJSON(v)))
			return
		}
		set[k] = on
	}
	s.mu.Lock()
	if s.features.on == nil {
		s.features.on = map[string]bool{}
	}
	for k, on := range set {
		if k == "legacySearch" {
			s.features.legacySearch = &on
			continue
		}
		s.features.on[k] = on
	}
	b := s.features.appendJSON(nil)
	s.mu.Unlock()
	writeRaw(w, http.StatusOK, b)
}

// SetExperimentalFeature turns an experimental feature on or off, as PATCH
// /experimental-features does.
func (s *Server) SetExperimentalFeature(name string, on bool) {
	if !slices.Contains(featureNames, name) {
		panic("meilitest: SetExperimentalFeature: unknown feature " + name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.features.on == nil {
		s.features.on = map[string]bool{}
	}
	if name == "legacySearch" {
		s.features.legacySearch = &on
		return
	}
	s.features.on[name] = on
}
