package replicate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/replicate"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// pair is a source and a replica server, each with a client and the test's
// collection.
type pair struct {
	srcServer, repServer *mongotest.Server
	source, replica      *mongo.Collection
	logs                 *testutil.SyncBuffer
	metrics              *countingMetrics
	sink                 *replicate.Sink
	lost                 atomic.Pointer[error] // what the sink's guard answers; nil: the lease is held
}

func startServer(t *testing.T) (*mongotest.Server, *mongo.Client) {
	t.Helper()
	return testutil.StartMongo(t, mongotest.Options{},
		options.Client().SetServerSelectionTimeout(5*time.Second).SetHeartbeatInterval(500*time.Millisecond))
}

func newPair(t *testing.T) *pair {
	t.Helper()
	// A second: the tests of an unavailable replica retry within their
	// context's bound.
	return newPairTimeout(t, time.Second)
}

// newPairTimeout is newPair with writes bounded by timeout.
func newPairTimeout(t *testing.T, timeout time.Duration) *pair {
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
		WriteTimeout: timeout, KeysPageSize: 3,
	}, sink.NewGuard(func() error {
		if err := p.lost.Load(); err != nil {
			return *err
		}
		return nil
	}))
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

func upsert(t *testing.T, id any, fields ...bson.E) sink.Write {
	d := append(bson.D{{Key: "_id", Value: id}}, fields...)
	return sink.Write{SourceID: rv(t, id), Doc: raw(t, d)}
}

func del(t *testing.T, id any) sink.Write {
	return sink.Write{SourceID: rv(t, id), Delete: true}
}

