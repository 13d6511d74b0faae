package meilitest

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Search is deliberately simple (see the package doc): query words match
// whole words of searchable attributes, the last query word also as a
// prefix, case-insensitively, with no typo tolerance, no stop words or
// synonyms. Ranking: documents matching more query words (from the first,
// matchingStrategy "last") come first, then the sort parameter, then index
// order.

var searchFields = []string{"q", "offset", "limit", "page", "hitsPerPage", "attributesToRetrieve",
	"retrieveVectors", "attributesToCrop", "cropLength", "cropMarker", "attributesToHighlight",
	"highlightPreTag", "highlightPostTag", "showMatchesPosition", "showRankingScore",
	"showRankingScoreDetails", "showPerformanceDetails", "filter", "sort", "distinct", "facets",
	"matchingStrategy", "attributesToSearchOn", "rankingScoreThreshold", "locales", "hybrid",
	"vector", "media", "personalize", "inlineRule", "useNetwork"}

type searchQuery struct {
	q                string
	offset, limit    int
	page, perPage    int
	paged            bool
	retrieve         []string
	filter           any
	sort             []string
	matchingStrategy string
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	uid, ok := pathIndex(w, r)
	if !ok {
		return
	}
	sq := searchQuery{limit: 20, page: 1, perPage: 20, matchingStrategy: "last"}
	if r.Method == http.MethodGet {
		qs := r.URL.Query()
		sq.q = qs.Get("q")
		for _, p := range []struct {
			key, code string
			dst       *int
		}{{"offset", "invalid_search_offset", &sq.offset}, {"limit", "invalid_search_limit", &sq.limit},
			{"page", "invalid_search_page", &sq.page}, {"hitsPerPage", "invalid_search_hits_per_page", &sq.perPage}} {
			if v := qs.Get(p.key); v != "" {
				n, err := strconv.ParseUint(v, 10, 32)
				if err != nil {
					writeErr(w, errf(p.code, "Invalid value in parameter `%s`: could not parse `%s` as a positive integer", p.key, v))
					return
				}
				*p.dst = int(n)
				if p.key == "page" || p.key == "hitsPerPage" {
					sq.paged = true
				}
			}
		}
		if v := qs.Get("attributesToRetrieve"); v != "" {
			sq.retrieve = strings.Split(v, ",")
		}
		if v := qs.Get("sort"); v != "" {
			sq.sort = strings.Split(v, ",")
		}
		if qs.Has("filter") {
			sq.filter = qs.Get("filter")
		}
		if v := qs.Get("matchingStrategy"); v != "" {
			sq.matchingStrategy = v
		}
	} else {
		body, ok := s.readJSONBody(w, r)
		if !ok {
			return
		}
		m, e := decodeObject(body, searchFields...)
		if e != nil {
			writeErr(w, e)
			return
		}
		if raw, ok := m["q"]; ok && string(raw) != "null" {
			if json.Unmarshal(raw, &sq.q) != nil {
				writeErr(w, errf("invalid_search_q", "Invalid value type at `.q`: expected a string, but found %s", compactJSON(raw)))
				return
			}
		}
		for _, p := range []struct {
			key, code string
			dst       *int
		}{{"offset", "invalid_search_offset", &sq.offset}, {"limit", "invalid_search_limit", &sq.limit},
			{"page", "invalid_search_page", &sq.page}, {"hitsPerPage", "invalid_search_hits_per_page", &sq.perPage}} {
			raw, ok := m[p.key]
			if !ok || string(raw) == "null" {
				continue
			}
			n, err := strconv.ParseUint(string(raw), 10, 32)
			if err != nil {
				writeErr(w, errf(p.code, "Invalid value type at `.%s`: expected a positive integer, but found %s", p.key, compactJSON(raw)))
				return
			}
			*p.dst = int(n)
			if p.key == "page" || p.key == "hitsPerPage" {
				sq.paged = true
			}
		}
		if raw, ok := m["attributesToRetrieve"]; ok && string(raw) != "null" {
			if json.Unmarshal(raw, &sq.retrieve) != nil {
				writeErr(w, errf("invalid_search_attributes_to_retrieve", "Invalid value type at `.attributesToRetrieve`: expected an array, but found %s", compactJSON(raw)))
				return
			}
		}
		if raw, ok := m["sort"]; ok && string(raw) != "null" {
			if json.Unmarshal(raw, &sq.sort) != nil {
				writeErr(w, errf("invalid_search_sort", "Invalid value type at `.sort`: expected an array, but found %s", compactJSON(raw)))
				return
			}
		}
		if raw, ok := m["filter"]; ok {
			sq.filter = decodeRaw(raw)
		}
		if raw, ok := m["matchingStrategy"]; ok && string(raw) != "null" {
			if json.Unmarshal(raw, &sq.matchingStrategy) != nil || !slices.Contains([]string{"last", "all", "frequency"}, sq.matchingStrategy) {
				writeErr(w, errf("invalid_search_matching_strategy", "Unknown value `%s` at `.matchingStrategy`: expected one of `last`, `all`, `frequency`", strings.Trim(string(raw), `"`)))
				return
			}
		}
	}
	if sq.paged && sq.page == 0 {
		sq.page = 1 // Meilisearch refuses page 0; be lenient
	}
	s.search(w, uid, sq)
}

