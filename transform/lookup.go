package transform

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// withLookups returns doc with each lookup that has As set to its matches
// (appended after the document's own fields, replacing a field of that
// name): the document the transform, or the identity, sees.
func (j *Job) withLookups(doc bson.Raw, res jobdef.LookupResults) (bson.Raw, error) {
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
func lookupValue(l jobdef.Lookup, matches []bson.Raw) any {
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
func readLookups(v *vm, val goja.Value) ([]jobdef.Lookup, []string) {
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return nil, []string{fmt.Sprintf("must be an object of lookups by name, not %s", typeName(val))}
	}
	var out []jobdef.Lookup
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

func readLookup(v *vm, name string, val goja.Value) (jobdef.Lookup, string) {
	l := jobdef.Lookup{Name: name}
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
		case "database":
			if l.Database, bad = str(); bad == "" {
				bad = validDatabase(l.Database)
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
			bad = fmt.Sprintf("unknown key %q (known: from, database, localField, foreignField, project, many, as)", k)
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
	if p := l.Project; p != nil && !jobdef.ProjectionIncludes(p) {
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
func readRelates(val goja.Value, collection string) ([]jobdef.Relate, []string) {
	a, ok := val.(*goja.Object)
	if !ok || a.ClassName() != "Array" {
		return nil, []string{fmt.Sprintf("must be an array of {namespace, srcField, matchField}, not %s", typeName(val))}
	}
	var out []jobdef.Relate
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

func readRelate(val goja.Value, collection string) (jobdef.Relate, string) {
	var r jobdef.Relate
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
			// monstache's db.collection; resolveDatabases splits it.
			r.Namespace = s
		case "withNamespace":
			if w := collectionOf(s); w != collection {
				return r, fmt.Sprintf("withNamespace %q: a job sends again its own collection's documents (%q); declare the relate in that collection's job", s, collection)
			}
			if db, _, dotted := strings.Cut(s, "."); dotted && collectionOf(s) != s {
				r.WithDatabase = db
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

// resolveDatabases settles where the job, its lookups and its relates
// read, once the job's options (and overrides) are read, so code can
// always read their Database. A name written db.collection (`collection`,
// a lookup's `from`, a relate's `namespace`) is split at its first dot
// when no database is given beside it: MongoDB's database names hold no
// dot, its collection names may, so "a.b.c" is collection "b.c" of
// database "a", and a collection of the job's own database whose name
// holds a dot is written with the database before it (or with
// `database`).
func (j *Job) resolveDatabases() error {
	var problems []error
	if !j.dbGiven {
		if db, coll, dotted := strings.Cut(j.Collection, "."); dotted {
			msg := validDatabase(db)
			if msg == "" {
				msg = validCollection(coll)
			}
			if msg != "" {
				msg = fmt.Sprintf("%q is not db.collection: %s (with a `database` given, `collection` is taken whole)", j.Collection, msg)
				if v, ok := j.env["collection"]; ok && v == j.Collection {
					problems = append(problems, errs.New(errs.ConfigInvalid, j.Name, "%s: %s: %s", j.file(), envVar(EnvKey(j.Name), "collection"), msg))
				} else {
					problems = append(problems, configErr(j.Name, j.file(), "collection", "%s", msg))
				}
			} else {
				j.Database, j.Collection = db, coll
			}
		}
	}
	if j.Database == "" {
		j.Database = j.opts.Database
	}
	for i := range j.Lookups {
		l := &j.Lookups[i]
		if l.Database == "" {
			if db, coll, dotted := strings.Cut(l.From, "."); dotted {
				msg := validDatabase(db)
				if msg == "" {
					msg = validCollection(coll)
				}
				if msg != "" {
					problems = append(problems, configErr(j.Name, j.file(), "lookups", "lookup %q: from %q is not db.collection: %s (with the lookup's `database` given, `from` is taken whole)", l.Name, l.From, msg))
					continue
				}
				l.Database, l.From = db, coll
			} else {
				l.Database = j.Database
			}
		}
	}
	for i := range j.Relates {
		r := &j.Relates[i]
		if db, coll, dotted := strings.Cut(r.Namespace, "."); dotted {
			msg := validDatabase(db)
			if msg == "" {
				msg = validCollection(coll)
			}
			if msg != "" {
				problems = append(problems, configErr(j.Name, j.file(), "relate", "relate %d: namespace %q is not db.collection: %s", i+1, r.Namespace, msg))
				continue
			}
			r.Database, r.Namespace = db, coll
		} else {
			r.Database = j.Database
		}
		if r.WithDatabase != "" && j.Database != "" && r.WithDatabase != j.Database {
			problems = append(problems, configErr(j.Name, j.file(), "relate", "relate %d: withNamespace names database %q, but the job reads %s.%s; a job sends again its own collection's documents: name its database, or declare the relate in the job of %s.%s", i+1, r.WithDatabase, j.Database, j.Collection, r.WithDatabase, j.Collection))
		}
	}
	problems = append(problems, j.unrelatedScanKeys()...)
	if len(problems) == 0 {
		j.hashDatabases()
	}
	return joinErrs(problems)
}

// unrelatedScanKeys refuses a scanKeys entry that names no collection the
// job looks up or relates to: a misspelt name would leave that collection
// scanned by the job's key, unsaid.
func (j *Job) unrelatedScanKeys() []error {
	var problems []error
	for _, name := range slices.Sorted(maps.Keys(j.ScanKeys)) {
		found := false
		for _, d := range j.Dependencies() {
			if name == jobdef.Namespace(d.Database, d.Collection) || (name == d.Collection && d.Database == j.Database) {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, configErr(j.Name, j.file(), "scanKeys", "%q is no collection the job looks up or relates to (write it as its lookup's from or its relate's namespace does)", name))
		}
	}
	return problems
}

// readScanKeys reads scanKeys: an object of field paths by collection.
func readScanKeys(val goja.Value) (map[string]string, []string) {
	o, ok := val.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return nil, []string{fmt.Sprintf("must be an object of field paths by collection, not %s", typeName(val))}
	}
	out := map[string]string{}
	var problems []string
	for _, coll := range o.Keys() {
		kv := o.Get(coll)
		s, ok := kv.Export().(string)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: must be a field path, not %s", coll, typeName(kv)))
			continue
		}
		if msg := keyForm(s); msg != "" {
			problems = append(problems, fmt.Sprintf("%s: %s", coll, msg))
			continue
		}
		out[coll] = s
	}
	return out, problems
}

// hashDatabases puts in the job's hashes the databases it reads beyond the
// main one: the job's, when not the main database, and a lookup's or
// relate's, when not the job's. A file's tokens already hold what it
// writes, and the overrides are already hashed; this covers what a
// reading of the same text changes: a `collection` written with a dot
// read the main database's collection of that whole name before jobs
// named databases, and now names a database, so the job must rebuild from
// there rather than take the old position as its own.
func (j *Job) hashDatabases() {
	var extra strings.Builder
	if j.Database != j.opts.Database {
		fmt.Fprintf(&extra, "\x00database=%s", j.Database)
	}
	for _, d := range j.Dependencies() {
		if d.Database != j.Database {
			fmt.Fprintf(&extra, "\x00dependency=%s", d.Namespace())
		}
	}
	if extra.Len() == 0 {
		return
	}
	rehash := func(base string) string {
		sum := sha256.Sum256([]byte(base + extra.String()))
		return hex.EncodeToString(sum[:])
	}
	j.Hash, j.LegacyHash = rehash(j.Hash), rehash(j.LegacyHash)
}