// send sends b and waits for it, failing the test on an error.
func send(t *testing.T, s sink.Sink, b sink.Batch) []sink.DocFailure {
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
	var b sink.Batch
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
		f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
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
	send(t, p.sink, sink.Batch{Writes: []sink.Write{upsert(t, 1, bson.E{Key: "email", Value: "a@x"})}})

	big := make([]byte, 16*1024*1024)
	b := sink.Batch{Writes: []sink.Write{
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
	send(t, p.sink, sink.Batch{Writes: []sink.Write{
		upsert(t, "a", bson.E{Key: "email", Value: "x"}),
		upsert(t, "b", bson.E{Key: "email", Value: "y"}),
	}})
	// On the source, a gave up x (deleted) and b swapped to x while c took
	// y: in an unordered bulk the upserts run before the delete and in any
	// order, so some meet the old values first.
	f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
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
	var b sink.Batch
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
			var failures []sink.DocFailure
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
	_, err := p.sink.Send(ctxT(t), sink.Batch{Writes: []sink.Write{upsert(t, 1)}})
	if !errors.Is(err, errs.ErrConfigInvalid) {
		t.Fatalf("want CONFIG_INVALID, got %v", err)
	}
}

func TestKeysListsReplicaIDsInPages(t *testing.T) {
	p := newPair(t)
	var b sink.Batch
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
		send(t, st, sink.Batch{Writes: []sink.Write{upsert(t, 1, bson.E{Key: "email", Value: "a"})}})
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
	job := &jobdef.Job{Name: "articles", Collection: "articles", Mirror: "articles_copy", Kind: jobdef.Mirror}
	s, err := replicate.ForJob(p.replica.Database(), p.source.Database(), job, sink.Unguarded, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, sink.Batch{Writes: []sink.Write{upsert(t, 1)}})
	if n, _ := p.replica.CountDocuments(ctxT(t), bson.D{}); n != 1 {
		t.Fatalf("replica holds %d documents", n)
	}
	if _, err := replicate.ForJob(nil, p.source.Database(), job, sink.Unguarded, nil, nil); !errors.Is(err, errs.ErrConfigInvalid) {
		t.Errorf("no replica: got %v", err)
	}
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	s, err = replicate.ForJob(p.replica.Database(), p.source.Database(), job, sink.Unguarded, nil, m.Job(job.Name, "mirror"))
	if err != nil {
		t.Fatal(err)
	}
	s.OnDDL(context.Background(), "dropDatabase")
	// Labels in the order of their names: event, kind, pipeline.
	if n := counterValue(t, reg, "meilistream_ddl_events_total", "dropDatabase", "mirror", "articles"); n != 1 {
		t.Errorf("meilistream_ddl_events_total{pipeline=articles,event=dropDatabase} = %v, want 1", n)
	}
	search := &jobdef.Job{Name: "a", Collection: "a", Index: "a"}
	if _, err := replicate.ForJob(p.replica.Database(), p.source.Database(), search, sink.Unguarded, nil, nil); !errors.Is(err, errs.ErrConfigInvalid) {
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

// uniqueEmail gives the replica a unique index on email.
func uniqueEmail(t *testing.T, p *pair) {
	t.Helper()
	_, err := p.replica.Indexes().CreateOne(ctxT(t), mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)})
	if err != nil {
		t.Fatal(err)
	}
}

// emails returns the replica's email by _id (an int).
func emails(t *testing.T, c *mongo.Collection) map[int32]string {
	t.Helper()
	out := map[int32]string{}
	for _, d := range all(t, c) {
		out[d.Lookup("_id").Int32()] = d.Lookup("email").StringValue()
	}
	return out
}

// Documents that swap a unique value within one batch (A: x->tmp, B: y->x,
// A: tmp->y, coalesced into A=y, B=x) meet each other's old value on every
// pass of an unordered bulk write: no order of the two replaces works while
// both old versions hold their values. Both must land, and nothing else may
// be touched.
func TestSendUniqueValueCyclesSettle(t *testing.T) {
	cases := []struct {
		name   string
		before map[int32]string
		batch  func(t *testing.T) []sink.Write
		want   map[int32]string
	}{
		{"two documents swap their values",
			map[int32]string{1: "x@example.com", 2: "y@example.com", 9: "other@example.com"},
			func(t *testing.T) []sink.Write {
				return []sink.Write{
					upsert(t, int32(1), bson.E{Key: "email", Value: "y@example.com"}),
					upsert(t, int32(2), bson.E{Key: "email", Value: "x@example.com"}),
				}
			},
			map[int32]string{1: "y@example.com", 2: "x@example.com", 9: "other@example.com"}},
		{"three documents rotate their values, beside a chain and a delete",
			map[int32]string{1: "a@x", 2: "b@x", 3: "c@x", 4: "d@x", 5: "e@x", 6: "f@x"},
			func(t *testing.T) []sink.Write {
				return []sink.Write{
					upsert(t, int32(1), bson.E{Key: "email", Value: "b@x"}),
					upsert(t, int32(2), bson.E{Key: "email", Value: "c@x"}),
					upsert(t, int32(3), bson.E{Key: "email", Value: "a@x"}),
					upsert(t, int32(4), bson.E{Key: "email", Value: "e@x"}), // e frees its value below
					upsert(t, int32(5), bson.E{Key: "email", Value: "f@x"}), // and takes f's
					del(t, int32(6)),
				}
			},
			map[int32]string{1: "b@x", 2: "c@x", 3: "a@x", 4: "e@x", 5: "f@x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t)
			uniqueEmail(t, p)
			var seed sink.Batch
			for id, e := range c.before {
				seed.Writes = append(seed.Writes, upsert(t, id, bson.E{Key: "email", Value: e}))
			}
			if f := send(t, p.sink, seed); len(f) != 0 {
				t.Fatalf("seed: %+v", f)
			}
			if f := send(t, p.sink, sink.Batch{Writes: c.batch(t)}); len(f) != 0 {
				t.Fatalf("failures: %+v", f)
			}
			if got := emails(t, p.replica); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("replica %v, want %v", got, c.want)
			}
		})
	}
}

// A write that cannot succeed given the batch's final state (a unique index
// only the replica has, and a document outside the batch holding the value)
// is refused alone: the rest of the batch lands, the document holding the
// value stays, and neither the refusal nor the log quotes the value.
func TestSendRealDuplicateIsRefusedAloneWithoutItsValue(t *testing.T) {
	p := newPair(t)
	uniqueEmail(t, p)
	const taken = "taken.person@example.com"
	send(t, p.sink, sink.Batch{Writes: []sink.Write{
		upsert(t, int32(9), bson.E{Key: "email", Value: taken}),
		upsert(t, int32(1), bson.E{Key: "email", Value: "x@example.com"}),
		upsert(t, int32(2), bson.E{Key: "email", Value: "y@example.com"}),
	}})
	f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
		upsert(t, int32(1), bson.E{Key: "email", Value: "y@example.com"}),
		upsert(t, int32(2), bson.E{Key: "email", Value: "x@example.com"}),
		upsert(t, int32(3), bson.E{Key: "email", Value: taken}),
		upsert(t, int32(4), bson.E{Key: "email", Value: "new@example.com"}),
	}})
	if len(f) != 1 || fmt.Sprint(f[0].Writes) != "[2]" || f[0].Code != "DuplicateKey" {
		t.Fatalf("failures %+v, want write 2 refused as DuplicateKey", f)
	}
	if strings.Contains(f[0].Message, "taken.person") || !strings.Contains(f[0].Message, "email") {
		t.Errorf("the refusal must name the index's fields, never the value: %q", f[0].Message)
	}
	want := map[int32]string{1: "y@example.com", 2: "x@example.com", 4: "new@example.com", 9: taken}
	if got := emails(t, p.replica); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replica %v, want %v", got, want)
	}
	if strings.Contains(p.logs.String(), "taken.person") {
		t.Errorf("the log quotes the value:\n%s", p.logs.String())
	}
}

