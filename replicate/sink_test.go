package replicate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/replicate"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/transform"
)

// pair is a source and a replica server, each with a client and the test's
// collection.
type pair struct {
	srcServer, repServer *mongotest.Server
	source, replica      *mongo.Collection
	logs                 *testutil.SyncBuffer
	metrics              *countingMetrics
	sink                 *replicate.Sink
}

func startServer(t *testing.T) (*mongotest.Server, *mongo.Client) {
	t.Helper()
	return testutil.StartMongo(t, mongotest.Options{},
		options.Client().SetServerSelectionTimeout(5*time.Second).SetHeartbeatInterval(500*time.Millisecond))
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{logs: &testutil.SyncBuffer{}, metrics: &countingMetrics{}}
	var src, rep *mongo.Client
	p.srcServer, src = startServer(t)
	p.repServer, rep = startServer(t)
	p.source = src.Database("app").Collection("articles")
	p.replica = rep.Database("copy").Collection("articles_copy")
	logger := hclog.New(&hclog.LoggerOptions{Output: p.logs, Level: hclog.Debug})
	s, err := replicate.New(replicate.Options{
		Job: "articles", Source: p.source, Replica: p.replica, Logger: logger, Metrics: p.metrics,
		WriteTimeout: time.Second, KeysPageSize: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.sink = s
	return p
}

func ctxT(t *testing.T) context.Context { return testutil.Context(t, 30*time.Second) }

func rv(t *testing.T, v any) bson.RawValue {
	t.Helper()
	typ, data, err := bson.MarshalValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return bson.RawValue{Type: typ, Value: data}
}

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func upsert(t *testing.T, id any, fields ...bson.E) engine.Write {
	d := append(bson.D{{Key: "_id", Value: id}}, fields...)
	return engine.Write{SourceID: rv(t, id), Doc: raw(t, d)}
}

func del(t *testing.T, id any) engine.Write {
	return engine.Write{SourceID: rv(t, id), Delete: true}
}

// send sends b and waits for it, failing the test on an error.
func send(t *testing.T, s engine.Sink, b engine.Batch) []engine.DocFailure {
	t.Helper()
	ctx := ctxT(t)
	r, err := s.Send(ctx, b)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	f, err := s.Wait(ctx, r)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return f
}

// all returns the replica's documents, keyed by their _id's type and bytes.
func all(t *testing.T, c *mongo.Collection) map[string]bson.Raw {
	t.Helper()
	cur, err := c.Find(ctxT(t), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bson.Raw{}
	for cur.Next(context.Background()) {
		d := bson.Raw(append([]byte(nil), cur.Current...))
		out[idKey(d.Lookup("_id"))] = d
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func idKey(v bson.RawValue) string { return v.Type.String() + ":" + v.String() }

func TestSendKeepsIDTypes(t *testing.T) {
	p := newPair(t)
	oid := bson.NewObjectID()
	ids := []any{oid, int32(7), int64(1) << 40, "seven", bson.D{{Key: "tenant", Value: "a"}, {Key: "n", Value: int32(1)}}}
	var b engine.Batch
	for i, id := range ids {
		b.Writes = append(b.Writes, upsert(t, id, bson.E{Key: "n", Value: int32(i)}, bson.E{Key: "at", Value: bson.DateTime(1700000000000)}))
	}
	if f := send(t, p.sink, b); len(f) != 0 {
		t.Fatalf("failures: %+v", f)
	}
	got := all(t, p.replica)
	if len(got) != len(ids) {
		t.Fatalf("replica holds %d documents, want %d: %v", len(got), len(ids), got)
	}
	for i, w := range b.Writes {
		d, ok := got[idKey(w.SourceID)]
		if !ok {
			t.Fatalf("no document with _id %s (a %s)", w.SourceID, w.SourceID.Type)
		}
		if !bytes.Equal(d, w.Doc.(bson.Raw)) {
			t.Errorf("document %d: got %s, want %s", i, d, w.Doc)
		}
	}

	t.Run("an upsert replaces the whole document and a delete removes it", func(t *testing.T) {
		f := send(t, p.sink, engine.Batch{Writes: []engine.Write{
			upsert(t, int32(7), bson.E{Key: "only", Value: true}),
			del(t, "seven"),
			del(t, oid),
			del(t, "never-there"),
		}})
		if len(f) != 0 {
			t.Fatalf("failures: %+v", f)
		}
		got := all(t, p.replica)
		if len(got) != 3 {
			t.Fatalf("replica holds %d documents, want 3: %v", len(got), got)
		}
		d := got[idKey(rv(t, int32(7)))]
		if _, err := d.LookupErr("n"); err == nil || d.Lookup("only").Boolean() != true {
			t.Errorf("document 7 not replaced: %s", d)
		}
	})

	t.Run("sending the same batch again changes nothing", func(t *testing.T) {
		before := all(t, p.replica)
		send(t, p.sink, b)
		send(t, p.sink, b)
		after := all(t, p.replica)
		if len(after) != len(ids) {
			t.Fatalf("replica holds %d documents, want %d", len(after), len(ids))
		}
		_ = before
	})
}

func TestSendRefusedDocumentsAreDocFailures(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	_, err := p.replica.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)})
	if err != nil {
		t.Fatal(err)
	}
	send(t, p.sink, engine.Batch{Writes: []engine.Write{upsert(t, 1, bson.E{Key: "email", Value: "a@x"})}})

	big := make([]byte, 16*1024*1024)
	b := engine.Batch{Writes: []engine.Write{
		upsert(t, 2, bson.E{Key: "email", Value: "b@x"}),
		upsert(t, 3, bson.E{Key: "email", Value: "a@x"}), // taken by 1, which stays
		upsert(t, 4, bson.E{Key: "blob", Value: bson.Binary{Data: big}}),
		{SourceID: rv(t, 5), Doc: raw(t, bson.D{{Key: "_id", Value: "5"}})}, // _id changed by the transform
		upsert(t, 6, bson.E{Key: "email", Value: "c@x"}),
	}}
	f := send(t, p.sink, b)
	codes := map[int]string{}
	for _, x := range f {
		if len(x.Writes) != 1 {
			t.Fatalf("a replica refusal names one write, got %+v", x)
		}
		codes[x.Writes[0]] = x.Code
		if x.Message == "" {
			t.Errorf("failure of write %d has no message", x.Writes[0])
		}
	}
	want := map[int]string{1: "DuplicateKey", 2: "BSONObjectTooLarge", 3: string(errs.IDMismatch)}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("failures %v, want %v (%+v)", codes, want, f)
	}
	got := all(t, p.replica)
	for _, id := range []int{1, 2, 6} {
		if _, ok := got[idKey(rv(t, id))]; !ok {
			t.Errorf("document %d missing: the refusal of others must not stop it", id)
		}
	}
	if len(got) != 3 {
		t.Errorf("replica holds %d documents, want 3", len(got))
	}
}

func TestSendUniqueIndexSettlesWithinABatch(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	_, err := p.replica.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)})
	if err != nil {
		t.Fatal(err)
	}
	send(t, p.sink, engine.Batch{Writes: []engine.Write{
		upsert(t, "a", bson.E{Key: "email", Value: "x"}),
		upsert(t, "b", bson.E{Key: "email", Value: "y"}),
	}})
	// On the source, a gave up x (deleted) and b swapped to x while c took
	// y: in an unordered bulk the upserts run before the delete and in any
	// order, so some meet the old values first.
	f := send(t, p.sink, engine.Batch{Writes: []engine.Write{
		upsert(t, "c", bson.E{Key: "email", Value: "y"}),
		upsert(t, "b", bson.E{Key: "email", Value: "x"}),
		del(t, "a"),
	}})
	if len(f) != 0 {
		t.Fatalf("failures: %+v", f)
	}
	got := all(t, p.replica)
	if len(got) != 2 || got[idKey(rv(t, "b"))].Lookup("email").StringValue() != "x" || got[idKey(rv(t, "c"))].Lookup("email").StringValue() != "y" {
		t.Fatalf("replica: %v", got)
	}
}

