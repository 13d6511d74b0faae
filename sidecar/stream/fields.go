package stream

import (
	"regexp"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
)

// A job that declares the fields its transform reads (jobdef.Job.Fields;
// with its lookups' localFields: StreamFields) has the server do two
// things for it, so that what cannot change a
// result never crosses the network:
//
//   - its collection's updates that touch none of the fields are dropped
//     (updateClause). An update's updatedFields are keyed by dotted paths
//     ($set {"a.b": 1} shows as the key "a.b", an array element as
//     "arr.3"; removedFields and truncatedArrays' field likewise: the
//     change event reference, and change_stream_document_diff_parser.cpp
//     in mongodb/mongo), so a match on "updateDescription.updatedFields.a"
//     would miss "a.b": each key is matched by its first segment, with
//     $objectToArray and $regexMatch in $expr. Every other event of the
//     collection (insert, replace, delete, drop, rename) passes.
//   - the documents it reads are trimmed to _id and the fields: the
//     events' fullDocument (trimStage) and the reindex's reads
//     (Projection). The event's _id, its resume token, is never touched
//     (mongod fails a stream whose pipeline changes it, SERVER-37786),
//     and neither is anything else of the event: $set replaces
//     fullDocument only, and only for events of the job's collection
//     that carry a document; the watermark events of the state collection
//     pass as they are. $addFields/$set and $match are stages the manual
//     allows after $changeStream ("Modify Change Stream Output").
//
// A stream whose events are all dropped still moves on: each empty
// getMore carries a postBatchResumeToken past what the server scanned,
// which the follow loop records every positionInterval.

// fieldsRegex matches a dotted path whose first segment is one of fields.
func fieldsRegex(fields []string) string {
	quoted := make([]string, len(fields))
	for i, f := range fields {
		quoted[i] = regexp.QuoteMeta(f)
	}
	return `^(?:` + strings.Join(quoted, "|") + `)(?:\.|$)`
}

// updateClause is what an event of the job's collection must match: with
// fields, not an update, or an update touching one of them; nil without.
func updateClause(job *jobdef.Job) bson.D { return updateClauseOf(job.StreamFields()) }

// updateClauseOf is updateClause for the fields a stream keeps of one
// collection (nil: every event).
func updateClauseOf(fields []string) bson.D {
	if fields == nil {
		return nil
	}
	if len(fields) == 0 {
		// Only _id, which no update changes.
		return bson.D{{Key: "operationType", Value: bson.D{{Key: "$ne", Value: "update"}}}}
	}
	re := fieldsRegex(fields)
	some := func(input any, path string) bson.D {
		return bson.D{{Key: "$gt", Value: bson.A{
			bson.D{{Key: "$size", Value: bson.D{{Key: "$filter", Value: bson.D{
				{Key: "input", Value: input},
				{Key: "cond", Value: bson.D{{Key: "$regexMatch", Value: bson.D{{Key: "input", Value: path}, {Key: "regex", Value: re}}}}},
			}}}}},
			0,
		}}}
	}
	ifNull := func(path string, empty any) bson.D {
		return bson.D{{Key: "$ifNull", Value: bson.A{path, bson.D{{Key: "$literal", Value: empty}}}}}
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$ne", Value: "update"}}}},
		bson.D{{Key: "$expr", Value: bson.D{{Key: "$or", Value: bson.A{
			some(bson.D{{Key: "$objectToArray", Value: ifNull("$updateDescription.updatedFields", bson.D{})}}, "$$this.k"),
			some(ifNull("$updateDescription.removedFields", bson.A{}), "$$this"),
			some(ifNull("$updateDescription.truncatedArrays", bson.A{}), "$$this.field"),
		}}}}},
	}}}
}

// collClause matches the events of the job's collection that the job
// needs.
func collClause(job *jobdef.Job) bson.D {
	d := bson.D{{Key: "ns.coll", Value: job.Collection}}
	if u := updateClause(job); u != nil {
		d = append(d, u...)
	}
	return d
}

// keepOf is the array of the names a document trimmed to fields keeps.
func keepOf(fields []string) bson.A {
	a := bson.A{"_id"}
	for _, f := range fields {
		a = append(a, f)
	}
	return a
}

// trimStage is the $set stage that trims the fullDocument of the job's
// collection's events to _id and the fields, in the document's order;
// nil without fields. db, when not "", is the job's database, which a
// cluster-wide stream must match too.
func trimStage(job *jobdef.Job, db string) bson.D {
	fields := job.StreamFields()
	if fields == nil {
		return nil
	}
	return bson.D{{Key: "$set", Value: bson.D{{Key: "fullDocument", Value: bson.D{{Key: "$cond", Value: bson.D{
		{Key: "if", Value: isOf(db, job.Collection)},
		{Key: "then", Value: trimmedTo(fields)},
		{Key: "else", Value: "$fullDocument"},
	}}}}}}}
}

// isOf is the expression true of an event of collection coll (of database
// db, when not "") that carries a document.
func isOf(db, coll string) bson.D {
	ifOwn := bson.A{
		bson.D{{Key: "$eq", Value: bson.A{"$ns.coll", bson.D{{Key: "$literal", Value: coll}}}}},
		bson.D{{Key: "$eq", Value: bson.A{bson.D{{Key: "$type", Value: "$fullDocument"}}, "object"}}},
	}
	if db != "" {
		ifOwn = append(bson.A{bson.D{{Key: "$eq", Value: bson.A{"$ns.db", bson.D{{Key: "$literal", Value: db}}}}}}, ifOwn...)
	}
	return bson.D{{Key: "$and", Value: ifOwn}}
}

// trimmedTo is the event's fullDocument cut to _id and fields, in the
// document's order.
func trimmedTo(fields []string) bson.D {
	return bson.D{{Key: "$arrayToObject", Value: bson.D{{Key: "$filter", Value: bson.D{
		{Key: "input", Value: bson.D{{Key: "$objectToArray", Value: "$fullDocument"}}},
		{Key: "cond", Value: bson.D{{Key: "$in", Value: bson.A{"$$this.k", bson.D{{Key: "$literal", Value: keepOf(fields)}}}}}},
	}}}}}
}

// Projection is the projection of the job's reads of its collection (a
// reindex's chunks, a retry): _id and the fields; nil without fields.
func Projection(job *jobdef.Job) bson.D {
	fields := job.StreamFields()
	if fields == nil {
		return nil
	}
	p := bson.D{{Key: "_id", Value: 1}}
	for _, f := range fields {
		p = append(p, bson.E{Key: f, Value: 1})
	}
	return p
}

// Pipeline is the pipeline of a job's change stream: Filter, and with
// fields the stage trimming documents.
func Pipeline(job *jobdef.Job, state string) []bson.D {
	p := []bson.D{Filter(job, state)}
	if t := trimStage(job, ""); t != nil {
		p = append(p, t)
	}
	return p
}

// ClusterPipeline is Pipeline for a cluster-wide stream (Cluster): its
// clauses name databases (ClusterFilter), stateDB the state collection's.
func ClusterPipeline(job *jobdef.Job, stateDB, state string) []bson.D {
	p := []bson.D{ClusterFilter(job, stateDB, state)}
	db := job.Database
	if db == "" {
		db = stateDB
	}
	if t := trimStage(job, db); t != nil {
		p = append(p, t)
	}
	return p
}
