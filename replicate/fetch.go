package replicate

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"

	"github.com/meilistream/meilistream/jobdef"
)

// Fetch reads the replica's documents of ids, whole, by _id (majority read
// concern: what the sink's majority writes made durable).
func (s *Sink) Fetch(ctx context.Context, ids []bson.RawValue) ([][]byte, error) {
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in := make(bson.A, len(ids))
	at := make(map[string][]int, len(ids))
	for i, id := range ids {
		in[i] = id
		k := jobdef.IDKey(id)
		at[k] = append(at[k], i)
	}
	coll := s.replica.Database().Collection(s.replica.Name(), options.Collection().SetReadConcern(readconcern.Majority()))
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}})
	if err != nil {
		return nil, fmt.Errorf("read documents back from the replica %s: %w", s.namespace(), err)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	for cur.Next(ctx) {
		doc := append([]byte(nil), cur.Current...)
		for _, i := range at[jobdef.IDKey(cur.Current.Lookup("_id"))] {
			out[i] = doc
		}
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read documents back from the replica %s: %w", s.namespace(), err)
	}
	return out, nil
}
