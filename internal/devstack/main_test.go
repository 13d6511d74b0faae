package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// TestDevstack starts both servers on free ports with a seed directory and
// checks that each answers its real client, then stops them.
func TestDevstack(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "articles.json"), []byte(
		`{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"},"title":"hello","n":{"$numberLong":"7"}}`+"\n"+
			`{"_id":2,"title":"world"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shop.items.json"), []byte(`[{"_id":"a"},{"_id":"b"}]`), 0o644); err != nil {
		t.Fatal(err)
	}

	type servers struct {
		mg *mongotest.Server
		ml *meilitest.Server
	}
	up := make(chan servers, 1)
	ready = func(mg *mongotest.Server, ml *meilitest.Server) { up <- servers{mg, ml} }
	t.Cleanup(func() { ready = nil })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-mongo-addr", "127.0.0.1:0", "-meili-addr", "127.0.0.1:0",
			"-master-key", "devkey", "-db", "demo", "-seed", dir}, &out, &out)
	}()
	var s servers
	select {
	case s = <-up:
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("servers not up\n%s", out.String())
	}

	text := out.String()
	for _, want := range []string{
		"export MEILISTREAM_MONGODB_URI='mongodb://" + s.mg.Addr() + "/demo?replicaSet=",
		"export MEILISTREAM_MEILI_URL='" + s.ml.URL() + "'",
		"export MEILISTREAM_MEILI_API_KEY='devkey'",
		"export MEILISTREAM_REPLICA_URI='mongodb://" + s.mg.Addr() + "/demo_replica?replicaSet=",
		"seeded demo.articles with 2 documents",
		"seeded shop.items with 2 documents",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
	defer tcancel()
	mc, err := mongo.Connect(options.Client().ApplyURI(s.mg.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(context.Background())
	n, err := mc.Database("demo").Collection("articles").CountDocuments(tctx, bson.D{})
	if err != nil || n != 2 {
		t.Fatalf("demo.articles count = %d, %v", n, err)
	}
	var a bson.M
	if err := mc.Database("demo").Collection("articles").FindOne(tctx, bson.D{{Key: "title", Value: "hello"}}).Decode(&a); err != nil || a["n"] != int64(7) {
		t.Fatalf("seeded document = %v, %v", a, err)
	}

	c := meilisearch.New(s.ml.URL(), meilisearch.WithAPIKey("devkey"), meilisearch.DisableRetries())
	defer c.Close()
	if _, err := c.Version(tctx); err != nil {
		t.Fatalf("meilitest with the key: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"mongodb://h:1/?replicaSet=rs0": "mongodb://h:1/app?replicaSet=rs0",
		"mongodb://h:1":                 "mongodb://h:1/app",
	} {
		if got := withDatabase(in, "app"); got != want {
			t.Errorf("withDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

// -history bounds the change history as a small oplog would: resuming from
// before it fails with ChangeStreamHistoryLost (286). -max-payload bounds
// Meilisearch request bodies: a larger one is 413 payload_too_large.
func TestDevstackHistoryAndPayloadFlags(t *testing.T) {
	up := make(chan *mongotest.Server, 1)
	var ml *meilitest.Server
	ready = func(mg *mongotest.Server, m *meilitest.Server) { ml = m; up <- mg }
	t.Cleanup(func() { ready = nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-mongo-addr", "127.0.0.1:0", "-meili-addr", "127.0.0.1:0",
			"-history", "3", "-max-payload", "1000"}, &out, &out)
	}()
	var mg *mongotest.Server
	select {
	case mg = <-up:
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("servers not up\n%s", out.String())
	}
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
	defer tcancel()
	mc, err := mongo.Connect(options.Client().ApplyURI(mg.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(context.Background())
	coll := mc.Database("app").Collection("c")
	cs, err := coll.Watch(tctx, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	start := cs.ResumeToken()
	cs.Close(tctx)
	for i := 0; i < 5; i++ {
		if _, err := coll.InsertOne(tctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = coll.Watch(tctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(start))
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(286) {
		t.Fatalf("resume from before a 3-change history: %v", err)
	}

	c := meilisearch.New(ml.URL(), meilisearch.DisableRetries())
	defer c.Close()
	big := []map[string]any{{"id": 1, "text": strings.Repeat("x", 2000)}}
	_, err = c.Index("big").AddDocuments(tctx, big, nil)
	var me *meilisearch.Error
	if !errors.As(err, &me) || me.StatusCode != 413 || me.APIError.Code != "payload_too_large" {
		t.Fatalf("a 2 kB body with -max-payload 1000: %v", err)
	}

	for _, args := range [][]string{{"-history", "0"}, {"-max-payload", "-1"}, {"-proxy-body-limit", "-1"}} {
		if err := run(ctx, args, &out, &out); err == nil {
			t.Errorf("run %v: no error", args)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// -standalone runs MongoDB as a standalone mongod: the printed URIs name no
// replica set, hello has no setName and change streams are refused with
// 40573.
func TestDevstackStandalone(t *testing.T) {
	up := make(chan *mongotest.Server, 1)
	ready = func(mg *mongotest.Server, _ *meilitest.Server) { up <- mg }
	t.Cleanup(func() { ready = nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-mongo-addr", "127.0.0.1:0", "-meili-addr", "127.0.0.1:0", "-standalone"}, &out, &out)
	}()
	var mg *mongotest.Server
	select {
	case mg = <-up:
	case err := <-done:
		t.Fatalf("run returned early: %v\n%s", err, out.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("servers not up\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{"(standalone: no change streams)", "export MEILISTREAM_MONGODB_URI='mongodb://" + mg.Addr() + "/app'"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "replicaSet=") {
		t.Errorf("a standalone's URIs name a replica set:\n%s", text)
	}
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
	defer tcancel()
	mc, err := mongo.Connect(options.Client().ApplyURI(mg.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(context.Background())
	var hello bson.M
	if err := mc.Database("admin").RunCommand(tctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	if _, ok := hello["setName"]; ok {
		t.Errorf("hello names a replica set: %v", hello)
	}
	_, err = mc.Database("app").Collection("c").Watch(tctx, mongo.Pipeline{})
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(40573) {
		t.Errorf("watch on a standalone: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
