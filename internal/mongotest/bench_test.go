package mongotest_test

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// BenchmarkInsertMany1KB measures inserting ~1 KB documents in batches of
// 1000 through the driver (what the engine's end-to-end benchmarks do).
func BenchmarkInsertMany1KB(b *testing.B) {
	srv, client := startB(b)
	_ = srv
	coll := client.Database("bench").Collection("c")
	pad := strings.Repeat("x", 1000)
	batch := make([]any, 1000)
	b.SetBytes(1024 * 1000)
	b.ResetTimer()
	id := 0
	for i := 0; i < b.N; i++ {
		for j := range batch {
			raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "pad", Value: pad}})
			batch[j] = bson.Raw(raw)
			id++
		}
		if _, err := coll.InsertMany(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFindPageByID measures one 1000-document page of
// find({_id: {$gt: X}}).sort({_id: 1}).limit(1000) over 200k documents.
func BenchmarkFindPageByID(b *testing.B) {
	_, client := startB(b)
	coll := client.Database("bench").Collection("c")
	pad := strings.Repeat("x", 1000)
	const n = 200000
	for start := 0; start < n; start += 10000 {
		batch := make([]any, 10000)
		for j := range batch {
			raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: start + j}, {Key: "pad", Value: pad}})
			batch[j] = bson.Raw(raw)
		}
		if _, err := coll.InsertMany(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from := (i * 1000) % (n - 1000)
		cur, err := coll.Find(context.Background(), bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: from}}}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(1000).SetBatchSize(1000))
		if err != nil {
			b.Fatal(err)
		}
		k := 0
		for cur.Next(context.Background()) {
			k++
		}
		if k != 1000 {
			b.Fatalf("page of %d", k)
		}
	}
}
