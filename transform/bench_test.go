package transform_test

import (
	"os"

	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dop251/goja"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// articleDoc is a realistic article of about 1 KB of BSON.
func articleDoc(tb testing.TB) bson.Raw {
	tb.Helper()
	body := strings.Repeat("MongoDB change streams let an application follow every write. ", 10)
	doc := bson.D{
		{Key: "_id", Value: bson.NewObjectIDFromTimestamp(time.Unix(1710320400, 0))},
		{Key: "status", Value: "published"},
		{Key: "slug", Value: "change-streams-in-practice"},
		{Key: "title", Value: "Change streams in practice: resume tokens and history"},
		{Key: "summary", Value: "Resume tokens, history windows and what can go wrong when a consumer falls behind."},
		{Key: "body", Value: body},
		{Key: "tags", Value: bson.A{" MongoDB ", "change streams", "mongodb", "Replication", "ops"}},
		{Key: "author", Value: bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "name", Value: "Ada Lovelace"}, {Key: "email", Value: "ada@example.com"}}},
		{Key: "publishedAt", Value: bson.DateTime(1710320400000)},
		{Key: "updatedAt", Value: bson.DateTime(1710437400000)},
		{Key: "views", Value: int32(18234)},
		{Key: "rating", Value: 4.6},
		{Key: "comments", Value: int64(57)},
		{Key: "featured", Value: false},
	}
	raw, err := bson.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// BenchmarkArticles is the transform's speed target: the articles example on a
// realistic 1 KB document, BSON in to the JSON document Meilisearch
// receives out, on one core, as the sidecar runs it (ApplyTo, documents
// written one after the other into a reused buffer).
func BenchmarkArticles(b *testing.B) { benchArticles(b, nil) }

// BenchmarkArticlesUpdate is BenchmarkArticles as follow runs it for an
// update: with the change's updateDescription, which the transform's ctx
// carries.
func BenchmarkArticlesUpdate(b *testing.B) {
	ud, err := bson.Marshal(bson.D{
		{Key: "updatedFields", Value: bson.D{{Key: "title", Value: "Change streams in practice, revised"}}},
		{Key: "removedFields", Value: bson.A{}},
		{Key: "truncatedArrays", Value: bson.A{}},
	})
	if err != nil {
		b.Fatal(err)
	}
	benchArticles(b, ud)
}

