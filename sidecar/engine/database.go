package engine

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/jobdef"
)

// A job reads its collection from its own database (jobdef.Job.Database),
// and each lookup and relate from theirs; the state collection, with the
// job's watermark and wait documents, stays in the main database, the
// engine's source. A job reading only the main database follows a
// database stream; one reading another follows a cluster-wide stream
// (stream.Cluster), whose events the follow loop tells apart by namespace
// (db.coll), never by collection name alone: users of database a and
// users of database b are two collections.

// dbNamed returns the database name of main's client; "" is main itself
// (a job built without a database, as the tests build some).
func dbNamed(main *mongo.Database, name string) *mongo.Database {
	if name == "" || name == main.Name() {
		return main
	}
	return main.Client().Database(name)
}

// jobColl is job's collection, in its database.
func jobColl(main *mongo.Database, job *jobdef.Job, opts ...options.Lister[options.CollectionOptions]) *mongo.Collection {
	return dbNamed(main, job.Database).Collection(job.Collection, opts...)
}

// resolvedDeps are job's dependencies with the main database (mainDB)
// given to those that name none, so Namespace compares with an event's.
func resolvedDeps(job *jobdef.Job, mainDB string) []jobdef.Dependency {
	deps := job.Dependencies()
	for i := range deps {
		if deps[i].Database == "" {
			deps[i].Database = mainDB
		}
	}
	return deps
}

// namespaceOf is the namespace (db.coll) an event's field at (ns, to)
// names; "" without one.
func namespaceOf(ev bson.Raw, at string) string {
	coll, ok := ev.Lookup(at, "coll").StringValueOK()
	if !ok {
		return ""
	}
	db, _ := ev.Lookup(at, "db").StringValueOK()
	return jobdef.Namespace(db, coll)
}