// A source that replaced a document by one whose _id is equal in value but
// of another type (int32 1 deleted, int64 1 inserted: one _id to MongoDB's
// index, two to the engine) gives a batch with the delete of one and the
// upsert of the other. mongod's replace matches the old document (its _id
// compares equal) and stores the new _id (object_replace_executor.cpp); a
// delete run after it would then remove the new document. Deletes go
// first.
func TestSendDeletesBeforeUpsertsOfAnEqualIDOfAnotherType(t *testing.T) {
	p := newPair(t)
	send(t, p.sink, sink.Batch{Writes: []sink.Write{upsert(t, int32(1), bson.E{Key: "v", Value: "old"})}})
	f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
		upsert(t, int64(1), bson.E{Key: "v", Value: "new"}),
		del(t, int32(1)),
	}})
	if len(f) != 0 {
		t.Fatalf("failures: %+v", f)
	}
	got := all(t, p.replica)
	d, ok := got[idKey(rv(t, int64(1)))]
	if len(got) != 1 || !ok || d.Lookup("v").StringValue() != "new" {
		t.Fatalf("replica %v, want only the int64 1 document", got)
	}
}

// A document with a top-level $-prefixed field (legal since MongoDB 5.0:
// db.c.insertOne({$price: 1})) is mirrored, inserted and replaced, byte for
// byte. A replacement refuses such a field once it replaces a stored
// document (52; mongod's object_replace_executor.cpp, docs "Dollar-Prefixed
// Field Names"), so the sink writes it with a pipeline update, which may.
func TestSendTopLevelDollarFields(t *testing.T) {
	p := newPair(t)
	for round, v := range []int32{1, 2} {
		doc := raw(t, bson.D{{Key: "_id", Value: "p"}, {Key: "$price", Value: v},
			{Key: "n", Value: bson.D{{Key: "$inc", Value: "$notAnOperator"}}}, {Key: "s", Value: "$notAPath"}, {Key: "$literal", Value: bson.A{"$x"}}})
		f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
			{SourceID: rv(t, "p"), Doc: doc},
			upsert(t, "plain", bson.E{Key: "v", Value: v}),
		}})
		if len(f) != 0 {
			t.Fatalf("round %d: failures %+v", round, f)
		}
		got := all(t, p.replica)
		if !bytes.Equal(got[idKey(rv(t, "p"))], doc) {
			t.Fatalf("round %d: replica holds %s, want %s", round, got[idKey(rv(t, "p"))], doc)
		}
	}
}

