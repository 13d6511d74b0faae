package mongotest_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

func TestHandshakePingAndHello(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	if err := client.Ping(c, readpref.Primary()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	var hello bson.M
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	if hello["setName"] != "rs0" || hello["isWritablePrimary"] != true {
		t.Fatalf("hello = %v", hello)
	}
	if _, ok := hello["topologyVersion"]; ok {
		t.Fatal("hello must not carry topologyVersion (driver would stream hellos)")
	}
	if _, ok := hello["operationTime"].(bson.Timestamp); !ok {
		t.Fatalf("operationTime missing: %v", hello)
	}
	var bi bson.M
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		t.Fatal(err)
	}
	if bi["version"] == nil {
		t.Fatalf("buildInfo = %v", bi)
	}
}

func TestInsertFindRoundTrip(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	docs := []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 5}, {Key: "tags", Value: bson.A{"a", "b"}}, {Key: "sub", Value: bson.D{{Key: "x", Value: "y"}}}},
		bson.D{{Key: "_id", Value: 2}, {Key: "n", Value: 7.5}, {Key: "tags", Value: bson.A{"c"}}, {Key: "sub", Value: bson.D{{Key: "x", Value: "z"}}}},
		bson.D{{Key: "_id", Value: 3}, {Key: "n", Value: int64(9)}, {Key: "when", Value: time.Unix(100, 0)}},
		bson.D{{Key: "_id", Value: 4}, {Key: "n", Value: nil}},
	}
	if _, err := coll.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		filter bson.D
		want   []int32
	}{
		{"equality on a number matches across numeric types", bson.D{{Key: "n", Value: 9}}, []int32{3}},
		{"an array field matches one of its elements", bson.D{{Key: "tags", Value: "b"}}, []int32{1}},
		{"a dotted path reaches into sub-documents", bson.D{{Key: "sub.x", Value: "z"}}, []int32{2}},
		{"$gt brackets by type", bson.D{{Key: "n", Value: bson.D{{Key: "$gt", Value: 6}}}}, []int32{2, 3}},
		{"$lte", bson.D{{Key: "n", Value: bson.D{{Key: "$lte", Value: 7.5}}}}, []int32{1, 2}},
		{"null matches null and missing", bson.D{{Key: "sub", Value: nil}}, []int32{3, 4}},
		{"$ne matches missing", bson.D{{Key: "sub.x", Value: bson.D{{Key: "$ne", Value: "y"}}}}, []int32{2, 3, 4}},
		{"$in", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{4, 1, 99}}}}}, []int32{1, 4}},
		{"$nin", bson.D{{Key: "_id", Value: bson.D{{Key: "$nin", Value: bson.A{1, 2}}}}}, []int32{3, 4}},
		{"$exists", bson.D{{Key: "when", Value: bson.D{{Key: "$exists", Value: true}}}}, []int32{3}},
		{"$or", bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "n", Value: nil}}}}}, []int32{1, 4}},
		{"$and", bson.D{{Key: "$and", Value: bson.A{bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: 2}}}}, bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: 4}}}}}}}, []int32{2, 3}},
		{"$nor", bson.D{{Key: "$nor", Value: bson.A{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}}}, []int32{3, 4}},
		{"$not", bson.D{{Key: "_id", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: 2}}}}}}, []int32{1, 2}},
		{"$expr compares fields with expression rules", bson.D{{Key: "$expr", Value: bson.D{{Key: "$gt", Value: bson.A{"$n", 6}}}}}, []int32{2, 3}},
		{"$lt a date never matches numbers", bson.D{{Key: "n", Value: bson.D{{Key: "$lt", Value: time.Now()}}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur, err := coll.Find(c, tc.filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			var got []struct {
				ID int32 `bson:"_id"`
			}
			if err := cur.All(c, &got); err != nil {
				t.Fatal(err)
			}
			var ids []int32
			for _, g := range got {
				ids = append(ids, g.ID)
			}
			if !equalInts(ids, tc.want) {
				t.Fatalf("got %v, want %v", ids, tc.want)
			}
		})
	}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFindSortProjectionLimitBatches(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	var docs []any
	for i := 0; i < 250; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "k", Value: i % 7}, {Key: "s", Value: "x"}})
	}
	if _, err := coll.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	// A page by _id: the paging query the engine uses for reindex.
	cur, err := coll.Find(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: 100}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(120).SetBatchSize(50).SetProjection(bson.D{{Key: "s", Value: 0}}))
	if err != nil {
		t.Fatal(err)
	}
	var page []bson.M
	if err := cur.All(c, &page); err != nil {
		t.Fatal(err)
	}
	if len(page) != 120 || page[0]["_id"] != int32(101) || page[119]["_id"] != int32(220) {
		t.Fatalf("page: %d docs, first %v", len(page), page[0])
	}
	if _, ok := page[0]["s"]; ok {
		t.Fatal("projection did not exclude s")
	}
	// Sort on another field, descending, with skip, and an inclusion projection.
	cur, err = coll.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "k", Value: -1}, {Key: "_id", Value: 1}}).SetSkip(2).SetLimit(3).SetProjection(bson.D{{Key: "k", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var top []bson.D
	if err := cur.All(c, &top); err != nil {
		t.Fatal(err)
	}
	if len(top) != 3 || top[0][0].Value != int32(20) || len(top[0]) != 2 {
		t.Fatalf("sorted: %v", top)
	}
	// Whole collection through getMore batches.
	cur, err = coll.Find(c, bson.D{}, options.Find().SetBatchSize(7))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for cur.Next(c) {
		n++
	}
	if n != 250 || cur.Err() != nil {
		t.Fatalf("iterated %d: %v", n, cur.Err())
	}
	// batchSize 0 opens the cursor with an empty first batch.
	cur, err = coll.Find(c, bson.D{}, options.Find().SetBatchSize(0))
	if err != nil {
		t.Fatal(err)
	}
	if n := cur.RemainingBatchLength(); n != 0 || cur.ID() == 0 {
		t.Fatalf("batchSize 0: %d docs, id %d", n, cur.ID())
	}
	cur.Close(c)
	// killCursors through Close.
	cur, err = coll.Find(c, bson.D{}, options.Find().SetBatchSize(2))
	if err != nil {
		t.Fatal(err)
	}
	cur.Next(c)
	if err := cur.Close(c); err != nil {
		t.Fatal(err)
	}
	if n, err := coll.CountDocuments(c, bson.D{{Key: "k", Value: 3}}); err != nil || n != 36 {
		t.Fatalf("count %d %v", n, err)
	}
	if n, err := coll.EstimatedDocumentCount(c); err != nil || n != 250 {
		t.Fatalf("estimated count %d %v", n, err)
	}
	var one bson.M
	if err := coll.FindOne(c, bson.D{{Key: "k", Value: 6}}, options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}})).Decode(&one); err != nil || one["_id"] != int32(244) {
		t.Fatalf("findOne %v %v", one, err)
	}
	if err := coll.FindOne(c, bson.D{{Key: "k", Value: 99}}).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("findOne missing: %v", err)
	}
}