func TestSendReplicaUnavailableThenBack(t *testing.T) {
	p := newPair(t)
	var b engine.Batch
	for i := 0; i < 50; i++ {
		b.Writes = append(b.Writes, upsert(t, int32(i), bson.E{Key: "v", Value: i}))
	}
	b.Writes = append(b.Writes, del(t, int32(1000)))

	fail := func(data bson.D) {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"}, {Key: "data", Value: data}})
	}
	heal := func() {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}}}})
	}
	cases := []struct {
		name   string
		break_ func()
	}{
		{"a step-down answers NotWritablePrimary", func() {
			fail(bson.D{{Key: "failCommands", Value: bson.A{"update", "delete"}}, {Key: "errorCode", Value: 10107}})
		}},
		{"connections are dropped", func() {
			fail(bson.D{{Key: "failCommands", Value: bson.A{"update", "delete", "hello", "isMaster"}}, {Key: "closeConnection", Value: true}})
			p.repServer.DropConnections()
		}},
		{"the majority write concern is not satisfied", func() {
			fail(bson.D{{Key: "failCommands", Value: bson.A{"update"}},
				{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: 64}, {Key: "codeName", Value: "WriteConcernFailed"}, {Key: "errmsg", Value: "waiting for replication timed out"}}}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			if _, err := p.replica.DeleteMany(ctx, bson.D{}); err != nil {
				t.Fatal(err)
			}
			c.break_()
			_, err := p.sink.Send(ctx, b)
			heal()
			if err == nil {
				t.Fatal("a send to an unavailable replica succeeded")
			}
			if code := errs.CodeOf(err); code != errs.Failed {
				t.Fatalf("a transient error must be retried (FAILED), got %s: %v", code, err)
			}
			// What the engine does: send the same batch again, with backoff,
			// until it is accepted; never a per-document failure.
			var failures []engine.DocFailure
			for sends := 1; ; sends++ {
				r, err := p.sink.Send(ctx, b)
				if err == nil {
					failures, err = p.sink.Wait(ctx, r)
				}
				if err == nil {
					break
				}
				if code := errs.CodeOf(err); code != errs.Failed {
					t.Fatalf("a transient error must be retried (FAILED), got %s: %v", code, err)
				}
				if sends > 20 {
					t.Fatalf("still failing after %d sends: %v", sends, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(failures) != 0 {
				t.Fatalf("failures: %+v", failures)
			}
			if n, _ := p.replica.CountDocuments(ctx, bson.D{}); n != 50 {
				t.Fatalf("replica holds %d documents, want 50", n)
			}
		})
	}
}

func TestSendUnauthorizedStopsTheJob(t *testing.T) {
	p := newPair(t)
	p.repServer.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}, {Key: "errorCode", Value: 13}}}})
	t.Cleanup(func() {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}}}})
	})
	_, err := p.sink.Send(ctxT(t), engine.Batch{Writes: []engine.Write{upsert(t, 1)}})
	if !errors.Is(err, errs.ErrConfigInvalid) {
		t.Fatalf("want CONFIG_INVALID, got %v", err)
	}
}

