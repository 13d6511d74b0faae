package meilitest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Filters: the subset of Meilisearch's filter language
// (https://www.meilisearch.com/docs/learn/filtering_and_sorting/filter_expression_reference,
// crates/filter-parser) that a sync tool and its tests use:
//
//	attr = v, !=, >, >=, <, <=, attr v1 TO v2, attr IN [a, b], NOT IN,
//	EXISTS, NOT EXISTS, IS NULL, IS NOT NULL, IS EMPTY, IS NOT EMPTY,
//	AND, OR, NOT, parentheses; the array form [a, [b, c]] = a AND (b OR c).
//
// Values are bare words or quoted strings. String equality ignores case, as
// Meilisearch normalizes facet values; numbers compare as numbers; arrays in
// documents match if any element does; a.b reaches nested fields.
type filterExpr struct {
	op   string // and, or, not, cmp, in, exists, null, empty, to
	kids []*filterExpr
	attr string
	cmp  string // =, !=, >, >=, <, <=
	val  string
	vals []string
	src  string // the filter string the condition came from
	pos  [2]int // attr's byte span in src
}

type ftoken struct {
	kind string // word, str, op, punct
	text string
	pos  [2]int
}

type filterParser struct {
	src  string
	toks []ftoken
	i    int
	code string
}

// compileFilter compiles a filter given as a string or an array; an empty
// filter is nil.
func compileFilter(v any, code string) (*filterExpr, *apiError) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if strings.TrimSpace(x) == "" {
			return nil, nil
		}
		return parseFilterString(x, code)
	case []any:
		var and []*filterExpr
		for _, el := range x {
			switch y := el.(type) {
			case string:
				f, e := compileFilter(y, code)
				if e != nil {
					return nil, e
				}
				if f != nil {
					and = append(and, f)
				}
			case []any:
				var or []*filterExpr
				for _, z := range y {
					zs, ok := z.(string)
					if !ok {
						return nil, errf(code, "Invalid syntax for the filter parameter: `expected String, Array, found: %s`.", jsonText(z))
					}
					f, e := compileFilter(zs, code)
					if e != nil {
						return nil, e
					}
					if f != nil {
						or = append(or, f)
					}
				}
				if len(or) > 0 {
					and = append(and, &filterExpr{op: "or", kids: or})
				}
			default:
				return nil, errf(code, "Invalid syntax for the filter parameter: `expected String, Array, found: %s`.", jsonText(y))
			}
		}
		if len(and) == 0 {
			return nil, nil
		}
		return &filterExpr{op: "and", kids: and}, nil
	default:
		return nil, errf(code, "Invalid syntax for the filter parameter: `expected String, Array, found: %s`.", jsonText(x))
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func tokenizeFilter(src string) ([]ftoken, int) {
	var toks []ftoken
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == '[' || c == ']' || c == ',':
			toks = append(toks, ftoken{"punct", string(c), [2]int{i, i + 1}})
			i++
		case c == '=':
			toks = append(toks, ftoken{"op", "=", [2]int{i, i + 1}})
			i++
		case c == '!' && i+1 < len(src) && src[i+1] == '=':
			toks = append(toks, ftoken{"op", "!=", [2]int{i, i + 2}})
			i += 2
		case c == '>' || c == '<':
			if i+1 < len(src) && src[i+1] == '=' {
				toks = append(toks, ftoken{"op", string(c) + "=", [2]int{i, i + 2}})
				i += 2
			} else {
				toks = append(toks, ftoken{"op", string(c), [2]int{i, i + 1}})
				i++
			}
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for j < len(src) && src[j] != c {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				b.WriteByte(src[j])
				j++
			}
			if j >= len(src) {
				return nil, i
			}
			toks = append(toks, ftoken{"str", b.String(), [2]int{i, j + 1}})
			i = j + 1
		default:
			j := i
			for j < len(src) && !strings.ContainsRune(" \t\n\r()[],=!<>\"'", rune(src[j])) {
				j++
			}
			if j == i { // a lone '!'
				return nil, i
			}
			toks = append(toks, ftoken{"word", src[i:j], [2]int{i, j}})
			i = j
		}
	}
	return toks, -1
}

