package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
)

// insert, update and delete change a running devstack's MongoDB, and say
// plainly when the arguments or the match are wrong.
func TestWriteCommandsChangeTheRunningMongoDB(t *testing.T) {
	mg, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	ctx := context.Background()
	w := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(args[:1:1], append([]string{"-mongo-uri", mg.URI(), "-db", "shop"}, args[1:]...)...), &out, &out)
		return out.String(), err
	}
	if out, err := w("insert", "books", `{"_id": 1, "title": "Dune", "n": {"$numberLong": "3"}}`); err != nil || !strings.Contains(out, "inserted 1 into shop.books") {
		t.Fatalf("insert: %q, %v", out, err)
	}
	if out, err := w("update", "books", `{"_id": 1}`, `{"$set": {"title": "Dune Messiah"}}`); err != nil || !strings.Contains(out, "updated 1 document") {
		t.Fatalf("update: %q, %v", out, err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(mg.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	var got bson.M
	if err := client.Database("shop").Collection("books").FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["title"] != "Dune Messiah" || got["n"] != int64(3) {
		t.Errorf("document %v", got)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"an update without operators": {[]string{"update", "books", `{"_id": 1}`, `{"title": "x"}`}, "is not an update document"},
		"an update matching nothing":  {[]string{"update", "books", `{"_id": 9}`, `{"$set": {"a": 1}}`}, "no document matches"},
		"a delete matching nothing":   {[]string{"delete", "books", `{"_id": 9}`}, "no document matches"},
		"bad JSON":                    {[]string{"insert", "books", `{_id: 1`}, "is not an Extended JSON document"},
		"missing arguments":           {[]string{"insert", "books"}, "want COLLECTION DOCUMENT"},
	} {
		if _, err := w(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
		}
	}
	if out, err := w("delete", "books", `{"_id": 1}`); err != nil || !strings.Contains(out, "deleted 1 document from shop.books") {
		t.Fatalf("delete: %q, %v", out, err)
	}
	if n, _ := client.Database("shop").Collection("books").CountDocuments(ctx, bson.D{}); n != 0 {
		t.Errorf("%d documents left", n)
	}
}
