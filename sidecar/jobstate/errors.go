package jobstate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/clip"
	"github.com/meilistream/meilistream/internal/errs"
)

// Per-document errors live in the errors
// collection, one document per job and source _id:
//
//	{_id: {job, id: <source _id>}, job, sourceId: <source _id>, code,
//	 message, hash: <transform hash>, at: <server date of the last
//	 failure>, attempts: <int>}
//
// hash is the hash of the transform that failed on the document
// (jobdef.Job.Hash), so an operator can tell a failure of the current
// transform from one of an earlier version; absent when the writer did not
// know it.
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

// ErrorIndexKeys are the keys of the errors collection's one secondary
// index: a job's records newest first (ListDocErrors: equality on job, the
// sort on at and _id, the page cursor as a range on both) and a job's
// records at all (DocErrorIDs, when a job starts and after a swap) are
// each one index range instead of a scan of every job's records. Its name
// is MongoDB's default for these keys (job_1_at_-1__id_-1), so an operator
// who creates it by hand creates the same one.
var ErrorIndexKeys = bson.D{{Key: "job", Value: 1}, {Key: "at", Value: -1}, {Key: "_id", Value: -1}}

// ErrNoErrorIndex is returned (wrapped) by EnsureErrorIndex when the user
// may not create the index: every read of the errors collection still
// works, by scanning it.
var ErrNoErrorIndex = errors.New("the errors collection's index could not be created")

// codeUnauthorized is MongoDB's Unauthorized: the user lacks a privilege
// (here createIndex on the errors collection).
const codeUnauthorized = 13

// EnsureErrorIndex creates the errors collection's index (ErrorIndexKeys)
// if it is not there; creating an index that exists is a no-op on MongoDB,
// so every job start may call it. An index with these keys under another
// name (IndexOptionsConflict, 85) serves as well. A user without the
// createIndex privilege gets ErrNoErrorIndex wrapped in a FAILED error
// saying what to do; any other failure is FAILED.
func (s *Store) EnsureErrorIndex(ctx context.Context) error {
	if s.errColl == nil {
		return nil
	}
	_, err := s.errColl.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ErrorIndexKeys})
	var se mongo.ServerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.HasErrorCode(85):
		return nil
	case errors.As(err, &se) && se.HasErrorCode(codeUnauthorized):
		ns := s.errColl.Database().Name() + "." + s.errColl.Name()
		return errs.Wrap(errs.Failed, "", fmt.Errorf("%w: %w", ErrNoErrorIndex, err),
			"create the index {job: 1, at: -1, _id: -1} on %s: the user may not create indexes there; grant it createIndex on that collection (the readWrite role has it), or create the index once by hand (db.getSiblingDB(%q).%s.createIndex({job: 1, at: -1, _id: -1})); until then the error records are read by scanning the collection",
			ns, s.errColl.Database().Name(), s.errColl.Name())
	default:
		return errs.Wrap(errs.Failed, "", err, "create the index of the errors collection")
	}
}

func errKey(job string, id bson.RawValue) bson.D {
	return bson.D{{Key: "job", Value: job}, {Key: "id", Value: id}}
}

// RecordDocError upserts the error record of one document, without the
// transform's hash: RecordDocumentError with hash "".
func (s *Store) RecordDocError(ctx context.Context, job string, id bson.RawValue, code, msg string) error {
	return s.RecordDocumentError(ctx, job, id, code, msg, "")
}

// RecordDocumentError upserts the error record of one document: its code,
// message and the hash of the transform that failed on it ("" when
// unknown: a hash recorded earlier is then removed, it no longer says
// which transform failed).
func (s *Store) RecordDocumentError(ctx context.Context, job string, id bson.RawValue, code, msg, hash string) error {
	if s.errColl == nil {
		return nil
	}
	msg = cutMessage(msg, maxMessage)
	set := bson.D{
		{Key: "job", Value: job},
		{Key: "sourceId", Value: id},
		{Key: "code", Value: code},
		{Key: "message", Value: msg},
	}
	update := bson.D{
		{Key: "$set", Value: append(set, bson.E{Key: "hash", Value: hash})},
		{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}},
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
	}
	if hash == "" {
		update[0].Value = set
		update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: "hash", Value: ""}}})
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

// maxMessage bounds a recorded message, in bytes.
const maxMessage = 2000

// cutMessage cuts msg to at most max bytes and "...", never inside a UTF-8
// character.
func cutMessage(msg string, max int) string { return clip.Text(msg, max, "...") }

