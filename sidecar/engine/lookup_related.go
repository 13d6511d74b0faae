package engine

import (
	"slices"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
)

// A related change (a document of a collection the job looks up, or a
// relate's namespace) sends again the job's documents that depend on it:
// those whose dependency field (a lookup's localField, a relate's
// matchField) holds a value of the changed document's key field (the
// lookup's foreignField, the relate's srcField). relatedKeys gathers those
// values as the stream is read; Filters turns them into the queries of the
// dependents, {field: {$in: values}}.

// maxFanKeys bounds the values of one query's $in (a larger set of values
// is split into several queries).
const maxFanKeys = 10000

// relatedKeys gathers, per dependency field of the job's documents, the values
// related changes make their dependents hold (by jobdef.IDKey, so a
// value is queried once).
type relatedKeys map[string]map[string]bson.RawValue

// Add notes the values the changed document of coll (a namespace,
// db.coll) gives the job's dependencies on coll (their databases
// resolved), and returns how many are new: doc is the changed
// document (its new version, nil for a delete), before its previous
// version when the stream has it, id its _id.
func (rk relatedKeys) Add(deps []jobdef.Dependency, coll string, doc, before bson.Raw, id bson.RawValue) int {
	n := 0
	for _, d := range deps {
		if d.Namespace() != coll {
			continue
		}
		var vals []bson.RawValue
		switch {
		case d.Key == "_id":
			vals = []bson.RawValue{id}
		default:
			if doc != nil {
				vals = append(vals, jobdef.Values(doc, d.Key)...)
			}
			if before != nil {
				vals = append(vals, jobdef.Values(before, d.Key)...)
			}
		}
		for _, v := range vals {
			if v.Type == bson.TypeArray {
				continue // its elements are among the values too
			}
			m := rk[d.Field]
			if m == nil {
				m = map[string]bson.RawValue{}
				rk[d.Field] = m
			}
			k := jobdef.IDKey(v)
			if _, seen := m[k]; !seen {
				m[k] = bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)}
				n++
			}
		}
	}
	return n
}

// Filters turns the gathered values into the queries of the dependents,
// at most maxFanKeys values each, in a stable order.
func (rk relatedKeys) Filters() []bson.D {
	fields := make([]string, 0, len(rk))
	for f := range rk {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	var out []bson.D
	for _, f := range fields {
		keys := make([]string, 0, len(rk[f]))
		for k := range rk[f] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for lo := 0; lo < len(keys); lo += maxFanKeys {
			part := keys[lo:min(lo+maxFanKeys, len(keys))]
			in := make(bson.A, len(part))
			for i, k := range part {
				in[i] = rk[f][k]
			}
			out = append(out, bson.D{{Key: f, Value: bson.D{{Key: "$in", Value: in}}}})
		}
	}
	return out
}

// unreached returns the dependency fields (of the job's documents) whose
// dependents a change of coll could not all be found for: the
// dependency's key is not _id, the stream has no pre-image of the changed
// document (before is nil), and the key's old value may differ from what
// Add gathered. A delete carries only the _id; a replace, or an update
// touching the key (by updateDesc), leaves the old value unknown; a
// change whose new version is gone (doc nil) has neither. The documents
// that still hold the old value were not sent again and keep the old
// join until their own next change. An insert has no old value.
func unreached(deps []jobdef.Dependency, coll, op string, doc, before, updateDesc bson.Raw) []string {
	if before != nil || op == "insert" {
		return nil
	}
	var out []string
	for _, d := range deps {
		if d.Namespace() != coll || d.Key == "_id" || slices.Contains(out, d.Field) {
			continue
		}
		if op == "update" && doc != nil && !touchesKey(updateDesc, d.Key) {
			continue
		}
		out = append(out, d.Field)
	}
	return out
}

// touchesKey says whether an update whose updateDescription is upd may
// have changed the value at key (a dotted path): some path it changed is
// key, above it or below it. An unreadable upd may have.
func touchesKey(upd bson.Raw, key string) bool {
	paths, ok := updatedPaths(upd)
	if !ok {
		return true
	}
	for _, p := range paths {
		if p == key || strings.HasPrefix(key, p+".") || strings.HasPrefix(p, key+".") {
			return true
		}
	}
	return false
}

// updatedPaths lists the paths of an updateDescription: updatedFields'
// keys, removedFields, truncatedArrays' fields; false when it is not one
// MongoDB writes.
func updatedPaths(upd bson.Raw) ([]string, bool) {
	fields, err := upd.LookupErr("updatedFields")
	if err != nil {
		return nil, false
	}
	d, ok := fields.DocumentOK()
	if !ok {
		return nil, false
	}
	els, err := d.Elements()
	if err != nil {
		return nil, false
	}
	var out []string
	for _, el := range els {
		out = append(out, el.Key())
	}
	for _, name := range []string{"removedFields", "truncatedArrays"} {
		v, err := upd.LookupErr(name)
		if err != nil {
			continue
		}
		a, ok := v.ArrayOK()
		if !ok {
			return nil, false
		}
		vals, err := a.Values()
		if err != nil {
			return nil, false
		}
		for _, x := range vals {
			if name == "truncatedArrays" {
				td, ok := x.DocumentOK()
				if !ok {
					return nil, false
				}
				x = td.Lookup("field")
			}
			s, ok := x.StringValueOK()
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
	}
	return out, true
}