// A mirror takes documents up to the replica's own limit (16 MiB,
// maxBsonObjectSize), measured on the document as it is stored (_id first,
// added when the document has none); one larger is refused alone, saying
// so, and does not take the batch with it.
func TestSendDocumentsUpToTheReplicaLimit(t *testing.T) {
	// The default bound: a 16 MB write under -race on a loaded machine
	// can take more than a second.
	p := newPairTimeout(t, replicate.DefaultWriteTimeout)
	const limit = 16 * 1024 * 1024
	empty := raw(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "b", Value: bson.Binary{Data: []byte{}}}})
	fits := make([]byte, limit-len(empty)) // exactly the limit
	doc := raw(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "b", Value: bson.Binary{Data: fits}}})
	noID := raw(t, bson.D{{Key: "b", Value: bson.Binary{Data: append(fits, 0)}}}) // stored with _id: one byte over
	// A 20 kB _id in a document of the limit: the statement, holding the
	// _id twice, is more than the server parses.
	bigID := strings.Repeat("i", 20000)
	hugeKey := raw(t, bson.D{{Key: "_id", Value: bigID}, {Key: "b", Value: bson.Binary{Data: fits[:len(fits)-20010]}}})
	f := send(t, p.sink, sink.Batch{Writes: []sink.Write{
		{SourceID: rv(t, int32(1)), Doc: doc},
		{SourceID: rv(t, int32(2)), Doc: noID},
		upsert(t, int32(3)),
		{SourceID: rv(t, bigID), Doc: hugeKey},
	}})
	if len(f) != 2 || fmt.Sprint(f[0].Writes) != "[1]" || f[0].Code != "BSONObjectTooLarge" || !strings.Contains(f[0].Message, "maxBsonObjectSize") ||
		fmt.Sprint(f[1].Writes) != "[3]" || !strings.Contains(f[1].Message, "statement") {
		t.Fatalf("failures %+v, want writes 1 and 3 refused as too large", f)
	}
	got := all(t, p.replica)
	if len(got) != 2 || !bytes.Equal(got[idKey(rv(t, int32(1)))], doc) {
		t.Fatalf("replica holds %d documents; the %d-byte one stored whole: %v", len(got), len(doc), bytes.Equal(got[idKey(rv(t, int32(1)))], doc))
	}
}

// Every answer of the replica is classified: sent again with backoff
// (FAILED, the engine retries), refused per document (bisected by the
// engine when a whole command is refused for one of its documents), or a
// job failure with CONFIG_INVALID saying what to fix. The answers here are
// the replica's own, through the failCommand fail point (mongod's and the
// test server's: src/mongo/db/commands.cpp).
func TestSendClassifiesReplicaAnswers(t *testing.T) {
	p := newPair(t)
	failUpdate := func(data bson.D) {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
			{Key: "data", Value: append(bson.D{{Key: "failCommands", Value: bson.A{"update"}}}, data...)}})
	}
	wce := func(code int32, name string) bson.D {
		return bson.D{{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: code}, {Key: "codeName", Value: name}, {Key: "errmsg", Value: "waiting"}}}}
	}
	code := func(c int32) bson.D { return bson.D{{Key: "errorCode", Value: c}} }
	cases := []struct {
		name string
		data bson.D
		want errs.Code // "" for per-document refusals
		says string
	}{
		{"a destination that is a view stops the job", code(166), errs.ConfigInvalid, "view"},
		{"a command the replica cannot parse stops the job", code(9), errs.ConfigInvalid, "4.2 or later"},
		{"a user without the role stops the job", code(13), errs.ConfigInvalid, "MEILISTREAM_REPLICA_URI"},
		{"a write concern the set cannot satisfy stops the job", wce(100, "UnsatisfiableWriteConcern"), errs.ConfigInvalid, "majority"},
		{"a write concern timeout is sent again", wce(64, "WriteConcernFailed"), errs.Failed, "64 WriteConcernFailed"},
		{"a space quota is sent again", code(8000), errs.Failed, "8000"},
		{"a disk full is sent again", code(14031), errs.Failed, "14031"},
		{"an unknown answer is sent again", code(54321), errs.Failed, "54321"},
		{"a command too large for one of its documents is bisected", code(10334), "", ""},
	}
	b := sink.Batch{Writes: []sink.Write{upsert(t, int32(1)), upsert(t, int32(2))}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failUpdate(c.data)
			r, err := p.sink.Send(ctxT(t), b)
			if c.want == "" {
				if err != nil {
					t.Fatalf("send: %v", err)
				}
				f, _ := p.sink.Wait(ctxT(t), r)
				if len(f) != 1 || fmt.Sprint(f[0].Writes) != "[0 1]" || f[0].Code != "BSONObjectTooLarge" {
					t.Fatalf("failures %+v, want one naming every write", f)
				}
				return
			}
			if errs.CodeOf(err) != c.want || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want %s saying %q", err, c.want, c.says)
			}
		})
	}
}