// DocError is one per-document error record, as ListDocErrors reads it.
type DocError struct {
	SourceID bson.RawValue // the document's _id in the source collection
	Code     string
	Message  string
	Hash     string    // the failing transform's hash; "" when not recorded
	At       time.Time // server time of the last failure
	Attempts int64     // failures recorded for it
}

// DocErrorPage is one page of a job's error records, newest first. Next
// is the cursor of the following page, "" when this is the last.
type DocErrorPage struct {
	Errors []DocError
	Next   string
}

// MaxDocErrorPage is the most records one page holds.
const MaxDocErrorPage = 1000

// ListDocErrors reads job's error records from errorsColl, newest first
// (by the time of their last failure, then by _id), at most limit of them
// (1 to MaxDocErrorPage), after the page cursor after ("" for the first
// page). Pages are cut by keys, not offsets: a record added while someone
// pages through is on the first page, and shifts no later one.
func ListDocErrors(ctx context.Context, errorsColl *mongo.Collection, job string, limit int, after string) (DocErrorPage, error) {
	if limit < 1 || limit > MaxDocErrorPage {
		return DocErrorPage{}, errs.New(errs.ConfigInvalid, job, "a page holds 1 to %d records, not %d", MaxDocErrorPage, limit)
	}
	filter := bson.D{{Key: "job", Value: job}}
	if after != "" {
		c, err := parseErrorCursor(after)
		if err != nil {
			return DocErrorPage{}, errs.Wrap(errs.ConfigInvalid, job, err, "bad page cursor %q (use the one the previous page printed)", after)
		}
		// After (at, _id) in the order of the sort: two ranges of the
		// index, each led by the job's equality, so the server merges
		// two index scans already in order (an indexed $or, MERGE_SORT)
		// and reads about one page of keys, however many records there
		// are; an $or beside the job's equality would lean on the
		// planner moving the equality into it.
		filter = bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "job", Value: job}, {Key: "at", Value: bson.D{{Key: "$lt", Value: c.At}}}},
			bson.D{{Key: "job", Value: job}, {Key: "at", Value: c.At}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: c.Key}}}},
		}}}
	}
	opts := options.Find().SetSort(ErrorPageSort).SetLimit(int64(limit) + 1)
	cur, err := errorsColl.Find(ctx, filter, opts)
	if err != nil {
		return DocErrorPage{}, errs.Wrap(errs.Failed, job, err, "read per-document errors")
	}
	defer cur.Close(ctx)
	var page DocErrorPage
	var last errorCursor
	for cur.Next(ctx) {
		if len(page.Errors) == limit {
			page.Next = last.String()
			break
		}
		var d struct {
			Code     string    `bson:"code"`
			Message  string    `bson:"message"`
			Hash     string    `bson:"hash"`
			At       time.Time `bson:"at"`
			Attempts int64     `bson:"attempts"`
		}
		if err := cur.Decode(&d); err != nil {
			return DocErrorPage{}, errs.Wrap(errs.Failed, job, err, "decode a per-document error")
		}
		e := DocError{Code: d.Code, Message: d.Message, Hash: d.Hash, At: d.At, Attempts: d.Attempts}
		if v, err := cur.Current.LookupErr("sourceId"); err == nil {
			e.SourceID = bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)}
		}
		key := cur.Current.Lookup("_id")
		last = errorCursor{At: d.At, Key: bson.RawValue{Type: key.Type, Value: append([]byte(nil), key.Value...)}}
		page.Errors = append(page.Errors, e)
	}
	if err := cur.Err(); err != nil {
		return DocErrorPage{}, errs.Wrap(errs.Failed, job, err, "read per-document errors")
	}
	return page, nil
}

// ErrorPageSort is the order of ListDocErrors' pages: newest first, then
// by _id; ErrorIndexKeys after its job.
var ErrorPageSort = bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: -1}}

// errorCursor is where a page of error records ends: the last record's
// time and _id. Its text is the BSON of both, base64url: opaque to users,
// and any _id type goes through it unchanged.
type errorCursor struct {
	At  time.Time     `bson:"at"`
	Key bson.RawValue `bson:"key"`
}

func (c errorCursor) String() string {
	b, err := bson.Marshal(c)
	if err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseErrorCursor(s string) (errorCursor, error) {
	var c errorCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, err
	}
	if err := bson.Unmarshal(b, &c); err != nil {
		return c, err
	}
	if c.Key.Type == 0 {
		return c, errors.New("no key in it")
	}
	return c, nil
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