// leaseUpdate is the lease write shape the lease package uses: an upsert
// on _id whose pipeline takes the lease only when it is free, expired or
// already ours, with every time from $$NOW.
func leaseUpdate(holder string, ttl time.Duration) mongo.Pipeline {
	free := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "$lte", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$expiresAt", nil}}}, "$$NOW"}}},
		bson.D{{Key: "$eq", Value: bson.A{"$holder", holder}}},
	}}}
	pick := func(then, els any) bson.D {
		return bson.D{{Key: "$cond", Value: bson.D{{Key: "if", Value: free}, {Key: "then", Value: then}, {Key: "else", Value: els}}}}
	}
	return mongo.Pipeline{
		{{Key: "$set", Value: bson.D{
			{Key: "holder", Value: pick(holder, "$holder")},
			{Key: "expiresAt", Value: pick(bson.D{{Key: "$add", Value: bson.A{"$$NOW", ttl.Milliseconds()}}}, "$expiresAt")},
		}}},
	}
}

func TestPipelineUpsertWithNowAndCond(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("leases")
	key := bson.D{{Key: "lease", Value: "job"}}
	res, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: key}}, leaseUpdate("a", 30*time.Second), options.UpdateOne().SetUpsert(true))
	if err != nil {
		t.Fatal(err)
	}
	if res.UpsertedCount != 1 {
		t.Fatalf("upsert result %+v", res)
	}
	var got struct {
		Holder    string    `bson:"holder"`
		ExpiresAt time.Time `bson:"expiresAt"`
	}
	if err := coll.FindOne(c, bson.D{{Key: "_id", Value: key}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Holder != "a" || got.ExpiresAt.Sub(srv.Now()) < 29*time.Second || got.ExpiresAt.Sub(srv.Now()) > 31*time.Second {
		t.Fatalf("lease %+v (server now %v)", got, srv.Now())
	}
	// Another holder cannot take it while it is live.
	res, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: key}}, leaseUpdate("b", 30*time.Second), options.UpdateOne().SetUpsert(true))
	if err != nil || res.ModifiedCount != 0 || res.MatchedCount != 1 {
		t.Fatalf("held: %+v %v", res, err)
	}
	// Once the server clock passes expiresAt it can.
	srv.AdvanceClock(31 * time.Second)
	res, err = coll.UpdateOne(c, bson.D{{Key: "_id", Value: key}}, leaseUpdate("b", 30*time.Second), options.UpdateOne().SetUpsert(true))
	if err != nil || res.ModifiedCount != 1 {
		t.Fatalf("expired: %+v %v", res, err)
	}
	if err := coll.FindOne(c, bson.D{{Key: "_id", Value: key}}).Decode(&got); err != nil || got.Holder != "b" {
		t.Fatalf("after expiry %+v %v", got, err)
	}
	// findOneAndUpdate with the same pipeline returns the new document.
	var after bson.M
	err = coll.FindOneAndUpdate(c, bson.D{{Key: "_id", Value: key}}, leaseUpdate("b", time.Minute),
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&after)
	if err != nil || after["holder"] != "b" {
		t.Fatalf("findOneAndUpdate %v %v", after, err)
	}
}