type sortKey struct {
	attr string
	desc bool
}

// parseSorts reads "attr:asc" / "attr:desc" criteria, each on a sortable
// attribute (milli's AscDesc parsing and sortable check; code is the
// route's invalid_*_sort, prefix what its message starts with).
func parseSorts(ix *index, specs []string, code, prefix string) ([]sortKey, *apiError) {
	var sorts []sortKey
	sortable := ix.stringList("sortableAttributes")
	for _, sp := range specs {
		attr, dir, ok := strings.Cut(strings.TrimSpace(sp), ":")
		if !ok || dir != "asc" && dir != "desc" {
			return nil, errf(code, "Invalid syntax for the sort parameter: expected expression ending by `:asc` or `:desc`, found `%s`.", sp)
		}
		covered := false
		for _, p := range sortable {
			covered = covered || matchAttr(p, attr)
		}
		if !covered {
			avail := "This index does not have configured sortable attributes."
			if len(sortable) > 0 {
				avail = "Available sortable attributes are: `" + strings.Join(sortable, ", ") + "`."
			}
			return nil, errf(code, "%sAttribute `%s` is not sortable. %s", prefix, attr, avail)
		}
		sorts = append(sorts, sortKey{attr, dir == "desc"})
	}
	return sorts, nil
}

func (s *Server) search(w http.ResponseWriter, uid string, sq searchQuery) {
	start := time.Now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.indexes[uid]
	if ix == nil {
		writeErr(w, errIndexNotFound(uid))
		return
	}
	flt, e := compileFilter(sq.filter, "invalid_search_filter")
	if e == nil && flt != nil {
		e = flt.checkFilterable(ix, "invalid_search_filter", "Index `"+uid+"`: ")
	}
	if e != nil {
		writeErr(w, e)
		return
	}
	sorts, e := parseSorts(ix, sq.sort, "invalid_search_sort", "Index `"+uid+"`: ")
	if e != nil {
		writeErr(w, e)
		return
	}
	words := tokenize(sq.q)
	lastPrefix := len(sq.q) > 0 && !unicode.IsSpace(rune(sq.q[len(sq.q)-1]))
	searchable := ix.stringList("searchableAttributes")
	type hit struct {
		d     *doc
		score int
		pos   int
	}
	var hits []hit
	for i, d := range ix.list {
		if d.dead || flt != nil && !flt.match(d) {
			continue
		}
		score := 0
		if len(words) > 0 {
			dw := docWords(d, searchable)
			for k, qw := range words {
				prefix := lastPrefix && k == len(words)-1
				if !hasWord(dw, qw, prefix) {
					break
				}
				score++
			}
			if score == 0 || sq.matchingStrategy == "all" && score < len(words) {
				continue
			}
		}
		hits = append(hits, hit{d, score, i})
	}
	slices.SortStableFunc(hits, func(a, b hit) int {
		if a.score != b.score {
			return b.score - a.score
		}
		for _, sk := range sorts {
			if c := compareSort(a.d, b.d, sk); c != 0 {
				return c
			}
		}
		return a.pos - b.pos
	})
	maxTotal := 1000
	var pg struct {
		MaxTotalHits int `json:"maxTotalHits"`
	}
	if json.Unmarshal(ix.setting("pagination"), &pg) == nil && pg.MaxTotalHits > 0 {
		maxTotal = pg.MaxTotalHits
	}
	total := min(len(hits), maxTotal)
	from, to := 0, 0
	if sq.paged {
		from = (sq.page - 1) * sq.perPage
		to = from + sq.perPage
	} else {
		from, to = sq.offset, sq.offset+sq.limit
	}
	from, to = min(from, total), min(to, total)

	displayed := ix.stringList("displayedAttributes")
	retrieve := sq.retrieve
	keep := func(name string) bool {
		ok := false
		for _, p := range displayed {
			ok = ok || matchAttr(p, name)
		}
		if !ok || retrieve == nil {
			return ok
		}
		for _, p := range retrieve {
			if matchAttr(p, name) {
				return true
			}
		}
		return false
	}
	b := []byte(`{"hits":[`)
	for i, h := range hits[from:to] {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDoc(b, h.d.fields, keep)
	}
	b = append(b, `],"query":`...)
	b = appendString(b, sq.q)
	b = append(b, `,"processingTimeMs":`...)
	b = strconv.AppendInt(b, time.Since(start).Milliseconds(), 10)
	if sq.paged {
		pages := 0
		if sq.perPage > 0 {
			pages = (total + sq.perPage - 1) / sq.perPage
		}
		b = append(b, `,"hitsPerPage":`...)
		b = strconv.AppendInt(b, int64(sq.perPage), 10)
		b = append(b, `,"page":`...)
		b = strconv.AppendInt(b, int64(sq.page), 10)
		b = append(b, `,"totalPages":`...)
		b = strconv.AppendInt(b, int64(pages), 10)
		b = append(b, `,"totalHits":`...)
		b = strconv.AppendInt(b, int64(total), 10)
	} else {
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, int64(sq.limit), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, int64(sq.offset), 10)
		b = append(b, `,"estimatedTotalHits":`...)
		b = strconv.AppendInt(b, int64(total), 10)
	}
	b = append(b, '}')
	writeRaw(w, http.StatusOK, b)
}

