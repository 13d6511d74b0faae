package stream

import (
	"slices"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/jobdef"
)

// A job that declares its fields shares its database's stream like any
// other. The shared stream keeps, of each collection its jobs read, what
// the widest of them needs (collRead): the server drops a collection's
// updates only when every job reading it would drop them, and trims its
// documents only to the union of their fields. The Hub then hands each
// job its events as its own stream would carry them (narrow): the updates
// touching none of its fields dropped, the documents cut to its fields.
// With one job on a collection, the usual case, the server has already
// done both, and narrow only looks.

// collRead is what a shared stream keeps of one collection.
type collRead struct {
	db, coll string   // db "" in a database stream
	updates  []string // an update passes when it touches one of these; nil: every update
	trim     []string // documents are cut to _id and these; nil: whole
}

// reads is what job's own stream keeps of its collection: with fields,
// its updates touching them and its documents trimmed, except that an
// update of a collection it also looks up passes whole (Filter's clause
// of its dependencies has no update clause).
func reads(job *jobdef.Job, stateDB string) collRead {
	fields := job.StreamFields()
	r := collRead{db: orDBIf(job.Database, stateDB), coll: job.Collection, updates: fields, trim: fields}
	if fields != nil {
		for _, d := range job.Dependencies() {
			if d.Collection == job.Collection && orDBIf(d.Database, stateDB) == r.db {
				r.updates = nil
			}
		}
	}
	return r
}

// orDBIf is db, or stateDB for "", in a cluster-wide stream (stateDB set);
// "" in a database stream.
func orDBIf(db, stateDB string) string {
	if stateDB == "" {
		return ""
	}
	return orDB(db, stateDB)
}

// unionReads is what a stream shared by jobs keeps of each collection
// they read, in the order first met; stateDB is "" for a database stream.
func unionReads(jobs []*jobdef.Job, stateDB string) []collRead {
	var out []collRead
	at := map[[2]string]int{}
	add := func(r collRead) {
		k := [2]string{r.db, r.coll}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, r)
			return
		}
		out[i].updates = unionFields(out[i].updates, r.updates)
		out[i].trim = unionFields(out[i].trim, r.trim)
	}
	for _, j := range jobs {
		add(reads(j, stateDB))
		for _, d := range j.Dependencies() {
			add(collRead{db: orDBIf(d.Database, stateDB), coll: d.Collection})
		}
	}
	return out
}

