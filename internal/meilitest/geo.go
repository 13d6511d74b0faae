package meilitest

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// checkGeo validates the _geo field of documents about to be added to uid
// when _geo is sortable or filterable there, as milli's geo extraction does
// (crates/milli/src/error.rs GeoError; the cases and messages of
// crates/meilisearch/tests/documents/add_documents.rs
// add_documents_invalid_geo_field). It is an indexing error, not a
// payload's: it carries the "Index `uid`: " prefix and fails the whole
// batch. null is a valid _geo; lat and lng may be numbers or strings that
// parse as finite floats. Runs with s.mu held.
func (s *Server) checkGeo(uid string, docs [][]field, pkParam string) *apiError {
	ix := s.indexes[uid]
	if ix == nil || !ix.geoFaceted() {
		return nil
	}
	pk := ix.primaryKey
	if pk == "" {
		pk = pkParam
	}
	for _, fields := range docs {
		raw, ok := getField(fields, "_geo")
		if !ok || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		id := "null"
		if pk != "" {
			if v, ok := getField(fields, pk); ok {
				id = compactJSON(v)
			}
		}
		if msg := geoProblem(raw, id); msg != "" {
			return errf("invalid_document_geo_field", "Index `%s`: %s", uid, msg)
		}
	}
	return nil
}

// geoFaceted: _geo is among the sortable or filterable attributes (strings,
// or filterable objects whose attributePatterns name it).
func (ix *index) geoFaceted() bool {
	var sortable []string
	_ = json.Unmarshal(ix.setting("sortableAttributes"), &sortable)
	for _, a := range sortable {
		if a == "_geo" {
			return true
		}
	}
	var filterable []json.RawMessage
	_ = json.Unmarshal(ix.setting("filterableAttributes"), &filterable)
	for _, f := range filterable {
		var name string
		if json.Unmarshal(f, &name) == nil {
			if name == "_geo" {
				return true
			}
			continue
		}
		var obj struct {
			AttributePatterns []string `json:"attributePatterns"`
		}
		if json.Unmarshal(f, &obj) == nil {
			for _, p := range obj.AttributePatterns {
				if p == "_geo" {
					return true
				}
			}
		}
	}
	return false
}

// geoProblem returns GeoError's message for a bad _geo value, or "".
func geoProblem(raw []byte, id string) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return "The `_geo` field in the document with the id: `" + id + "` is not an object. Was expecting an object with the `_geo.lat` and `_geo.lng` fields but instead got `" + compactJSON(raw) + "`."
	}
	lat, hasLat := obj["lat"]
	lng, hasLng := obj["lng"]
	switch {
	case !hasLat && !hasLng:
		return "Could not find latitude nor longitude in the document with the id: `" + id + "`. Was expecting `_geo.lat` and `_geo.lng` fields."
	case !hasLng:
		return "Could not find longitude in the document with the id: `" + id + "`. Was expecting a `_geo.lng` field."
	case !hasLat:
		return "Could not find latitude in the document with the id: `" + id + "`. Was expecting a `_geo.lat` field."
	}
	if len(obj) > 2 {
		var extra []string
		for k, v := range obj {
			if k != "lat" && k != "lng" {
				kb, _ := json.Marshal(k)
				extra = append(extra, string(kb)+":"+compactJSON(v))
			}
		}
		return "The `_geo` field in the document with the id: `" + id + "` contains the following unexpected fields: `{" + strings.Join(extra, ",") + "}`."
	}
	latOK, lngOK := finiteCoord(lat), finiteCoord(lng)
	switch {
	case !latOK && !lngOK:
		return "Could not parse latitude nor longitude in the document with the id: `" + id + "`. Was expecting finite numbers but instead got `" + compactJSON(lat) + "` and `" + compactJSON(lng) + "`."
	case !latOK:
		return "Could not parse latitude in the document with the id: `" + id + "`. Was expecting a finite number but instead got `" + compactJSON(lat) + "`."
	case !lngOK:
		return "Could not parse longitude in the document with the id: `" + id + "`. Was expecting a finite number but instead got `" + compactJSON(lng) + "`."
	}
	return ""
}

// finiteCoord: a JSON number, or a string holding one, that is finite
// (milli's extract_finite_float_from_value).
func finiteCoord(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	var f float64
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return false
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return false
		}
		f = v
	} else if json.Unmarshal(raw, &f) != nil {
		return false
	}
	return !math.IsInf(f, 0) && !math.IsNaN(f)
}