// An error the engine retries (and shows in /status and the log) says what
// the replica answered with codes, never the values its messages quote.
func TestSendRetryErrorsQuoteNoValue(t *testing.T) {
	p := newPair(t)
	uniqueEmail(t, p)
	const taken = "someone.private@example.com"
	send(t, p.sink, sink.Batch{Writes: []sink.Write{upsert(t, int32(9), bson.E{Key: "email", Value: taken})}})
	p.repServer.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"}, {Key: "data", Value: bson.D{
		{Key: "failCommands", Value: bson.A{"update"}},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: int32(64)}, {Key: "codeName", Value: "WriteConcernFailed"}, {Key: "errmsg", Value: "waiting for replication timed out"}}},
	}}})
	t.Cleanup(func() {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}}}})
	})
	_, err := p.sink.Send(ctxT(t), sink.Batch{Writes: []sink.Write{upsert(t, int32(1), bson.E{Key: "email", Value: taken})}})
	if errs.CodeOf(err) != errs.Failed {
		t.Fatalf("want a retry, got %v", err)
	}
	if strings.Contains(err.Error(), "someone.private") || !strings.Contains(err.Error(), "11000 DuplicateKey") {
		t.Fatalf("the error must name the codes and not the value: %v", err)
	}
}

// The replica refusing the source's indexes for good (an index kind or
// option it does not take) stops the job saying what to do; a step-down
// while creating them is retried.
func TestStageIndexRefusals(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	if _, err := p.source.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		code int32
		want errs.Code
	}{{67, errs.ConfigInvalid}, {197, errs.ConfigInvalid}, {13, errs.ConfigInvalid}, {10107, errs.Failed}} {
		p.repServer.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
			{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"createIndexes"}}, {Key: "errorCode", Value: c.code}}}})
		_, err := p.sink.Stage(ctx, false)
		if errs.CodeOf(err) != c.want {
			t.Errorf("createIndexes answering %d: got %v, want %s", c.code, err, c.want)
		}
	}
	if _, err := p.sink.Stage(ctx, false); err != nil {
		t.Fatalf("once the replica takes them: %v", err)
	}
}

// Once the sink's guard (the lease's own-clock check) says the lease
// lapsed, the replica gets no write: the guard's LEASE_LOST comes back
// instead.
func TestSendWritesNothingOnceTheGuardSaysTheLeaseLapsed(t *testing.T) {
	p := newPair(t)
	var lost error = errs.New(errs.LeaseLost, "articles", "lease lost: no renewal succeeded for 23s (the process was paused or starved)")
	p.lost.Store(&lost)
	_, err := p.sink.Send(ctxT(t), sink.Batch{Writes: []sink.Write{upsert(t, 1, bson.E{Key: "t", Value: "a"}), del(t, 2)}})
	if !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("send: %v, want LEASE_LOST", err)
	}
	if got := all(t, p.replica); len(got) != 0 {
		t.Fatalf("the replica holds %d documents after a send refused by the guard", len(got))
	}
}

// The replica sink has no queue to show (its writes are durable when Send
// returns) and no staged target to delete (a backfill stages in place):
// both say so instead of the engine asking whether they exist.
func TestNoQueueAndNoStagedTargetOfItsOwn(t *testing.T) {
	p := newPair(t)
	if tasks, bytes, counted := p.sink.Enqueued(); counted || tasks != 0 || bytes != 0 {
		t.Errorf("Enqueued: %d tasks, %d bytes, counted %v; want nothing counted", tasks, bytes, counted)
	}
	if _, err := p.sink.Send(ctxT(t), sink.Batch{Writes: []sink.Write{upsert(t, 1, bson.E{Key: "t", Value: "a"})}}); err != nil {
		t.Fatal(err)
	}
	if err := p.sink.DiscardStage(ctxT(t), "articles_copy"); err != nil {
		t.Errorf("DiscardStage: %v", err)
	}
	if got := all(t, p.replica); len(got) != 1 {
		t.Errorf("the replica holds %d documents after DiscardStage, want the 1 written", len(got))
	}
}
