package transform

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
)

// The sidecar's own collections (Options.Private) hold what no one who can
// search an index may read: the state collection's leases (holder, nonce,
// epoch), positions and resume tokens, presence records and retry
// requests, and the errors collection's failed documents of every job. A
// transform returns what it reads, so no transform may read them:
//
//   - a job whose lookups' from or relates' namespace names one of the
//     main database (MEILISTREAM_MONGODB_DATABASE) is CONFIG_INVALID at
//     load (so at check and at run); a job whose collection is one stops
//     meilistream run at start, with the other settings a job cannot run
//     without;
//   - findId, findOne, find and pipe naming one (collection, with the
//     job's database or options.database the sidecar's), and a pipeline
//     reaching one by $lookup, $graphLookup or $unionWith at any depth
//     ($facet, a sub-pipeline), fail the document (TRANSFORM_FAILED,
//     whatever the script does with what is thrown). The same names in
//     another database are other collections.
//
// Without Options.Database (check without MEILISTREAM_MONGODB_URI), a
// read of those names in any database is refused: which one is the
// sidecar's is not known.

// privateColl says what coll of database db is when the sidecar writes
// it ("" : a collection like any other).
func (o *Options) privateColl(db, coll string) string {
	if o.Database != "" && db != o.Database {
		return ""
	}
	return o.Private[coll]
}

// refusePrivate is CONFIG_INVALID when j would read one of the sidecar's
// own collections.
func (j *Job) refusePrivate() error {
	if len(j.opts.Private) == 0 {
		return nil
	}
	var problems []string
	// Only the main database's collections of those names are the
	// sidecar's; in another database they are collections like any other.
	refuse := func(what, db, coll string) {
		if p := j.opts.privateColl(db, coll); p != "" {
			problems = append(problems, fmt.Sprintf("%s %q is %s, which no job may read; name another collection", what, coll, p))
		}
	}
	for _, l := range j.Lookups {
		refuse(fmt.Sprintf("lookup %q: from", l.Name), l.Database, l.From)
	}
	for _, r := range j.Relates {
		refuse("relate: namespace", r.Database, r.Namespace)
	}
	if len(problems) == 0 {
		return nil
	}
	return errs.New(errs.ConfigInvalid, j.Name, "%s: %s", j.file(), strings.Join(problems, "; "))
}

// refuseRead is TRANSFORM_FAILED when the read rc names one of the
// sidecar's own collections, itself or through a stage of its pipeline.
func (j *Job) refuseRead(rc *readCall) error {
	if len(j.opts.Private) == 0 {
		return nil
	}
	found := func(db, coll, how string) error {
		p := j.opts.privateColl(db, coll)
		if p == "" {
			return nil
		}
		where := fmt.Sprintf("%s.%s is %s", db, coll, p)
		if how != "" {
			where = fmt.Sprintf("%s %s.%s, %s", how, db, coll, p)
		}
		return errs.New(errs.TransformFailed, j.Name, "%s on %s.%s: %s, which no transform may read; read another collection",
			rc.fn, rc.db, rc.coll, where)
	}
	if err := found(rc.db, rc.coll, ""); err != nil {
		return err
	}
	for _, st := range rc.stages {
		if err := stageReads(bson.Raw(st), rc.db, found); err != nil {
			return err
		}
	}
	return nil
}

// joinStages are the stages that read another collection, and the key
// naming it ($unionWith also takes the name alone).
var joinStages = map[string]string{"$lookup": "from", "$graphLookup": "from", "$unionWith": "coll"}

// stageReads calls found with every collection doc, a pipeline stage or
// any document inside one, reads by a join stage, at any depth: a
// sub-pipeline and $facet are documents inside the stage. A namespace is
// a name of db, or {db, coll}.
func stageReads(doc bson.Raw, db string, found func(db, coll, how string) error) error {
	els, err := doc.Elements()
	if err != nil {
		return nil // the server refuses it
	}
	for _, el := range els {
		v := el.Value()
		if key, ok := joinStages[el.Key()]; ok {
			target := v
			if d, isDoc := v.DocumentOK(); isDoc {
				target = d.Lookup(key)
			}
			if err := namespaceReads(target, db, el.Key(), found); err != nil {
				return err
			}
		}
		if err := valueReads(v, db, found); err != nil {
			return err
		}
	}
	return nil
}

func valueReads(v bson.RawValue, db string, found func(db, coll, how string) error) error {
	if d, ok := v.DocumentOK(); ok {
		return stageReads(d, db, found)
	}
	if a, ok := v.ArrayOK(); ok {
		vals, _ := a.Values()
		for _, x := range vals {
			if err := valueReads(x, db, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// namespaceReads checks what a join stage names: a collection of db, or
// {db, coll}.
func namespaceReads(v bson.RawValue, db, stage string, found func(db, coll, how string) error) error {
	if s, ok := v.StringValueOK(); ok {
		return found(db, s, "its "+stage+" reads")
	}
	if d, ok := v.DocumentOK(); ok {
		in, coll := db, ""
		if x, ok := d.Lookup("db").StringValueOK(); ok {
			in = x
		}
		if x, ok := d.Lookup("coll").StringValueOK(); ok {
			coll = x
		}
		return found(in, coll, "its "+stage+" reads")
	}
	return nil
}
