package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/meilistream/meilistream/transform"
)

// newReader returns what the jobs' monstache-style transforms read the
// source MongoDB with (their findId, findOne, find and pipe globals; pass
// it as transform.Options.Reader). It reads through client, from the
// primary, so that a script sees what the change it is called for already
// sees: the change stream's events are majority-committed, and a secondary
// may not have them yet. Every call is bounded by the context the
// transform gives it (its call's remaining time limit).
func newReader(client *mongo.Client) transform.Reader {
	return &reader{client: client}
}

// reader implements transform.Reader over a MongoDB client.
type reader struct {
	client *mongo.Client
}

var _ transform.Reader = (*reader)(nil)

var primary = options.Database().SetReadPreference(readpref.Primary())

func (r *reader) coll(db, coll string) *mongo.Collection {
	return r.client.Database(db, primary).Collection(coll)
}

// FindOne implements transform.Reader.
func (r *reader) FindOne(ctx context.Context, db, coll string, filter bson.Raw, opts transform.ReadOptions) (bson.Raw, error) {
	o := options.FindOne()
	if opts.Projection != nil {
		o.SetProjection(opts.Projection)
	}
	if opts.Sort != nil {
		o.SetSort(opts.Sort)
	}
	raw, err := r.coll(db, coll).FindOne(ctx, filter, o).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, readErr(err)
	}
	return raw, nil
}

// Find implements transform.Reader.
func (r *reader) Find(ctx context.Context, db, coll string, filter bson.Raw, opts transform.ReadOptions) ([]bson.Raw, error) {
	o := options.Find().SetLimit(opts.Limit).SetBatchSize(batchOf(opts.Limit))
	if opts.Projection != nil {
		o.SetProjection(opts.Projection)
	}
	if opts.Sort != nil {
		o.SetSort(opts.Sort)
	}
	cur, err := r.coll(db, coll).Find(ctx, filter, o)
	if err != nil {
		return nil, readErr(err)
	}
	return drain(ctx, cur, opts)
}

// Aggregate implements transform.Reader. A $limit of opts.Limit goes at the
// end of the pipeline, so the server stops there too: it changes nothing of
// the first opts.Limit documents.
func (r *reader) Aggregate(ctx context.Context, db, coll string, stages []bson.Raw, opts transform.ReadOptions) ([]bson.Raw, error) {
	pipeline := make(bson.A, 0, len(stages)+1)
	for _, s := range stages {
		pipeline = append(pipeline, s)
	}
	pipeline = append(pipeline, bson.D{{Key: "$limit", Value: opts.Limit}})
	cur, err := r.coll(db, coll).Aggregate(ctx, pipeline, options.Aggregate().SetBatchSize(batchOf(opts.Limit)))
	if err != nil {
		return nil, readErr(err)
	}
	return drain(ctx, cur, opts)
}

// batchOf asks for the whole answer in one batch when it is small.
func batchOf(limit int64) int32 {
	return int32(min(max(limit, 1), 1001))
}

// drain reads at most opts.Limit documents, stopping once they hold more
// than opts.MaxBytes, each copied out of the cursor's buffer. The cursor is
// closed even when ctx has ended, so the server does not keep it.
func drain(ctx context.Context, cur *mongo.Cursor, opts transform.ReadOptions) ([]bson.Raw, error) {
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = cur.Close(cctx)
	}()
	var out []bson.Raw
	size := 0
	for int64(len(out)) < opts.Limit && size <= opts.MaxBytes && cur.Next(ctx) {
		d := append(bson.Raw(nil), cur.Current...)
		out = append(out, d)
		size += len(d)
	}
	if err := cur.Err(); err != nil {
		return nil, readErr(err)
	}
	return out, nil
}

// serverSideCodes are server answers that say nothing of the query: the
// primary stepping down or shutting down, an interrupt, a cursor killed,
// missing privileges. Any other error the server answers is its verdict on
// the query (a bad operator, a malformed stage: src/mongo/base/error_codes.yml
// and the Location codes of the query and pipeline parsers).
var serverSideCodes = map[int]bool{
	6: true, 7: true, 89: true, 9001: true, // HostUnreachable, HostNotFound, NetworkTimeout, SocketException
	11: true, 13: true, 18: true, // UserNotFound, Unauthorized, AuthenticationFailed
	43: true, 175: true, 237: true, // CursorNotFound, QueryPlanKilled, CursorKilled
	50: true, 202: true, 262: true, // MaxTimeMSExpired, NetworkInterfaceExceededTimeLimit, ExceededTimeLimit
	91: true, 11600: true, 11601: true, 11602: true, // ShutdownInProgress, InterruptedAtShutdown, Interrupted, InterruptedDueToReplStateChange
	133: true, 134: true, 189: true, // FailedToSatisfyReadPreference, ReadConcernMajorityNotAvailableYet, PrimarySteppedDown
	10107: true, 13435: true, 13436: true, // NotWritablePrimary, NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary
	13388: true, 63: true, 150: true, // StaleConfig, StaleShardVersion, StaleEpoch
	462: true, 8000: true, // IngressRequestRateLimitExceeded, AtlasError
}

// readErr marks the server refusing the query as transform.ErrQuery (the
// script's mistake, its document fails); the rest (unreachable, not
// primary, a timeout, privileges) is left as it is, and fails the batch,
// to be tried again.
func readErr(err error) error {
	var ce mongo.CommandError
	if !errors.As(err, &ce) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) || ce.HasErrorLabel("NetworkError") {
		return err
	}
	if serverSideCodes[int(ce.Code)] {
		return err
	}
	return fmt.Errorf("%w: (%s) %s", transform.ErrQuery, ce.Name, ce.Message)
}
