//go:build floor

package transform

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestFloorWritesWhatArticlesJSWrites pins the floor build's Go transform
// to examples/transforms/articles.js: the same JSON, byte for byte, and
// the same reads, on articles shaped as the bench seeds them and on the
// corners the script handles.
func TestFloorWritesWhatArticlesJSWrites(t *testing.T) {
	set, err := Load("../examples/transforms", Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	j := set.Job("articles")
	long := strings.Repeat("é ab ", 99) + "x😀yz" + strings.Repeat("w", 600)
	docs := []bson.D{
		{{Key: "_id", Value: int64(7)}, {Key: "title", Value: "Article 7"}, {Key: "body", Value: "short"}, {Key: "status", Value: "published"},
			{Key: "author", Value: bson.D{{Key: "name", Value: "Author 7"}, {Key: "email", Value: "a@example.com"}}},
			{Key: "tags", Value: bson.A{"lorem", "ipsum", "lorem"}}, {Key: "views", Value: int64(3)},
			{Key: "publishedAt", Value: bson.NewDateTimeFromTime(time.Unix(1700000000, 0))}},
		{{Key: "_id", Value: int64(10)}, {Key: "status", Value: "draft"}, {Key: "title", Value: "Not yet"}},
		{{Key: "_id", Value: bson.NewObjectID()}, {Key: "status", Value: "published"}, {Key: "summary", Value: ""},
			{Key: "body", Value: long}, {Key: "tags", Value: bson.A{" MongoDB ", "mongodb", 42, "", "  ", "Ünïcode"}},
			{Key: "author", Value: "not a document"}, {Key: "updatedAt", Value: bson.DateTime(1710437400000)}},
		{{Key: "_id", Value: "s-1"}, {Key: "status", Value: "published"}, {Key: "summary", Value: "sum"}, {Key: "tags", Value: "one"},
			{Key: "author", Value: bson.D{{Key: "email", Value: "x"}}}, {Key: "body", Value: 5}},
		{{Key: "_id", Value: int64(11)}, {Key: "status", Value: "published"}, {Key: "author", Value: nil}, {Key: "title", Value: nil}},
		{{Key: "_id", Value: int64(12)}, {Key: "status", Value: "published"}, {Key: "body", Value: strings.Repeat("😀", 300)}},
	}
	ctx := context.Background()
	for i, d := range docs {
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		c, idv, res, err := j.prepare(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		call := func() []prepared {
			return []prepared{{doc: c, idv: idv, op: OpUpdate, track: true, res: res}}
		}
		var want, got [1]Outcome
		j.rt.applyEach(ctx, j, nil, call(), want[:])
		j.floorEach(ctx, nil, call(), got[:])
		if want[0].Err != nil || got[0].Err != nil {
			t.Fatalf("document %d: goja %v, floor %v", i, want[0].Err, got[0].Err)
		}
		w, g := want[0].Result, got[0].Result
		if string(w.JSON) != string(g.JSON) || w.Skip != g.Skip {
			t.Errorf("document %d:\n goja  %s (skip %v)\n floor %s (skip %v)", i, w.JSON, w.Skip, g.JSON, g.Skip)
		}
		if strings.Join(w.Reads.Fields, ",") != strings.Join(g.Reads.Fields, ",") {
			t.Errorf("document %d: goja read %v, floor %v", i, w.Reads.Fields, g.Reads.Fields)
		}
	}
}
