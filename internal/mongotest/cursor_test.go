package mongotest_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

type versioned struct {
	ID int32  `bson:"_id"`
	V  string `bson:"v"`
}

func seedVersions(t *testing.T, coll *mongo.Collection, ids ...int) {
	t.Helper()
	var docs []any
	for _, id := range ids {
		docs = append(docs, bson.D{{Key: "_id", Value: int32(id)}, {Key: "v", Value: "old"}})
	}
	if _, err := coll.InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
}

// readFirstBatch consumes exactly the first batch of cur.
func readFirstBatch(t *testing.T, cur *mongo.Cursor) []string {
	t.Helper()
	var out []string
	for cur.Next(ctx(t)) {
		var d versioned
		if err := cur.Decode(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", d.ID, d.V))
		if cur.RemainingBatchLength() == 0 {
			return out
		}
	}
	t.Fatalf("the cursor ended in its first batch: %v", cur.Err())
	return nil
}

func readRest(t *testing.T, cur *mongo.Cursor) []string {
	t.Helper()
	var out []string
	for cur.Next(ctx(t)) {
		var d versioned
		if err := cur.Decode(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", d.ID, d.V))
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// changeBehind writes, from another client, after a cursor's first batch:
// an update ahead of the scan, one behind it, a delete ahead, inserts ahead
// and behind.
func changeBehind(t *testing.T, coll *mongo.Collection) {
	t.Helper()
	c := ctx(t)
	for _, w := range []func() error{
		func() error {
			_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 5}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "new"}}}})
			return err
		},
		func() error {
			_, err := coll.UpdateOne(c, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: "new"}}}})
			return err
		},
		func() error { _, err := coll.DeleteOne(c, bson.D{{Key: "_id", Value: 6}}); return err },
		func() error {
			_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 11}, {Key: "v", Value: "new"}})
			return err
		},
		func() error {
			_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: 0}, {Key: "v", Value: "new"}})
			return err
		},
	} {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
}