// unionFields is the union of two field lists, nil (everything) when
// either is.
func unionFields(a, b []string) []string {
	if a == nil || b == nil {
		return nil
	}
	out := append(make([]string, 0, len(a)+len(b)), a...)
	for _, f := range b {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// collClauses are the clauses of a shared stream's $match for its
// collections: the whole collections in one $in (per database in a
// cluster-wide stream), each collection whose updates may be dropped in
// one of its own, and the renames to any of them.
func collClauses(rs []collRead) bson.A {
	whole, all := map[string]bson.A{}, map[string]bson.A{}
	var dbs []string
	var own bson.A
	for _, r := range rs {
		if _, ok := all[r.db]; !ok {
			dbs = append(dbs, r.db)
		}
		all[r.db] = append(all[r.db], r.coll)
		if r.updates == nil {
			whole[r.db] = append(whole[r.db], r.coll)
			continue
		}
		c := bson.D{{Key: "ns.coll", Value: r.coll}}
		if r.db != "" {
			c = append(bson.D{{Key: "ns.db", Value: r.db}}, c...)
		}
		own = append(own, append(c, updateClauseOf(r.updates)...))
	}
	sort.Strings(dbs)
	var or bson.A
	for _, db := range dbs {
		in := func(key string, colls bson.A) bson.D {
			d := bson.D{{Key: key + ".coll", Value: bson.D{{Key: "$in", Value: colls}}}}
			if db != "" {
				d = append(bson.D{{Key: key + ".db", Value: db}}, d...)
			}
			return d
		}
		if len(whole[db]) > 0 {
			or = append(or, in("ns", whole[db]))
		}
		or = append(or, in("to", all[db]))
	}
	return append(or, own...)
}

// unionTrim is the $set stage trimming the documents of the collections
// rs trims (a $switch on the namespace); nil when none is.
func unionTrim(rs []collRead) bson.D {
	var branches bson.A
	for _, r := range rs {
		if r.trim != nil {
			branches = append(branches, bson.D{{Key: "case", Value: isOf(r.db, r.coll)}, {Key: "then", Value: trimmedTo(r.trim)}})
		}
	}
	if len(branches) == 0 {
		return nil
	}
	return bson.D{{Key: "$set", Value: bson.D{{Key: "fullDocument", Value: bson.D{{Key: "$switch", Value: bson.D{
		{Key: "branches", Value: branches},
		{Key: "default", Value: "$fullDocument"},
	}}}}}}}
}

// narrowing is what a Sub's job drops and trims of its own collection's
// events that a shared stream may have kept (reads).
type narrowing struct {
	coll    string   // the collection's key in Hub.route (a namespace in a cluster-wide stream)
	updates []string // nil: keeps every update
	trim    []string // nil: keeps whole documents
}

// narrow is ev as the job's own stream would carry it, false when it
// would drop it: an update of its collection touching none of its
// fields, or a document with fields it does not keep.
func (n *narrowing) narrow(coll string, ev bson.Raw) (bson.Raw, bool) {
	if (n.updates == nil && n.trim == nil) || coll != n.coll {
		return ev, true
	}
	if n.updates != nil {
		if op, _ := ev.Lookup("operationType").StringValueOK(); op == "update" && !touches(ev, n.updates) {
			return nil, false
		}
	}
	if n.trim == nil {
		return ev, true
	}
	doc, ok := ev.Lookup("fullDocument").DocumentOK()
	if !ok || !hasOther(doc, n.trim) {
		return ev, true
	}
	return withDocument(ev, trimmed(doc, n.trim)), true
}

// touches says whether an update event changes one of fields: a key of
// its updatedFields, removedFields or truncatedArrays that is a field or
// a path within one (updateClauseOf's regex, in Go).
func touches(ev bson.Raw, fields []string) bool {
	hit := func(path string) bool {
		for _, f := range fields {
			if path == f || strings.HasPrefix(path, f) && len(path) > len(f) && path[len(f)] == '.' {
				return true
			}
		}
		return false
	}
	if upd, ok := ev.Lookup("updateDescription", "updatedFields").DocumentOK(); ok {
		elems, _ := upd.Elements()
		for _, e := range elems {
			if hit(e.Key()) {
				return true
			}
		}
	}
	if removed, ok := ev.Lookup("updateDescription", "removedFields").ArrayOK(); ok {
		vals, _ := removed.Values()
		for _, v := range vals {
			if s, ok := v.StringValueOK(); ok && hit(s) {
				return true
			}
		}
	}
	if arrays, ok := ev.Lookup("updateDescription", "truncatedArrays").ArrayOK(); ok {
		vals, _ := arrays.Values()
		for _, v := range vals {
			if s, ok := v.Document().Lookup("field").StringValueOK(); ok && hit(s) {
				return true
			}
		}
	}
	return false
}

// keeps says whether a document trimmed to fields keeps key.
func keeps(key string, fields []string) bool {
	return key == "_id" || slices.Contains(fields, key)
}

func hasOther(doc bson.Raw, fields []string) bool {
	elems, _ := doc.Elements()
	for _, e := range elems {
		if !keeps(e.Key(), fields) {
			return true
		}
	}
	return false
}

// trimmed is doc cut to _id and fields, in its order (trimmedTo, in Go).
func trimmed(doc bson.Raw, fields []string) bson.Raw {
	idx, out := bsoncore.AppendDocumentStart(nil)
	elems, _ := doc.Elements()
	for _, e := range elems {
		if keeps(e.Key(), fields) {
			out = append(out, e...)
		}
	}
	out, _ = bsoncore.AppendDocumentEnd(out, idx)
	return out
}

// withDocument is ev with its fullDocument replaced by doc, every other
// field as it was, in its place.
func withDocument(ev, doc bson.Raw) bson.Raw {
	idx, out := bsoncore.AppendDocumentStart(make([]byte, 0, len(ev)))
	elems, _ := ev.Elements()
	for _, e := range elems {
		if e.Key() == "fullDocument" {
			out = bsoncore.AppendDocumentElement(out, "fullDocument", doc)
			continue
		}
		out = append(out, e...)
	}
	out, _ = bsoncore.AppendDocumentEnd(out, idx)
	return out
}
