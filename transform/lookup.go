package transform

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Lookup is one of a job's declared lookups (its `lookups` option), in the
// words of MongoDB's $lookup: the documents of From whose ForeignField
// equals the job's document's LocalField. The engine resolves a lookup for
// a whole batch with one query ({ForeignField: {$in: keys}}) and hands the
// matches to the transform, on ctx.lookups[Name], and on the document's
// field As when set.
type Lookup struct {
	Name         string
	From         string // a collection of the job's database
	LocalField   string // a field (dotted path) of the job's documents
	ForeignField string // a field (dotted path) of From's documents
	// Project is the projection of From's documents (nil: whole). An
	// inclusion projection always includes ForeignField: matching needs
	// it.
	Project bson.D
	// Many gives every match, as an array; otherwise the first match (in
	// _id order) or null.
	Many bool
	// As is the field of the document the matches are set to before the
	// transform runs ("" : not set); the identity transform of a job with
	// lookups sets each under its name.
	As string
}

// Relate is one of a job's `relate` dependencies (monstache's [[relate]]):
// a change to a document of Namespace, a collection of the job's database,
// sends again the job's documents whose MatchField equals the changed
// document's SrcField. A lookup implies one of its own (From, ForeignField,
// LocalField); relate is for dependencies a lookup cannot declare (a
// monstache script reading other collections with findId).
type Relate struct {
	Namespace  string
	SrcField   string
	MatchField string
}

// Dependency is one way a change elsewhere reaches the job: a change to a
// document of Collection sends again the job's documents whose Field holds
// a value of the changed document's Key field (_id for a reference by
// id). Lookups and relates both make them (Dependencies).
type Dependency struct {
	Collection string
	Key        string // field of the changed document
	Field      string // field of the job's documents
}

// Dependencies lists every dependency of j, lookups first, without
// repeats.
func (j *Job) Dependencies() []Dependency {
	var out []Dependency
	seen := map[Dependency]bool{}
	add := func(d Dependency) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, l := range j.Lookups {
		add(Dependency{Collection: l.From, Key: l.ForeignField, Field: l.LocalField})
	}
	for _, r := range j.Relates {
		add(Dependency{Collection: r.Namespace, Key: r.SrcField, Field: r.MatchField})
	}
	return out
}

// RelatedCollections lists the collections j depends on (its lookups' and relates'),
// sorted, without repeats.
func (j *Job) RelatedCollections() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range j.Dependencies() {
		if !seen[d.Collection] {
			seen[d.Collection] = true
			out = append(out, d.Collection)
		}
	}
	sort.Strings(out)
	return out
}

// LookupResults are the matches of a document's lookups, in the order of
// Job.Lookups: each the matching documents (projected), in _id order.
type LookupResults [][]bson.Raw

// Values returns the values at path in doc, as MongoDB's queries and
// $lookup see them: through arrays (the elements of an array met on the
// way, and the elements of an array at the end, are each a value; an
// array at the end is also a value of its own, as {field: [1, 2]} matches
// it whole). A path reaching nothing gives none (see Keys for $lookup's
// null).
func Values(doc bson.Raw, path string) []bson.RawValue {
	var out []bson.RawValue
	walkPath(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}, strings.Split(path, "."), 0, &out)
	return out
}

// maxPathArrays bounds the arrays a path may go through (a document of
// arrays of arrays... would otherwise multiply the work).
const maxPathArrays = 8

func walkPath(v bson.RawValue, segs []string, arrays int, out *[]bson.RawValue) {
	if len(segs) == 0 {
		*out = append(*out, v)
		if a, ok := v.ArrayOK(); ok {
			vals, _ := a.Values()
			*out = append(*out, vals...)
		}
		return
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		d, _ := v.DocumentOK()
		if f, err := d.LookupErr(segs[0]); err == nil {
			walkPath(f, segs[1:], arrays, out)
		}
	case bson.TypeArray:
		if arrays >= maxPathArrays {
			return
		}
		a, _ := v.ArrayOK()
		vals, _ := a.Values()
		for _, el := range vals {
			if el.Type == bson.TypeEmbeddedDocument || el.Type == bson.TypeArray {
				walkPath(el, segs, arrays+1, out)
			}
		}
	}
}

