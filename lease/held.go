package lease

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// HeldBy returns the holder of the lease name in coll, "" when it is free
// or expired (judged by the server clock, as List does).
func HeldBy(ctx context.Context, coll *mongo.Collection, name string) (string, error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: key(name)}},
		{{Key: "$project", Value: bson.D{
			{Key: "holder", Value: 1},
			{Key: "expired", Value: bson.D{{Key: "$lte", Value: bson.A{"$expiresAt", "$$NOW"}}}},
		}}},
	}
	cur, err := coll.Aggregate(ctx, pipeline, options.Aggregate())
	if err != nil {
		return "", err
	}
	defer cur.Close(ctx)
	var row struct {
		Holder  string `bson:"holder"`
		Expired bool   `bson:"expired"`
	}
	if !cur.Next(ctx) {
		if err := cur.Err(); err != nil {
			return "", err
		}
		return "", nil
	}
	if err := cur.Decode(&row); err != nil {
		return "", errors.Join(errors.New("decode lease"), err)
	}
	if row.Expired {
		return "", nil
	}
	return row.Holder, nil
}