func benchArticles(b *testing.B, updateDesc bson.Raw) {
	set, err := transform.Load("../examples/transforms", transform.Options{Pool: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	j := set.Job("articles")
	doc := articleDoc(b)
	ctx := context.Background()
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	var buf []byte
	for i := 0; i < b.N; i++ {
		if i%1000 == 0 {
			buf = buf[:0]
		}
		res, out, err := j.ApplyTo(ctx, buf, doc, transform.OpUpdate, updateDesc)
		if err != nil || res.Skip {
			b.Fatal(err, res.Skip)
		}
		buf = out
	}
}

// BenchmarkArticlesVsBaseline runs the articles example, the baseline and
// goja alone (BenchmarkGojaAlone) in alternating blocks, so all see the
// same machine load, and reports their CPU time per document and the ratio
// to the baseline: on a shared machine the ratios are the figures to trust.
func BenchmarkArticlesVsBaseline(b *testing.B) {
	set, err := transform.Load("../examples/transforms", transform.Options{Pool: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	j := set.Job("articles")
	base := newBaseline(b)
	alone := newGojaAlone(b)
	doc := articleDoc(b)
	ctx := context.Background()
	const block = 2000
	var mine, theirs, gojaOnly time.Duration
	var buf []byte
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		t0 := cpuTime()
		buf = buf[:0]
		for i := 0; i < n; i++ {
			_, out, err := j.ApplyTo(ctx, buf, doc, transform.OpUpdate, nil)
			if err != nil {
				b.Fatal(err)
			}
			buf = out
		}
		t2 := cpuTime()
		for i := 0; i < n; i++ {
			base(doc)
		}
		t3 := cpuTime()
		for i := 0; i < n; i++ {
			alone()
		}
		mine, theirs = mine+t2-t0, theirs+t3-t2
		gojaOnly += cpuTime() - t3
	}
	b.ReportMetric(float64(mine)/float64(b.N), "articles-cpu-ns/op")
	b.ReportMetric(float64(theirs)/float64(b.N), "baseline-cpu-ns/op")
	b.ReportMetric(float64(gojaOnly)/float64(b.N), "goja-alone-cpu-ns/op")
	b.ReportMetric(float64(mine)/float64(theirs), "ratio")
}

// BenchmarkGojaAlone is the floor under any goja-based transform: goja
// running articles.js's transform on a document that is already a plain
// JavaScript object (built once, outside the loop), its result not
// converted or encoded. Whatever Apply costs above this is ours; this part
// is goja interpreting the user's code.
func BenchmarkGojaAlone(b *testing.B) {
	alone := newGojaAlone(b)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		alone()
	}
}

func newGojaAlone(b *testing.B) func() {
	rt, fn := plainArticles(b)
	// The same fields as articleDoc, as JavaScript values.
	doc, err := rt.RunString(`({_id: "65f1c0a2b3c4d5e6f7a8b9c0", status: "published", slug: "change-streams-in-practice",
		title: "Change streams in practice: resume tokens and history",
		summary: "Resume tokens, history windows and what can go wrong when a consumer falls behind.",
		body: "MongoDB change streams let an application follow every write. ".repeat(10),
		tags: [" MongoDB ", "change streams", "mongodb", "Replication", "ops"],
		author: {_id: "65f1c0a2b3c4d5e6f7a8b9c1", name: "Ada Lovelace", email: "ada@example.com"},
		publishedAt: new Date(1710320400000), updatedAt: new Date(1710437400000),
		views: 18234, rating: 4.6, comments: 57, featured: false})`)
	if err != nil {
		b.Fatal(err)
	}
	ctx, err := rt.RunString(`({job: "articles", collection: "articles", operation: "update"})`)
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		if _, err := fn(goja.Undefined(), doc, ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// plainArticles evaluates articles.js in a bare goja runtime (no sandbox,
// no pool) and returns its transform: what the baseline and GojaAlone call.
func plainArticles(b *testing.B) (*goja.Runtime, goja.Callable) {
	src, err := os.ReadFile("../examples/transforms/articles.js")
	if err != nil {
		b.Fatal(err)
	}
	rt := goja.New()
	mod := rt.NewObject()
	_ = mod.Set("exports", rt.NewObject())
	_ = rt.Set("module", mod)
	if _, err := rt.RunString(string(src)); err != nil {
		b.Fatal(err)
	}
	fn, _ := goja.AssertFunction(mod.Get("exports").ToObject(rt).Get("transform"))
	return rt, fn
}

// BenchmarkBaseline is the straightforward way to run a transform: decode
// the BSON into a Go map, hand it to goja,
// call the same transform, export the result and encode it as JSON. It runs
// beside BenchmarkArticles so the two can be compared on a loaded machine.
func BenchmarkBaseline(b *testing.B) {
	base := newBaseline(b)
	doc := articleDoc(b)
	b.ReportAllocs()
	b.ResetTimer()
	defer cpuPerOp(b)()
	for i := 0; i < b.N; i++ {
		base(doc)
	}
}

func newBaseline(b *testing.B) func(bson.Raw) {
	rt, fn := plainArticles(b)
	return func(doc bson.Raw) {
		var m map[string]any
		if err := bson.Unmarshal(doc, &m); err != nil {
			b.Fatal(err)
		}
		m = plain(m).(map[string]any)
		out, err := fn(goja.Undefined(), rt.ToValue(m), rt.ToValue(map[string]any{"operation": "update"}))
		if err != nil {
			b.Fatal(err)
		}
		res := out.Export().(map[string]any)
		res["id"] = m["_id"]
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
}

// plain turns decoded driver values into what JSON and goja take.
func plain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = plain(e)
		}
		return x
	case bson.D:
		m := make(map[string]any, len(x))
		for _, e := range x {
			m[e.Key] = plain(e.Value)
		}
		return m
	case bson.A:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = plain(e)
		}
		return a
	case bson.ObjectID:
		return x.Hex()
	case bson.DateTime:
		return x.Time()
	}
	return v
}

// cpuPerOp reports the process's CPU time per operation (user + system, GC
// workers included) as cpu-ns/op: on a shared, loaded machine wall time per
// operation measures the neighbours, CPU time measures the code.
func cpuPerOp(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadsTracked runs the articles example on an update with its
// reads tracked (skipUnchanged, the default) and without (skipUnchanged
// false), in alternating blocks, and reports both CPU times per document
// and their ratio: what keeping a call's reads costs.
func BenchmarkReadsTracked(b *testing.B) {
	set, err := transform.Load("../examples/transforms", transform.Options{Pool: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	on := set.Job("articles")
	off, err := transform.Load("../examples/transforms", transform.Options{Pool: 1,
		Overrides: map[string]map[string]string{"articles": {"skip_unchanged": "false"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer off.Close()
	untracked := off.Job("articles")
	ud, err := bson.Marshal(bson.D{{Key: "updatedFields", Value: bson.D{{Key: "views", Value: 1}}}, {Key: "removedFields", Value: bson.A{}}})
	if err != nil {
		b.Fatal(err)
	}
	doc := articleDoc(b)
	ctx := context.Background()
	const block = 2000
	var tracked, plain time.Duration
	var buf []byte
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		// Which goes first alternates too.
		first := done / block % 2
		for _, k := range []int{first, 1 - first} {
			j := []*transform.Job{on, untracked}[k]
			t0 := cpuTime()
			for i := 0; i < n; i++ {
				buf = buf[:0]
				res, out, err := j.ApplyTo(ctx, buf, doc, transform.OpUpdate, ud)
				if err != nil || (k == 0) != (res.Reads != nil) {
					b.Fatal(err, res.Reads)
				}
				buf = out
			}
			if k == 0 {
				tracked += cpuTime() - t0
			} else {
				plain += cpuTime() - t0
			}
		}
	}
	b.ReportMetric(float64(tracked)/float64(b.N), "tracked-cpu-ns/op")
	b.ReportMetric(float64(plain)/float64(b.N), "untracked-cpu-ns/op")
	b.ReportMetric(float64(tracked)/float64(plain), "ratio")
}
