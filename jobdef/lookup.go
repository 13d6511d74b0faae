package jobdef

import (
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Lookup is one of a job's declared lookups (its `lookups` option), in the
// words of MongoDB's $lookup: the documents of From whose ForeignField
// equals the job's document's LocalField. The engine resolves a lookup for
// a whole batch with one query ({ForeignField: {$in: keys}}) and hands the
// matches to the transform, on ctx.lookups[Name], and on the document's
// field As when set.
type Lookup struct {
	Name string
	// Database is From's database: the lookup's own, else the job's
	// Database. Always set once loaded.
	Database     string
	From         string // a collection of Database
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
	// Database is Namespace's database: the database part of a namespace
	// written db.collection (monstache's form), else the job's Database.
	// Always set once loaded.
	Database   string
	Namespace  string // a collection of Database
	SrcField   string
	MatchField string
	// WithDatabase is the database part of monstache's withNamespace
	// (the namespace whose documents are sent again), "" when it names
	// none: it must be the job's own, checked once the job's database
	// is settled.
	WithDatabase string
}

// Dependency is one way a change elsewhere reaches the job: a change to a
// document of Collection sends again the job's documents whose Field holds
// a value of the changed document's Key field (_id for a reference by
// id). Lookups and relates both make them (Dependencies).
type Dependency struct {
	Database   string // Collection's database
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
		add(Dependency{Database: l.Database, Collection: l.From, Key: l.ForeignField, Field: l.LocalField})
	}
	for _, r := range j.Relates {
		add(Dependency{Database: r.Database, Collection: r.Namespace, Key: r.SrcField, Field: r.MatchField})
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
	if ProjectionIncludes(p) {
		for _, e := range p {
			if e.Key == l.ForeignField {
				return p
			}
		}
		p = append(p, bson.E{Key: l.ForeignField, Value: 1})
	}
	return p
}

// ProjectionIncludes says whether p is an inclusion projection (a field
// other than _id set to 1 or true).
func ProjectionIncludes(p bson.D) bool {
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
	include := ProjectionIncludes(p)
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

// Namespace is db.coll as MongoDB writes a namespace (a database name
// holds no dot, so the first dot splits it again).
func Namespace(db, coll string) string { return db + "." + coll }

// ScanKeyOf is the key a scan reads the related collection coll of
// database db by: the job's ScanKeys entry for db.coll, or for coll when
// db is the job's own database (mainDB when the job names none), else Key.
func (j *Job) ScanKeyOf(db, coll, mainDB string) string {
	if k, ok := j.ScanKeys[Namespace(db, coll)]; ok {
		return k
	}
	own := j.Database
	if own == "" {
		own = mainDB
	}
	if k, ok := j.ScanKeys[coll]; ok && db == own {
		return k
	}
	return j.Key
}

// Namespace is the dependency's collection with its database.
func (d Dependency) Namespace() string { return Namespace(d.Database, d.Collection) }

// Databases lists the databases j reads, its collection's and its
// dependencies', sorted, without repeats ("" for one not resolved).
func (j *Job) Databases() []string {
	seen := map[string]bool{j.Database: true}
	out := []string{j.Database}
	for _, d := range j.Dependencies() {
		if !seen[d.Database] {
			seen[d.Database] = true
			out = append(out, d.Database)
		}
	}
	sort.Strings(out)
	return out
}
