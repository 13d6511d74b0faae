package otto_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/robertkrimen/otto"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// articleDoc is BenchmarkArticles's document (transform/bench_test.go):
// a realistic article of about 1 KB of BSON.
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

// articlesES5 is examples/transforms/articles.js's transform as a
// monstache middleware, in the ES5 otto runs (var for const and let): the
// same logic, line for line.
const articlesES5 = `
var MAX_BODY = 500;
function normaliseTags(tags) {
  if (!Array.isArray(tags)) return [];
  var out = [];
  for (var i = 0; i < tags.length; i++) {
    if (typeof tags[i] !== "string") continue;
    var t = tags[i].trim().toLowerCase();
    if (t !== "" && out.indexOf(t) < 0) out.push(t);
  }
  return out;
}
module.exports = function (doc, ns, updateDesc) {
  if (doc.status !== "published") return null;
  var body = typeof doc.body === "string" ? doc.body : "";
  if (body.length > MAX_BODY) body = body.slice(0, MAX_BODY) + "...";
  return {
    title: doc.title,
    summary: doc.summary || "",
    body: body,
    tags: normaliseTags(doc.tags),
    author: doc.author ? doc.author.name : null,
    publishedAt: doc.publishedAt,
    updatedAt: doc.updatedAt,
  };
};
`

// ottoWay is monstache's path for one document: the BSON decoded into a
// map, handed to otto, the result exported and encoded as JSON.
type ottoWay struct {
	vm *otto.Otto
	fn otto.Value
	ns otto.Value
}

func newOttoWay(tb testing.TB) *ottoWay {
	vm := otto.New()
	if _, err := vm.Run("var module = {exports: {}};" + articlesES5); err != nil {
		tb.Fatal(err)
	}
	mod, _ := vm.Get("module")
	fn, err := mod.Object().Get("exports")
	if err != nil {
		tb.Fatal(err)
	}
	ns, _ := vm.ToValue("bench.articles")
	return &ottoWay{vm: vm, fn: fn, ns: ns}
}

func (o *ottoWay) apply(tb testing.TB, raw bson.Raw) []byte {
	// Sub-documents as maps too, as monstache hands them to otto.
	dec := bson.NewDecoder(bson.NewDocumentReader(bytes.NewReader(raw)))
	dec.DefaultDocumentM()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		tb.Fatal(err)
	}
	doc, err := o.vm.ToValue(m)
	if err != nil {
		tb.Fatal(err)
	}
	ret, err := o.fn.Call(doc, doc, o.ns, otto.UndefinedValue())
	if err != nil {
		tb.Fatal(err)
	}
	out, err := ret.Export()
	if err != nil {
		tb.Fatal(err)
	}
	res, ok := out.(map[string]any)
	if !ok {
		tb.Fatalf("otto returned %T", out)
	}
	res["id"] = m["_id"]
	b, err := json.Marshal(res)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestOttoWayIndexesTheArticle: the otto way returns the article, so the
// benchmark compares two paths that both do the work.
func TestOttoWayIndexesTheArticle(t *testing.T) {
	b := newOttoWay(t).apply(t, articleDoc(t))
	for _, want := range []string{`"title":"Change streams in practice`, `"tags":["mongodb","change streams","replication","ops"]`, `"author":"Ada Lovelace"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("otto way wrote %s, without %s", b, want)
		}
	}
}

// BenchmarkArticlesVsOtto runs the articles example as the sidecar does
// (BenchmarkArticles: ApplyTo, BSON in, Meilisearch's JSON out, an update
// with its reads tracked) and monstache's otto way in alternating blocks,
// so both meet the same load, and reports the CPU time of each per
// document and how many times faster the sidecar's is.
func BenchmarkArticlesVsOtto(b *testing.B) {
	set, err := transform.Load("../../examples/transforms", transform.Options{Pool: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	j := set.Job("articles")
	ow := newOttoWay(b)
	doc := articleDoc(b)
	ctx := context.Background()
	const block = 500
	var ours, theirs time.Duration
	var buf []byte
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		n := min(block, b.N-done)
		first := done / block % 2
		for _, k := range []int{first, 1 - first} {
			t0 := cpuTime()
			for i := 0; i < n; i++ {
				if k == 0 {
					res, out, err := j.ApplyTo(ctx, buf[:0], doc, transform.OpUpdate, nil)
					if err != nil || res.Skip {
						b.Fatal(err, res.Skip)
					}
					buf = out
				} else {
					ow.apply(b, doc)
				}
			}
			if k == 0 {
				ours += cpuTime() - t0
			} else {
				theirs += cpuTime() - t0
			}
		}
	}
	b.ReportMetric(float64(ours)/float64(b.N), "articles-cpu-ns/op")
	b.ReportMetric(float64(theirs)/float64(b.N), "otto-cpu-ns/op")
	b.ReportMetric(float64(theirs)/float64(ours), "times-faster")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
