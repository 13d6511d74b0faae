package engine

import (
	"sort"

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

// Add notes the values the changed document of coll gives the job's
// dependencies on coll, and returns how many are new: doc is the changed
// document (its new version, nil for a delete), before its previous
// version when the stream has it, id its _id.
func (rk relatedKeys) Add(deps []jobdef.Dependency, coll string, doc, before bson.Raw, id bson.RawValue) int {
	n := 0
	for _, d := range deps {
		if d.Collection != coll {
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
