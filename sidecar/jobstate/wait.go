package jobstate

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Read your writes (docs/read-your-writes.md) keeps two things here:
//
//	{_id: {position: <job>}, ..., durable: <timestamp>}
//	{_id: {wait: <job>}, n: <int64>, at: <server date>}
//
// durable, written with every position the holder records, is the cluster
// time up to which every change of the job's collections is durable in the
// destination. The wait document is written by any process that has a
// waiter for the job (a standby, `meilistream wait`, the holder itself),
// never fenced: its write is one more event in the holder's ordered
// stream, after every write the waiter can have seen, so once the holder
// has made it durable, everything before it is.

// DurableField is the position's field holding the durable cluster time.
const DurableField = "durable"

func waitKey(job string) bson.D { return bson.D{{Key: "wait", Value: job}} }

// WaitDocument is the _id of the job's wait document, for the $match of
// the job's change stream.
func WaitDocument(job string) bson.D { return waitKey(job) }

// MarkWait writes the job's wait document and returns the cluster time of
// that write (the reply's operationTime): the holder's durable time passes
// it once everything written before it is durable.
func MarkWait(ctx context.Context, state *mongo.Collection, job string) (bson.Timestamp, error) {
	sess, err := state.Database().Client().StartSession()
	if err != nil {
		return bson.Timestamp{}, err
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	err = mongo.WithSession(ctx, sess, func(ctx context.Context) error {
		_, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: waitKey(job)}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int64(1)}}},
				{Key: "$currentDate", Value: bson.D{{Key: "at", Value: true}}}},
			options.UpdateOne().SetUpsert(true))
		return err
	})
	if err != nil {
		return bson.Timestamp{}, err
	}
	ts := sess.OperationTime()
	if ts == nil {
		return bson.Timestamp{}, errors.New("the server gave no operationTime for the wait document's write")
	}
	return *ts, nil
}

// ReadDurable returns the durable cluster time the job's holder last
// recorded with its position (zero when none was).
func ReadDurable(ctx context.Context, state *mongo.Collection, job string) (bson.Timestamp, error) {
	var d struct {
		Durable bson.Timestamp `bson:"durable"`
	}
	err := state.FindOne(ctx, bson.D{{Key: "_id", Value: posKey(job)}},
		options.FindOne().SetProjection(bson.D{{Key: DurableField, Value: 1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bson.Timestamp{}, nil
	}
	return d.Durable, err
}
