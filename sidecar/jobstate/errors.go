package jobstate

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
)

// Per-document errors live in the errors
// collection, one document per job and source _id:
//
//	{_id: {job, id: <source _id>}, job, sourceId: <source _id>, code,
//	 message, at: <server date of the last failure>, attempts: <int>}
//
// code is an error code of this project (TRANSFORM_FAILED, NOT_A_DOCUMENT,
// ID_MISMATCH) for a transform's refusal, or the destination's own code
// (e.g. Meilisearch's invalid_document_id) for a document it refused. A
// document with a record is left out of the destination: the engine deletes
// what the destination held for it, so the destination always equals the
// transform of the collection minus the recorded documents, whether it was
// built by a reindex or kept by follow. The record stays until `meilistream
// retry` writes the document, or a reindex or a later change writes it
// without error (then the record is cleared).

func errKey(job string, id bson.RawValue) bson.D {
	return bson.D{{Key: "job", Value: job}, {Key: "id", Value: id}}
}

// RecordDocError upserts the error record of one document.
func (s *Store) RecordDocError(ctx context.Context, job string, id bson.RawValue, code, msg string) error {
	if s.errColl == nil {
		return nil
	}
	if len(msg) > 2000 {
		msg = msg[:2000] + "..."
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "job", Value: job},
			{Key: "sourceId", Value: id},
			{Key: "code", Value: code},
			{Key: "message", Value: msg},
		}},
		{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}},
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
	}
	_, err := s.errColl.UpdateOne(ctx, bson.D{{Key: "_id", Value: errKey(job, id)}}, update, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "record a per-document error")
	}
	return nil
}

// ClearDocErrors deletes the error records of ids (written without error).
func (s *Store) ClearDocErrors(ctx context.Context, job string, ids []bson.RawValue) (int64, error) {
	if s.errColl == nil || len(ids) == 0 {
		return 0, nil
	}
	keys := make(bson.A, len(ids))
	for i, id := range ids {
		keys[i] = errKey(job, id)
	}
	res, err := s.errColl.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: keys}}}})
	if err != nil {
		return 0, errs.Wrap(errs.Failed, job, err, "clear per-document errors")
	}
	return res.DeletedCount, nil
}

// DocErrorIDs returns the source _ids of job's error records.
func (s *Store) DocErrorIDs(ctx context.Context, job string) ([]bson.RawValue, error) {
	if s.errColl == nil {
		return nil, nil
	}
	cur, err := s.errColl.Find(ctx, bson.D{{Key: "job", Value: job}}, options.Find().SetProjection(bson.D{{Key: "sourceId", Value: 1}}))
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read per-document errors")
	}
	defer cur.Close(ctx)
	var ids []bson.RawValue
	for cur.Next(ctx) {
		v, err := cur.Current.LookupErr("sourceId")
		if err != nil {
			continue
		}
		ids = append(ids, bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)})
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read per-document errors")
	}
	return ids, nil
}

func countErrors(ctx context.Context, coll *mongo.Collection) (map[string]int64, error) {
	cur, err := coll.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$job"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "count per-document errors")
	}
	defer cur.Close(ctx)
	out := map[string]int64{}
	for cur.Next(ctx) {
		var d struct {
			ID string `bson:"_id"`
			N  int64  `bson:"n"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, errs.Wrap(errs.Failed, "", err, "count per-document errors")
		}
		out[d.ID] = d.N
	}
	return out, cur.Err()
}