var nullValue = bson.RawValue{Type: bson.TypeNull}

// Keys returns the values of l.LocalField in doc that the lookup matches
// on: as $lookup, a document without the field (or with null) matches the
// foreign documents whose ForeignField is null or missing, so it gives one
// null key.
func (l Lookup) Keys(doc bson.Raw) []bson.RawValue {
	vals := Values(doc, l.LocalField)
	if len(vals) == 0 {
		return []bson.RawValue{nullValue}
	}
	return vals
}

// Match returns the documents of foreign (From's documents, in _id order)
// that match doc, as $lookup matches them: a foreign document whose
// ForeignField (any of its values) equals any of doc's keys, numbers
// comparing by value. A missing foreign field equals null.
func (l Lookup) Match(doc bson.Raw, foreign []bson.Raw) []bson.Raw {
	keys := map[string]bool{}
	for _, k := range l.Keys(doc) {
		keys[IDKey(k)] = true
	}
	var out []bson.Raw
	for _, f := range foreign {
		vals := Values(f, l.ForeignField)
		if len(vals) == 0 {
			vals = []bson.RawValue{nullValue}
		}
		for _, v := range vals {
			if keys[IDKey(v)] {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// Index groups foreign documents by each value of their ForeignField, for
// matching many documents at once (MatchIndexed).
type Index map[string][]bson.Raw

// IndexForeign builds the Index of foreign for l.
func (l Lookup) IndexForeign(foreign []bson.Raw) Index {
	ix := Index{}
	for _, f := range foreign {
		vals := Values(f, l.ForeignField)
		if len(vals) == 0 {
			vals = []bson.RawValue{nullValue}
		}
		seen := map[string]bool{}
		for _, v := range vals {
			k := IDKey(v)
			if !seen[k] {
				seen[k] = true
				ix[k] = append(ix[k], f)
			}
		}
	}
	return ix
}

// MatchIndexed is Match over an Index: the documents matching doc, each
// once, in the order they were indexed.
func (l Lookup) MatchIndexed(doc bson.Raw, ix Index, order map[*byte]int) []bson.Raw {
	var out []bson.Raw
	seen := map[*byte]bool{}
	for _, k := range l.Keys(doc) {
		for _, f := range ix[IDKey(k)] {
			if len(f) == 0 || seen[&f[0]] {
				continue
			}
			seen[&f[0]] = true
			out = append(out, f)
		}
	}
	if len(out) > 1 && order != nil {
		sort.SliceStable(out, func(a, b int) bool { return order[&out[a][0]] < order[&out[b][0]] })
	}
	return out
}

// Query returns the filter that reads the foreign documents matching any
// of keys: {ForeignField: {$in: keys}} (null among them also matches a
// missing field, as in $lookup).
func (l Lookup) Query(keys []bson.RawValue) bson.D {
	in := make(bson.A, len(keys))
	for i, k := range keys {
		in[i] = k
	}
	return bson.D{{Key: l.ForeignField, Value: bson.D{{Key: "$in", Value: in}}}}
}

// Projection returns the projection the engine reads From with: Project,
// with ForeignField added to an inclusion projection.
func (l Lookup) Projection() bson.D {
	if l.Project == nil {
		return nil
	}
	p := append(bson.D(nil), l.Project...)
	if projectionIncludes(p) {
		for _, e := range p {
			if e.Key == l.ForeignField {
				return p
			}
		}
		p = append(p, bson.E{Key: l.ForeignField, Value: 1})
	}
	return p
}

// projectionIncludes says whether p is an inclusion projection (a field
// other than _id set to 1 or true).
func projectionIncludes(p bson.D) bool {
	for _, e := range p {
		if e.Key != "_id" && truthyProjection(e.Value) {
			return true
		}
	}
	return false
}

func truthyProjection(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case int32:
		return x != 0
	case int64:
		return x != 0
	case float64:
		return x != 0
	}
	return false
}

// withLookups returns doc with each lookup that has As set to its matches
// (appended after the document's own fields, replacing a field of that
// name): the document the transform, or the identity, sees.
func (j *Job) withLookups(doc bson.Raw, res LookupResults) (bson.Raw, error) {
	as := map[string]int{}
	for i, l := range j.Lookups {
		name := l.As
		if name == "" && j.rt == nil {
			name = l.Name
		}
		if name != "" && i < len(res) {
			as[name] = i
		}
	}
	if len(as) == 0 {
		return doc, nil
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	d := make(bson.D, 0, len(elems)+len(as))
	for _, e := range elems {
		if _, replaced := as[e.Key()]; !replaced {
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	names := make([]string, 0, len(as))
	for n := range as {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool { return as[names[a]] < as[names[b]] })
	for _, n := range names {
		d = append(d, bson.E{Key: n, Value: lookupValue(j.Lookups[as[n]], res[as[n]])})
	}
	return bson.Marshal(d)
}

// lookupValue is what a lookup's matches are to the transform: an array of
// them, or the first (null when none).
func lookupValue(l Lookup, matches []bson.Raw) any {
	if l.Many {
		a := make(bson.A, len(matches))
		for i, m := range matches {
			a[i] = m
		}
		return a
	}
	if len(matches) == 0 {
		return nil
	}
	return matches[0]
}

// readLookups reads the `lookups` option: an object of lookups by name.
func readLookups(v *vm, val goja.Value) ([]Lookup, []string) {
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return nil, []string{fmt.Sprintf("must be an object of lookups by name, not %s", typeName(val))}
	}
	var out []Lookup
	var problems []string
	seenAs := map[string]string{}
	for _, name := range o.Keys() {
		l, bad := readLookup(v, name, o.Get(name))
		if bad != "" {
			problems = append(problems, fmt.Sprintf("lookup %q: %s", name, bad))
			continue
		}
		if l.As != "" {
			if other, dup := seenAs[l.As]; dup {
				problems = append(problems, fmt.Sprintf("lookups %q and %q both set the field %q (as)", other, name, l.As))
				continue
			}
			seenAs[l.As] = name
		}
		out = append(out, l)
	}
	return out, problems
}

func readLookup(v *vm, name string, val goja.Value) (Lookup, string) {
	l := Lookup{Name: name}
	if msg := validFieldName(name); msg != "" {
		return l, "the name " + msg
	}
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return l, fmt.Sprintf("must be an object {from, localField, foreignField, project, many, as}, not %s", typeName(val))
	}
	for _, k := range o.Keys() {
		f := o.Get(k)
		str := func() (string, string) {
			s, ok := f.Export().(string)
			if !ok {
				return "", fmt.Sprintf("%s must be a string, not %s", k, typeName(f))
			}
			return s, ""
		}
		var bad string
		switch k {
		case "from":
			if l.From, bad = str(); bad == "" {
				bad = validCollection(l.From)
			}
		case "localField":
			if l.LocalField, bad = str(); bad == "" {
				bad = validPath(k, l.LocalField)
			}
		case "foreignField":
			if l.ForeignField, bad = str(); bad == "" {
				bad = validPath(k, l.ForeignField)
			}
		case "as":
			if l.As, bad = str(); bad == "" {
				if msg := validFieldName(l.As); msg != "" {
					bad = "as: the field " + msg
				} else if l.As == "_id" {
					bad = "as may not be _id"
				}
			}
		case "many":
			b, ok := f.Export().(bool)
			if !ok {
				bad = fmt.Sprintf("many must be true or false, not %s", typeName(f))
			}
			l.Many = b
		case "project":
			l.Project, bad = readProjection(v, f)
		default:
			bad = fmt.Sprintf("unknown key %q (known: from, localField, foreignField, project, many, as)", k)
		}
		if bad != "" {
			return l, bad
		}
	}
	switch {
	case l.From == "":
		return l, "from (the collection to read) is missing"
	case l.LocalField == "":
		return l, "localField (the field of the job's documents) is missing"
	case l.ForeignField == "":
		return l, "foreignField (the field of " + l.From + "'s documents) is missing"
	}
	if p := l.Project; p != nil && !projectionIncludes(p) {
		for _, e := range p {
			if e.Key == l.ForeignField {
				return l, fmt.Sprintf("project leaves out foreignField %q, which matching needs", l.ForeignField)
			}
		}
	}
	return l, ""
}

// readProjection reads a projection: an object of fields set to 1/true
// (include) or 0/false (leave out), not both but for _id.
func readProjection(v *vm, val goja.Value) (bson.D, string) {
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return nil, fmt.Sprintf("project must be an object of fields set to 1 or 0, not %s", typeName(val))
	}
	var p bson.D
	in, out := false, false
	for _, k := range o.Keys() {
		if msg := validPath("project", k); msg != "" {
			return nil, msg
		}
		var on bool
		switch x := o.Get(k).Export().(type) {
		case bool:
			on = x
		case int64:
			if x != 0 && x != 1 {
				return nil, fmt.Sprintf("project: %s must be 1 or 0", k)
			}
			on = x == 1
		case float64:
			if x != 0 && x != 1 {
				return nil, fmt.Sprintf("project: %s must be 1 or 0", k)
			}
			on = x == 1
		default:
			return nil, fmt.Sprintf("project: %s must be 1 or 0 (expressions are not supported)", k)
		}
		if k != "_id" {
			in, out = in || on, out || !on
		}
		v := int32(0)
		if on {
			v = 1
		}
		p = append(p, bson.E{Key: k, Value: v})
	}
	if in && out {
		return nil, "project mixes fields to include and to leave out (only _id may be left out of an inclusion)"
	}
	return p, ""
}

// readRelates reads the `relate` option: an array of monstache [[relate]]
// entries in camel case.
func readRelates(val goja.Value, collection string) ([]Relate, []string) {
	a, ok := val.(*goja.Object)
	if !ok || a.ClassName() != "Array" {
		return nil, []string{fmt.Sprintf("must be an array of {namespace, srcField, matchField}, not %s", typeName(val))}
	}
	var out []Relate
	var problems []string
	n := a.Get("length").ToInteger()
	for i := int64(0); i < n; i++ {
		r, bad := readRelate(a.Get(fmt.Sprint(i)), collection)
		if bad != "" {
			problems = append(problems, fmt.Sprintf("relate %d: %s", i+1, bad))
			continue
		}
		out = append(out, r)
	}
	return out, problems
}

func readRelate(val goja.Value, collection string) (Relate, string) {
	var r Relate
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return r, fmt.Sprintf("must be an object {namespace, srcField, matchField}, not %s", typeName(val))
	}
	dots := true
	for _, k := range o.Keys() {
		f := o.Get(k)
		s, isStr := f.Export().(string)
		var bad string
		switch k {
		case "namespace", "withNamespace", "srcField", "matchField":
			if !isStr {
				bad = fmt.Sprintf("%s must be a string, not %s", k, typeName(f))
			}
		case "keepSrc":
			// monstache indexes the changed document itself too; here the
			// related collection's own job (if any) does.
			if _, ok := f.Export().(bool); !ok {
				bad = fmt.Sprintf("keepSrc must be true or false, not %s", typeName(f))
			}
		case "dotNotation":
			b, ok := f.Export().(bool)
			if !ok {
				bad = fmt.Sprintf("dotNotation must be true or false, not %s", typeName(f))
			}
			dots = b
		default:
			bad = fmt.Sprintf("unknown key %q (known: namespace, withNamespace, srcField, matchField, keepSrc, dotNotation)", k)
		}
		if bad != "" {
			return r, bad
		}
		switch k {
		case "namespace":
			r.Namespace = collectionOf(s)
		case "withNamespace":
			if w := collectionOf(s); w != collection {
				return r, fmt.Sprintf("withNamespace %q: a job sends again its own collection's documents (%q); declare the relate in that collection's job", s, collection)
			}
		case "srcField":
			r.SrcField = s
		case "matchField":
			r.MatchField = s
		}
	}
	if r.Namespace == "" {
		return r, "namespace (the collection whose changes send the job's documents again) is missing"
	}
	if msg := validCollection(r.Namespace); msg != "" {
		return r, "namespace " + msg
	}
	if r.SrcField == "" {
		r.SrcField = "_id" // monstache's default
	}
	if r.MatchField == "" {
		r.MatchField = "_id"
	}
	for _, p := range []struct{ k, v string }{{"srcField", r.SrcField}, {"matchField", r.MatchField}} {
		if msg := validPath(p.k, p.v); msg != "" {
			return r, msg
		}
		if !dots && strings.Contains(p.v, ".") {
			return r, fmt.Sprintf("%s %q holds a dot and dotNotation is false: a field name with a dot in it cannot be matched; use dotNotation (the default) for a nested field", p.k, p.v)
		}
	}
	return r, ""
}

// collectionOf takes a monstache namespace ("db.coll") or a collection
// name to the collection name: a job reads its own database only.
func collectionOf(ns string) string {
	if i := strings.IndexByte(ns, '.'); i > 0 && !strings.HasPrefix(ns[i+1:], "system.") {
		return ns[i+1:]
	}
	return ns
}

// validPath checks a dotted field path.
func validPath(what, p string) string {
	if p == "" {
		return what + " is empty"
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" || strings.HasPrefix(seg, "$") || strings.ContainsRune(seg, 0) {
			return fmt.Sprintf("%s %q is not a field path (name.name...)", what, p)
		}
	}
	return ""
}

// validFieldName checks a top-level field name.
func validFieldName(s string) string {
	if s == "" || strings.ContainsAny(s, ".\x00") || strings.HasPrefix(s, "$") {
		return fmt.Sprintf("%q is not a field name (no dot, not starting with $)", s)
	}
	return ""
}

// readRelated reads the `related` option (documents of the related
// collections, for check): an object of arrays of documents by collection.
func readRelated(v *vm, val goja.Value) (map[string][]bson.Raw, string) {
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return nil, fmt.Sprintf("must be an object of sample documents by collection, not %s", typeName(val))
	}
	out := map[string][]bson.Raw{}
	for _, coll := range o.Keys() {
		docs, err := readSamples(v, o.Get(coll))
		if err != nil {
			return nil, fmt.Sprintf("%s: %v", coll, err)
		}
		out[coll] = docs
	}
	return out, ""
}