func parseFilterString(src, code string) (*filterExpr, *apiError) {
	toks, bad := tokenizeFilter(src)
	if bad >= 0 {
		return nil, errf(code, "Expression `%s` is missing the following closing delimiter: `%c`.\n%d:%d %s", src[bad:], src[bad], bad+1, len(src)+1, src)
	}
	p := &filterParser{src: src, toks: toks, code: code}
	f, e := p.or()
	if e != nil {
		return nil, e
	}
	if p.i < len(p.toks) {
		return nil, p.errAt(p.toks[p.i], "Found unexpected characters at the end of the filter: `%s`. You probably forgot an `OR` or an `AND` rule.", p.src[p.toks[p.i].pos[0]:])
	}
	return f, nil
}

func (p *filterParser) errAt(t ftoken, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	return errf(p.code, "%s\n%d:%d %s", msg, t.pos[0]+1, t.pos[1]+1, p.src)
}

func (p *filterParser) peek() (ftoken, bool) {
	if p.i < len(p.toks) {
		return p.toks[p.i], true
	}
	return ftoken{}, false
}

func (p *filterParser) keyword(kw string) bool {
	t, ok := p.peek()
	if ok && t.kind == "word" && strings.EqualFold(t.text, kw) {
		p.i++
		return true
	}
	return false
}

func (p *filterParser) or() (*filterExpr, *apiError) {
	f, e := p.and()
	if e != nil {
		return nil, e
	}
	kids := []*filterExpr{f}
	for p.keyword("OR") {
		g, e := p.and()
		if e != nil {
			return nil, e
		}
		kids = append(kids, g)
	}
	if len(kids) == 1 {
		return f, nil
	}
	return &filterExpr{op: "or", kids: kids}, nil
}

func (p *filterParser) and() (*filterExpr, *apiError) {
	f, e := p.not()
	if e != nil {
		return nil, e
	}
	kids := []*filterExpr{f}
	for p.keyword("AND") {
		g, e := p.not()
		if e != nil {
			return nil, e
		}
		kids = append(kids, g)
	}
	if len(kids) == 1 {
		return f, nil
	}
	return &filterExpr{op: "and", kids: kids}, nil
}

func (p *filterParser) not() (*filterExpr, *apiError) {
	if p.keyword("NOT") {
		f, e := p.not()
		if e != nil {
			return nil, e
		}
		return &filterExpr{op: "not", kids: []*filterExpr{f}}, nil
	}
	return p.primary()
}

const filterOps = "Was expecting an operation `=`, `!=`, `>=`, `>`, `<=`, `<`, `IN`, `NOT IN`, `TO`, `EXISTS`, `NOT EXISTS`, `IS NULL`, `IS NOT NULL`, `IS EMPTY`, `IS NOT EMPTY`, `CONTAINS`, `NOT CONTAINS`, `STARTS WITH`, `NOT STARTS WITH`, `_geoRadius`, or `_geoBoundingBox` at `%s`."