// tokenize splits text into lower-case words of letters and digits.
func tokenize(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r)
	})
}

// docWords returns the words of a document's searchable attributes.
func docWords(d *doc, searchable []string) map[string]bool {
	words := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			for _, w := range tokenize(x) {
				words[w] = true
			}
		case float64:
			for _, w := range tokenize(strconv.FormatFloat(x, 'f', -1, 64)) {
				words[w] = true
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	for _, f := range d.fields {
		ok := false
		for _, p := range searchable {
			ok = ok || matchAttr(p, f.name) || strings.HasPrefix(p, f.name+".")
		}
		if ok {
			walk(decodeRaw(f.raw))
		}
	}
	return words
}

func hasWord(words map[string]bool, w string, prefix bool) bool {
	if words[w] {
		return true
	}
	if prefix {
		for dw := range words {
			if strings.HasPrefix(dw, w) {
				return true
			}
		}
	}
	return false
}

// compareSort orders by an attribute's first value: numbers before strings
// (ascending), documents without the attribute last.
func compareSort(a, b *doc, sk sortKey) int {
	va, oka := sortValue(a, sk.attr)
	vb, okb := sortValue(b, sk.attr)
	switch {
	case !oka && !okb:
		return 0
	case !oka:
		return 1
	case !okb:
		return -1
	}
	c := 0
	fa, na := va.(float64)
	fb, nb := vb.(float64)
	switch {
	case na && nb:
		c = cmpFloat(fa, fb)
	case na:
		c = -1
	case nb:
		c = 1
	default:
		c = strings.Compare(strings.ToLower(toString(va)), strings.ToLower(toString(vb)))
	}
	if sk.desc {
		c = -c
	}
	return c
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return jsonText(v)
}

func sortValue(d *doc, attr string) (any, bool) {
	vals, ok := lookup(d.fields, attr)
	if !ok {
		return nil, false
	}
	flat := flatten(vals, nil)
	for _, v := range flat {
		switch v.(type) {
		case float64, string:
			return v, true
		}
	}
	return nil, false
}