func TestKeysListsReplicaIDsInPages(t *testing.T) {
	p := newPair(t)
	var b engine.Batch
	want := map[string]bool{}
	for i := 0; i < 7; i++ {
		w := upsert(t, int64(i))
		b.Writes = append(b.Writes, w)
		want[idKey(w.SourceID)] = true
	}
	w := upsert(t, bson.NewObjectID())
	b.Writes = append(b.Writes, w)
	want[idKey(w.SourceID)] = true
	send(t, p.sink, b)

	var pages []int
	got := map[string]bool{}
	err := p.sink.Keys(ctxT(t), func(ids []bson.RawValue) error {
		pages = append(pages, len(ids))
		for _, id := range ids {
			got[idKey(id)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pages) != "[3 3 2]" {
		t.Errorf("pages %v, want [3 3 2]", pages)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
}

func TestStageCopiesIndexesAtTheFirstBackfill(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	_, err := p.source.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)},
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "at", Value: -1}}, Options: options.Index().SetName("by_tenant")},
		{Keys: bson.D{{Key: "tag", Value: 1}}, Options: options.Index().SetPartialFilterExpression(bson.D{{Key: "tag", Value: bson.D{{Key: "$exists", Value: true}}}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.sink.Stage(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !st.InPlace() {
		t.Error("a mirror's backfill is in place")
	}
	names := indexes(t, p.replica)
	for _, n := range []string{"_id_", "email_1", "by_tenant", "tag_1"} {
		if names[n] == nil {
			t.Fatalf("replica indexes %v: no %s", keys(names), n)
		}
	}
	if u, ok := names["email_1"].Lookup("unique").BooleanOK(); !ok || !u {
		t.Errorf("email_1 is not unique on the replica: %s", names["email_1"])
	}
	if _, err := names["tag_1"].LookupErr("partialFilterExpression"); err != nil {
		t.Errorf("tag_1 lost its partialFilterExpression: %s", names["tag_1"])
	}
	if k := names["by_tenant"].Lookup("key").String(); k != `{"tenant": {"$numberInt":"1"},"at": {"$numberInt":"-1"}}` {
		t.Logf("by_tenant key %s", k)
	}

	t.Run("later a difference is reported, not forced", func(t *testing.T) {
		send(t, st, engine.Batch{Writes: []engine.Write{upsert(t, 1, bson.E{Key: "email", Value: "a"})}})
		if _, err := p.source.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "title", Value: 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.replica.Indexes().DropOne(ctx, "by_tenant"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.replica.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "tenant", Value: 1}}, Options: options.Index().SetName("by_tenant")}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.sink.Stage(ctx, true); err != nil {
			t.Fatal(err)
		}
		if indexes(t, p.replica)["title_1"] != nil {
			t.Error("title_1 was created on a replica that already holds documents")
		}
		logs := p.logs.String()
		for _, want := range []string{"by_tenant", "title_1"} {
			if !strings.Contains(logs, want) || !strings.Contains(logs, "[WARN]") {
				t.Errorf("no warning naming %s in:\n%s", want, logs)
			}
		}
	})
}

func TestOnDDLWarnsAndCounts(t *testing.T) {
	p := newPair(t)
	var obs interface {
		OnDDL(ctx context.Context, event string)
	} = p.sink
	obs.OnDDL(context.Background(), "drop")
	obs.OnDDL(context.Background(), "rename")
	if !strings.Contains(p.logs.String(), "[WARN]") || !strings.Contains(p.logs.String(), "event=drop") {
		t.Errorf("no warning naming the event:\n%s", p.logs.String())
	}
	if got := p.metrics.String(); got != "drop=1 rename=1" {
		t.Errorf("metrics %s", got)
	}
}

func TestCheck(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)

	t.Run("a replica set source and a writable replica pass", func(t *testing.T) {
		if err := replicate.Check(ctx, "articles", p.source, p.replica); err != nil {
			t.Fatal(err)
		}
		if err := p.sink.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		names, _ := p.replica.Database().ListCollectionNames(ctx, bson.D{})
		if len(names) != 0 {
			t.Errorf("the check created %v on the replica", names)
		}
	})

	t.Run("a replica that refuses writes is CONFIG_INVALID", func(t *testing.T) {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
			{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"delete"}}, {Key: "errorCode", Value: 13}}}})
		err := replicate.Check(ctx, "articles", p.source, p.replica)
		if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), "MEILISTREAM_REPLICA_URI") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("a replica that is unreachable is FAILED, to retry", func(t *testing.T) {
		c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?replicaSet=rs0").SetServerSelectionTimeout(200 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(ctx)
		err = replicate.Check(ctx, "articles", p.source, c.Database("copy").Collection("x"))
		if errs.CodeOf(err) != errs.Failed {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("a replica that refuses the credentials is CONFIG_INVALID", func(t *testing.T) {
		uri := strings.Replace(p.repServer.URI(), "mongodb://", "mongodb://ruser:REPLpw999@", 1)
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(ctx)
		err = replicate.Check(ctx, "articles", p.source, c.Database("copy").Collection("x"))
		if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), "MEILISTREAM_REPLICA_URI") {
			t.Fatalf("got %v", err)
		}
		if strings.Contains(err.Error(), "REPLpw999") {
			t.Fatalf("the password is in the error: %v", err)
		}
	})

	t.Run("mirroring a collection into itself is CONFIG_INVALID", func(t *testing.T) {
		err := replicate.Check(ctx, "articles", p.source, p.source)
		if !errors.Is(err, errs.ErrConfigInvalid) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestForJob(t *testing.T) {
	p := newPair(t)
	job := &transform.Job{Name: "articles", Collection: "articles", Mirror: "articles_copy", Kind: transform.Mirror}
	s, err := replicate.ForJob(p.replica.Database(), p.source.Database(), job, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, engine.Batch{Writes: []engine.Write{upsert(t, 1)}})
	if n, _ := p.replica.CountDocuments(ctxT(t), bson.D{}); n != 1 {
		t.Fatalf("replica holds %d documents", n)
	}
	if _, err := replicate.ForJob(nil, p.source.Database(), job, nil, nil); !errors.Is(err, errs.ErrConfigInvalid) {
		t.Errorf("no replica: got %v", err)
	}
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	s, err = replicate.ForJob(p.replica.Database(), p.source.Database(), job, nil, m.Job(job.Name, "mirror"))
	if err != nil {
		t.Fatal(err)
	}
	s.OnDDL(context.Background(), "dropDatabase")
	// Labels in the order of their names: event, kind, pipeline.
	if n := counterValue(t, reg, "meilistream_ddl_events_total", "dropDatabase", "mirror", "articles"); n != 1 {
		t.Errorf("meilistream_ddl_events_total{pipeline=articles,event=dropDatabase} = %v, want 1", n)
	}
	search := &transform.Job{Name: "a", Collection: "a", Index: "a"}
	if _, err := replicate.ForJob(p.replica.Database(), p.source.Database(), search, nil, nil); !errors.Is(err, errs.ErrConfigInvalid) {
		t.Errorf("a search job: got %v", err)
	}
}

func indexes(t *testing.T, c *mongo.Collection) map[string]bson.Raw {
	t.Helper()
	cur, err := c.Indexes().List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bson.Raw{}
	for cur.Next(context.Background()) {
		d := bson.Raw(append([]byte(nil), cur.Current...))
		out[d.Lookup("name").StringValue()] = d
	}
	return out
}

// counterValue reads a counter from reg by name and label values (in the
// order of their label names, as Gather sorts them).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetValue())
			}
			if slices.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type countingMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countingMetrics) DDL(event string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[event]++
}

func (m *countingMetrics) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts []string
	for k, v := range m.n {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