func (p *filterParser) primary() (*filterExpr, *apiError) {
	t, ok := p.peek()
	if !ok {
		end := ftoken{pos: [2]int{len(p.src), len(p.src)}}
		return nil, p.errAt(end, filterOps, p.src)
	}
	if t.kind == "punct" && t.text == "(" {
		p.i++
		f, e := p.or()
		if e != nil {
			return nil, e
		}
		c, ok := p.peek()
		if !ok || c.text != ")" {
			return nil, p.errAt(t, "Expression `%s` is missing the following closing delimiter: `)`.", p.src[t.pos[0]:])
		}
		p.i++
		return f, nil
	}
	if t.kind != "word" && t.kind != "str" {
		return nil, p.errAt(t, filterOps, p.src[t.pos[0]:])
	}
	p.i++
	f := &filterExpr{attr: t.text, src: p.src, pos: t.pos}
	rest := func() string { return p.src[t.pos[0]:] }
	value := func() (string, bool) {
		v, ok := p.peek()
		if !ok || v.kind != "word" && v.kind != "str" {
			return "", false
		}
		p.i++
		return v.text, true
	}
	list := func() ([]string, bool) {
		if b, ok := p.peek(); !ok || b.text != "[" {
			return nil, false
		}
		p.i++
		var vals []string
		for {
			c, ok := p.peek()
			if !ok {
				return nil, false
			}
			if c.text == "]" && c.kind == "punct" {
				p.i++
				return vals, true
			}
			v, ok := value()
			if !ok {
				return nil, false
			}
			vals = append(vals, v)
			if c, ok := p.peek(); ok && c.kind == "punct" && c.text == "," {
				p.i++
			}
		}
	}
	op, ok := p.peek()
	if !ok {
		return nil, p.errAt(t, filterOps, rest())
	}
	switch {
	case op.kind == "op":
		p.i++
		v, ok := value()
		if !ok {
			return nil, p.errAt(op, "Was expecting a value but instead got nothing.")
		}
		f.op, f.cmp, f.val = "cmp", op.text, v
	case p.keyword("IN"):
		vals, ok := list()
		if !ok {
			return nil, p.errAt(op, "Expected `[` after `IN` keyword.")
		}
		f.op, f.vals = "in", vals
	case p.keyword("EXISTS"):
		f.op = "exists"
	case p.keyword("IS"):
		neg := p.keyword("NOT")
		switch {
		case p.keyword("NULL"):
			f.op = "null"
		case p.keyword("EMPTY"):
			f.op = "empty"
		default:
			return nil, p.errAt(t, filterOps, rest())
		}
		if neg {
			return &filterExpr{op: "not", kids: []*filterExpr{f}}, nil
		}
	case p.keyword("NOT"):
		switch {
		case p.keyword("IN"):
			vals, ok := list()
			if !ok {
				return nil, p.errAt(op, "Expected `[` after `IN` keyword.")
			}
			f.op, f.vals = "in", vals
		case p.keyword("EXISTS"):
			f.op = "exists"
		default:
			return nil, p.errAt(t, filterOps, rest())
		}
		return &filterExpr{op: "not", kids: []*filterExpr{f}}, nil
	case op.kind == "word" || op.kind == "str":
		// attr lo TO hi
		lo, _ := value()
		if !p.keyword("TO") {
			return nil, p.errAt(t, filterOps, rest())
		}
		hi, ok := value()
		if !ok {
			return nil, p.errAt(op, "Was expecting a value but instead got nothing.")
		}
		f.op, f.vals = "to", []string{lo, hi}
	default:
		return nil, p.errAt(t, filterOps, rest())
	}
	return f, nil
}

func (f *filterExpr) conditions(visit func(*filterExpr)) {
	if f.attr != "" {
		visit(f)
	}
	for _, k := range f.kids {
		k.conditions(visit)
	}
}