// A find cursor in _id order is not a copy taken when find ran: each
// getMore reads the collection as it is then, past the last _id returned
// (the MongoDB manual, "Cursor Isolation": a cursor can return a document
// more than once, or not at all, when writes happen during it; for an
// _id-ordered scan, changes ahead of it are seen, changes behind it not).
func TestFindCursorBatchesSeeLaterWrites(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	seedVersions(t, coll, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	other := connect(t, srv).Database("db").Collection("c")

	t.Run("ascending _id ranges, as a reindex reads chunks", func(t *testing.T) {
		cur, err := coll.Find(c, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: 0}}}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(3))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		first := readFirstBatch(t, cur)
		changeBehind(t, other)
		rest := readRest(t, cur)
		if want := []string{"1:old", "2:old", "3:old"}; !reflect.DeepEqual(first, want) {
			t.Fatalf("first batch %v, want %v", first, want)
		}
		if want := []string{"4:old", "5:new", "7:old", "8:old", "9:old", "10:old", "11:new"}; !reflect.DeepEqual(rest, want) {
			t.Fatalf("later batches %v, want %v", rest, want)
		}
	})
	restore := func() {
		if _, err := coll.DeleteMany(c, bson.D{}); err != nil {
			t.Fatal(err)
		}
		seedVersions(t, coll, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	}

	t.Run("no filter and no sort, projected when read", func(t *testing.T) {
		restore()
		cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(4).SetProjection(bson.D{{Key: "v", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		readFirstBatch(t, cur)
		changeBehind(t, other)
		if got, want := readRest(t, cur), []string{"5:new", "7:old", "8:old", "9:old", "10:old", "11:new"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("later batches %v, want %v", got, want)
		}
	})

	t.Run("descending", func(t *testing.T) {
		restore()
		cur, err := coll.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetBatchSize(3))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		if got := readFirstBatch(t, cur); !reflect.DeepEqual(got, []string{"10:old", "9:old", "8:old"}) {
			t.Fatalf("first batch %v", got)
		}
		changeBehind(t, other)
		if got, want := readRest(t, cur), []string{"7:old", "5:new", "4:old", "3:old", "2:new", "1:old", "0:new"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("later batches %v, want %v", got, want)
		}
	})

	t.Run("a limit spans batches and ends the cursor", func(t *testing.T) {
		restore()
		cur, err := coll.Find(c, bson.D{}, options.Find().SetLimit(5).SetBatchSize(2))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		readFirstBatch(t, cur)
		changeBehind(t, other)
		if got, want := readRest(t, cur), []string{"3:old", "4:old", "5:new"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("later batches %v, want %v", got, want)
		}
	})

	t.Run("a sort on another field is a blocking sort, fixed at the first batch", func(t *testing.T) {
		restore()
		cur, err := coll.Find(c, bson.D{}, options.Find().SetSort(bson.D{{Key: "v", Value: 1}, {Key: "_id", Value: 1}}).SetBatchSize(3))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		readFirstBatch(t, cur)
		changeBehind(t, other)
		if got, want := readRest(t, cur), []string{"4:old", "5:old", "6:old", "7:old", "8:old", "9:old", "10:old"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("later batches %v, want %v", got, want)
		}
	})

	t.Run("a dropped collection kills its cursors", func(t *testing.T) {
		restore()
		cur, err := coll.Find(c, bson.D{}, options.Find().SetBatchSize(2))
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close(c)
		readFirstBatch(t, cur)
		if err := other.Drop(c); err != nil {
			t.Fatal(err)
		}
		if cur.Next(c) {
			t.Fatal("a getMore on a dropped collection returned a document")
		}
		var se mongo.ServerError
		if !errors.As(cur.Err(), &se) || !se.HasErrorCode(175) {
			t.Fatalf("getMore after the drop: %v", cur.Err())
		}
	})
}

// A $type on _id alone is planned on the _id index, which orders keys by
// type class first (mongod builds index bounds for it): the scan starts at
// the first key of the lowest class asked for, in either direction and
// across getMores, and returns what a full scan of the same filter does.
// A reindex asks it once at its end, for the _ids of types that sort after
// the last one read.
func TestTypeOnIDIsPlannedOnTheIndexAndMatchesAScan(t *testing.T) {
	_, client := start(t)
	coll := client.Database("app").Collection("mixed")
	oid := bson.NewObjectID()
	docs := []any{
		bson.D{{Key: "_id", Value: int32(3)}},
		bson.D{{Key: "_id", Value: int64(7)}},
		bson.D{{Key: "_id", Value: 2.5}},
		bson.D{{Key: "_id", Value: "b"}},
		bson.D{{Key: "_id", Value: "a"}},
		bson.D{{Key: "_id", Value: bson.D{{Key: "k", Value: 1}}}},
		bson.D{{Key: "_id", Value: bson.Binary{Data: []byte{1}}}},
		bson.D{{Key: "_id", Value: oid}},
		bson.D{{Key: "_id", Value: true}},
		bson.D{{Key: "_id", Value: bson.DateTime(5)}},
		bson.D{{Key: "_id", Value: bson.Timestamp{T: 1, I: 1}}},
		bson.D{{Key: "_id", Value: bson.MaxKey{}}},
	}
	if _, err := coll.InsertMany(ctx(t), docs); err != nil {
		t.Fatal(err)
	}
	ids := func(filter bson.D, dir int, batch int32) []string {
		t.Helper()
		cur, err := coll.Find(ctx(t), filter, options.Find().SetSort(bson.D{{Key: "_id", Value: dir}}).SetBatchSize(batch))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for cur.Next(ctx(t)) {
			out = append(out, cur.Current.Lookup("_id").String())
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, types := range []any{
		bson.A{2, 3, 4, 5, 7, 8, 9, 17, 127}, // what sorts after the numbers
		bson.A{"objectId", "bool"},
		"number",
		int32(9),
		bson.A{"string", 5},
		bson.A{-1, 127},
	} {
		planned := bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: types}}}}
		scanned := bson.D{{Key: "$and", Value: bson.A{planned}}} // no _id key at the top: a scan
		for _, dir := range []int{1, -1} {
			for _, batch := range []int32{1, 100} {
				got, want := ids(planned, dir, batch), ids(scanned, dir, batch)
				if len(want) == 0 || !reflect.DeepEqual(got, want) {
					t.Errorf("$type %v, sort %d, batch %d:\n got %v\nwant %v", types, dir, batch, got, want)
				}
			}
		}
	}
}