// ResolveSamples resolves j's lookups for doc against the documents of
// related (by collection), as the engine resolves them against MongoDB:
// for `meilistream check`.
func (j *Job) ResolveSamples(doc bson.Raw, related map[string][]bson.Raw) LookupResults {
	if len(j.Lookups) == 0 {
		return nil
	}
	res := make(LookupResults, len(j.Lookups))
	for i, l := range j.Lookups {
		foreign := append([]bson.Raw(nil), related[l.From]...)
		sort.SliceStable(foreign, func(a, b int) bool {
			return compareIDs(foreign[a].Lookup("_id"), foreign[b].Lookup("_id")) < 0
		})
		for _, m := range l.Match(doc, foreign) {
			res[i] = append(res[i], project(m, l.Projection()))
		}
	}
	return res
}

// compareIDs orders two _ids by their keys (enough for a stable order of
// samples; MongoDB's own order is the engine's, from its query).
func compareIDs(a, b bson.RawValue) int {
	return strings.Compare(IDKey(a), IDKey(b))
}

// project applies an inclusion or exclusion projection of top-level fields
// and dotted paths' first segments (what check needs of a sample).
func project(doc bson.Raw, p bson.D) bson.Raw {
	if p == nil {
		return doc
	}
	include := projectionIncludes(p)
	fields := map[string]bool{}
	keepID := true
	for _, e := range p {
		top := strings.SplitN(e.Key, ".", 2)[0]
		if e.Key == "_id" {
			keepID = truthyProjection(e.Value)
			continue
		}
		fields[top] = true
	}
	elems, err := doc.Elements()
	if err != nil {
		return doc
	}
	d := bson.D{}
	for _, e := range elems {
		k := e.Key()
		keep := fields[k] == include
		if k == "_id" {
			keep = keepID
		}
		if keep {
			d = append(d, bson.E{Key: k, Value: e.Value()})
		}
	}
	b, err := bson.Marshal(d)
	if err != nil {
		return doc
	}
	return b
}