// filterablePatterns returns the index's filterableAttributes patterns (the
// string form and the attributePatterns of the object form).
func (ix *index) filterablePatterns() []string {
	raw, ok := ix.settings["filterableAttributes"]
	if !ok {
		return nil
	}
	var items []any
	_ = json.Unmarshal(raw, &items)
	var out []string
	for _, it := range items {
		switch x := it.(type) {
		case string:
			out = append(out, x)
		case map[string]any:
			if ps, ok := x["attributePatterns"].([]any); ok {
				for _, p := range ps {
					if s, ok := p.(string); ok {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// matchAttr reports whether attr is covered by pattern: equal, nested under
// it (a covers a.b), or a glob with '*' at the start and/or end.
func matchAttr(pattern, attr string) bool {
	if pattern == "*" || pattern == attr || strings.HasPrefix(attr, pattern+".") {
		return true
	}
	pre, suf := strings.HasPrefix(pattern, "*"), strings.HasSuffix(pattern, "*")
	core := strings.Trim(pattern, "*")
	switch {
	case pre && suf:
		return strings.Contains(attr, core)
	case pre:
		return strings.HasSuffix(attr, core)
	case suf:
		return strings.HasPrefix(attr, core)
	}
	return false
}

// checkFilterable fails on the first attribute that filterableAttributes
// does not cover, with Meilisearch's message (milli's
// InvalidFilterableAttribute / FilterError::AttributeNotFilterable).
func (f *filterExpr) checkFilterable(ix *index, code, prefix string) *apiError {
	patterns := ix.filterablePatterns()
	var bad *filterExpr
	f.conditions(func(c *filterExpr) {
		if bad != nil {
			return
		}
		for _, p := range patterns {
			if matchAttr(p, c.attr) {
				return
			}
		}
		bad = c
	})
	if bad == nil {
		return nil
	}
	avail := "This index does not have configured filterable attributes."
	if len(patterns) > 0 {
		// FilterError's Display sorts the patterns (milli, error.rs).
		sorted := slices.Clone(patterns)
		slices.Sort(sorted)
		avail = "Available filterable attribute patterns are: " + quoteList(sorted) + "."
	}
	return errf(code, "%sAttribute `%s` is not filterable. %s\n%d:%d %s", prefix, bad.attr, avail, bad.pos[0]+1, bad.pos[1]+1, bad.src)
}

func (f *filterExpr) match(d *doc) bool {
	switch f.op {
	case "and":
		for _, k := range f.kids {
			if !k.match(d) {
				return false
			}
		}
		return true
	case "or":
		for _, k := range f.kids {
			if k.match(d) {
				return true
			}
		}
		return false
	case "not":
		return !f.kids[0].match(d)
	}
	vals, found := lookup(d.fields, f.attr)
	switch f.op {
	case "exists":
		return found
	case "null":
		for _, v := range vals {
			if v == nil {
				return true
			}
		}
		return false
	case "empty":
		for _, v := range vals {
			switch x := v.(type) {
			case string:
				if x == "" {
					return true
				}
			case []any:
				if len(x) == 0 {
					return true
				}
			case map[string]any:
				if len(x) == 0 {
					return true
				}
			}
		}
		return false
	}
	flat := flatten(vals, nil)
	switch f.op {
	case "in":
		for _, v := range flat {
			for _, w := range f.vals {
				if equalValue(v, w) {
					return true
				}
			}
		}
		return false
	case "to":
		for _, v := range flat {
			if compareValue(v, f.vals[0]) >= 0 && compareValue(v, f.vals[1]) <= 0 {
				return true
			}
		}
		return false
	case "cmp":
		if f.cmp == "!=" {
			for _, v := range flat {
				if equalValue(v, f.val) {
					return false
				}
			}
			return true
		}
		for _, v := range flat {
			switch f.cmp {
			case "=":
				if equalValue(v, f.val) {
					return true
				}
			case ">", ">=", "<", "<=":
				c := compareValue(v, f.val)
				if c == cmpIncomparable {
					continue
				}
				if f.cmp == ">" && c > 0 || f.cmp == ">=" && c >= 0 || f.cmp == "<" && c < 0 || f.cmp == "<=" && c <= 0 {
					return true
				}
			}
		}
		return false
	}
	return false
}

// lookup returns the values at a (possibly dotted) attribute, undecoded
// arrays included, and whether the attribute exists.
func lookup(fields []field, attr string) ([]any, bool) {
	if raw, ok := getField(fields, attr); ok {
		return []any{decodeRaw(raw)}, true
	}
	for i := 0; i < len(attr); i++ {
		if attr[i] != '.' {
			continue
		}
		if raw, ok := getField(fields, attr[:i]); ok {
			var out []any
			found := navigate(decodeRaw(raw), attr[i+1:], &out)
			if found {
				return out, true
			}
		}
	}
	return nil, false
}

func navigate(v any, path string, out *[]any) bool {
	switch x := v.(type) {
	case map[string]any:
		if w, ok := x[path]; ok {
			*out = append(*out, w)
			return true
		}
		found := false
		for i := 0; i < len(path); i++ {
			if path[i] == '.' {
				if w, ok := x[path[:i]]; ok {
					found = navigate(w, path[i+1:], out) || found
				}
			}
		}
		return found
	case []any:
		found := false
		for _, w := range x {
			found = navigate(w, path, out) || found
		}
		return found
	}
	return false
}

func flatten(vals []any, out []any) []any {
	for _, v := range vals {
		if a, ok := v.([]any); ok {
			out = flatten(a, out)
		} else {
			out = append(out, v)
		}
	}
	return out
}

func equalValue(v any, s string) bool {
	switch x := v.(type) {
	case string:
		return strings.EqualFold(x, s)
	case float64:
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && f == x
	case bool:
		return strings.EqualFold(strconv.FormatBool(x), s)
	}
	return false
}

const cmpIncomparable = 2

// compareValue compares a document value with a filter value: numbers
// numerically, strings lexicographically (case-insensitive).
func compareValue(v any, s string) int {
	switch x := v.(type) {
	case float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return cmpIncomparable
		}
		switch {
		case x < f:
			return -1
		case x > f:
			return 1
		}
		return 0
	case string:
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			if xf, err := strconv.ParseFloat(x, 64); err == nil {
				return compareValue(xf, strconv.FormatFloat(f, 'f', -1, 64))
			}
		}
		return strings.Compare(strings.ToLower(x), strings.ToLower(s))
	}
	return cmpIncomparable
}