// A cursor idle longer than cursorTimeoutMillis (10 minutes) is killed by
// mongod's cursor manager; the next getMore fails with 43 CursorNotFound.
// noCursorTimeout exempts a find cursor. The idle time follows the server
// clock.
func TestIdleCursorTimesOut(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	docs := make([]any, 10)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}}
	}
	if _, err := coll.InsertMany(c, docs); err != nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(2))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(c)
	keep, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(2).SetNoCursorTimeout(true))
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close(c)
	for range 3 { // the first batch, then one getMore: in use, not idle
		if !cur.Next(c) || !keep.Next(c) {
			t.Fatal(cur.Err(), keep.Err())
		}
	}
	srv.AdvanceClock(11 * time.Minute)
	for cur.Next(c) {
	}
	var ce mongo.CommandError
	if !errors.As(cur.Err(), &ce) || ce.Code != 43 || ce.Name != "CursorNotFound" {
		t.Fatalf("idle cursor after 11 minutes: %v", cur.Err())
	}
	n := 3
	for keep.Next(c) {
		n++
	}
	if keep.Err() != nil || n != 10 {
		t.Fatalf("noCursorTimeout cursor: %d documents, %v", n, keep.Err())
	}
}

// An index specification field mongod does not know is refused with 197
// InvalidIndexSpecificationOption (index_key_validate.cpp
// validateIndexSpecFieldNames), so a spec copied with a stray field fails
// here as it would there.
func TestCreateIndexUnknownSpecField(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	err := db.RunCommand(c, bson.D{{Key: "createIndexes", Value: "c"}, {Key: "indexes", Value: bson.A{
		bson.D{{Key: "key", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "name", Value: "a_1"}, {Key: "bogus", Value: true}},
	}}}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 197 || ce.Name != "InvalidIndexSpecificationOption" {
		t.Fatalf("unknown field: %v", err)
	}
	// The fields a listIndexes answer carries are all accepted back.
	err = db.RunCommand(c, bson.D{{Key: "createIndexes", Value: "c"}, {Key: "indexes", Value: bson.A{
		bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "b", Value: 1}}}, {Key: "name", Value: "b_1"}, {Key: "unique", Value: true},
			{Key: "background", Value: true}, {Key: "ns", Value: "db.c"}},
	}}}).Err()
	if err != nil {
		t.Fatal(err)
	}
}
