package engine_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/transform"
)

// readerEnv is the test MongoDB with blog.users holding three users, and
// a Reader over it; cmds collects the commands sent.
func readerEnv(t *testing.T) (transform.Reader, *[]bson.Raw) {
	t.Helper()
	var cmds []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" || e.CommandName == "aggregate" {
			cmds = append(cmds, append(bson.Raw(nil), e.Command...))
		}
	}}
	_, client := testutil.StartMongo(t, mongotest.Options{}, options.Client().SetMonitor(mon))
	db := client.Database("blog")
	ctx := testutil.Context(t, 10*time.Second)
	if _, err := db.Collection("users").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "Ada"}, {Key: "age", Value: 36}},
		bson.D{{Key: "_id", Value: 2}, {Key: "name", Value: "Grace"}, {Key: "age", Value: 45}},
		bson.D{{Key: "_id", Value: 3}, {Key: "name", Value: "Alan"}, {Key: "age", Value: 41}},
	}); err != nil {
		t.Fatal(err)
	}
	cmds = nil
	return engine.NewReader(client), &cmds
}

func names(t *testing.T, docs []bson.Raw) []string {
	t.Helper()
	var out []string
	for _, d := range docs {
		out = append(out, d.Lookup("name").StringValue())
	}
	return out
}

func TestReaderFindOne(t *testing.T) {
	r, _ := readerEnv(t)
	ctx := testutil.Context(t, 10*time.Second)
	opts := transform.ReadOptions{Limit: 1, MaxBytes: transform.MaxReadBytes,
		Projection: mustRaw(t, bson.D{{Key: "name", Value: 1}, {Key: "_id", Value: 0}}),
		Sort:       mustRaw(t, bson.D{{Key: "age", Value: -1}})}
	doc, err := r.FindOne(ctx, "blog", "users", mustRaw(t, bson.D{{Key: "age", Value: bson.D{{Key: "$gt", Value: 40}}}}), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.String(); got != `{"name": "Grace"}` {
		t.Errorf("got %s, want Grace alone", got)
	}
	doc, err = r.FindOne(ctx, "blog", "users", mustRaw(t, bson.D{{Key: "_id", Value: 9}}), transform.ReadOptions{Limit: 1, MaxBytes: transform.MaxReadBytes})
	if doc != nil || err != nil {
		t.Errorf("not found: got %v, %v; want nil, nil", doc, err)
	}
}

func TestReaderFindBounds(t *testing.T) {
	r, cmds := readerEnv(t)
	ctx := testutil.Context(t, 10*time.Second)
	sorted := transform.ReadOptions{Sort: mustRaw(t, bson.D{{Key: "name", Value: 1}}), Limit: 2, MaxBytes: transform.MaxReadBytes}
	docs, err := r.Find(ctx, "blog", "users", mustRaw(t, bson.D{}), sorted)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, docs); !reflect.DeepEqual(got, []string{"Ada", "Alan"}) {
		t.Errorf("got %v, want the first two by name", got)
	}
	if l, ok := (*cmds)[0].Lookup("limit").AsInt64OK(); !ok || l != 2 {
		t.Errorf("the find sent no limit 2: %s", (*cmds)[0])
	}
	// MaxBytes stops the reading: one document already holds more.
	sorted.Limit, sorted.MaxBytes = 3, 10
	docs, err = r.Find(ctx, "blog", "users", mustRaw(t, bson.D{}), sorted)
	if err != nil || len(docs) != 1 {
		t.Errorf("past MaxBytes: %d documents (%v), want the one that went past", len(docs), err)
	}
}

func TestReaderAggregate(t *testing.T) {
	r, cmds := readerEnv(t)
	ctx := testutil.Context(t, 10*time.Second)
	stages := []bson.Raw{
		mustRaw(t, bson.D{{Key: "$match", Value: bson.D{{Key: "age", Value: bson.D{{Key: "$gte", Value: 40}}}}}}),
		mustRaw(t, bson.D{{Key: "$sort", Value: bson.D{{Key: "age", Value: 1}}}}),
		mustRaw(t, bson.D{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "name", Value: 1}}}}),
	}
	docs, err := r.Aggregate(ctx, "blog", "users", stages, transform.ReadOptions{Limit: 1001, MaxBytes: transform.MaxReadBytes})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(t, docs); !reflect.DeepEqual(got, []string{"Alan", "Grace"}) {
		t.Errorf("got %v", got)
	}
	p, _ := (*cmds)[0].Lookup("pipeline").Array().Values()
	if len(p) != 4 || p[3].Document().String() != `{"$limit": {"$numberLong":"1001"}}` {
		t.Errorf("pipeline sent %v, want the stages then $limit 1001", p)
	}
}

// The server refusing the query is transform.ErrQuery; the context ending
// is not (the transform then stops the call as out of time).
func TestReaderErrors(t *testing.T) {
	r, _ := readerEnv(t)
	ctx := testutil.Context(t, 10*time.Second)
	opts := transform.ReadOptions{Limit: 1, MaxBytes: transform.MaxReadBytes}
	_, err := r.FindOne(ctx, "blog", "users", mustRaw(t, bson.D{{Key: "$nope", Value: 1}}), opts)
	if !errors.Is(err, transform.ErrQuery) {
		t.Errorf("unknown operator: %v, want ErrQuery", err)
	}
	_, err = r.Aggregate(ctx, "blog", "users", []bson.Raw{mustRaw(t, bson.D{{Key: "$nope", Value: 1}})}, opts)
	if !errors.Is(err, transform.ErrQuery) {
		t.Errorf("unknown stage: %v, want ErrQuery", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = r.Find(done, "blog", "users", mustRaw(t, bson.D{}), opts)
	if err == nil || errors.Is(err, transform.ErrQuery) {
		t.Errorf("ended context: %v, want an error that is not ErrQuery", err)
	}
}

// A monstache script using findId runs against MongoDB through the
// Reader, as the sidecar wires it.
func TestReaderServesMonstacheScripts(t *testing.T) {
	r, _ := readerEnv(t)
	j, err := transform.LoadFile("posts.js", []byte(`module.exports = function(post) {
	post.author = findId(post.author, {collection: "users", select: {name: 1}});
	post.others = _.pluck(find({_id: {$ne: post.author._id}}, {collection: "users", sort: ["-age"]}), "name");
	return post;
}`), transform.Options{Database: "blog", Reader: r, Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	res, err := j.Apply(testutil.Context(t, 10*time.Second), mustRaw(t, bson.D{{Key: "_id", Value: "p1"}, {Key: "author", Value: 1}}), transform.OpInsert, nil)
	if err != nil {
		t.Fatal(errs.Format(err))
	}
	want := map[string]any{"id": "p1", "_id": "p1", "author": map[string]any{"_id": int64(1), "name": "Ada"}, "others": []any{"Grace", "Alan"}}
	if !reflect.DeepEqual(res.Doc, want) {
		t.Errorf("got %v, want %v", res.Doc, want)
	}
}

func mustRaw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
