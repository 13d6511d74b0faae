package transform_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

func rawDoc(t *testing.T, ext string) bson.Raw {
	t.Helper()
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(ext), false, &d); err != nil {
		t.Fatal(err)
	}
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lookupJob(t *testing.T, name, src string) *transform.Job {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := transform.LoadFile(path, []byte(src), transform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// The keys and matches of a lookup are $lookup's: arrays on either side
// match element by element, dotted paths go through arrays of documents,
// numbers match across types, and a missing field is null.
func TestLookupMatchesAsLookupDoes(t *testing.T) {
	users := []bson.Raw{
		rawDoc(t, `{"_id": 1, "name": "Ada"}`),
		rawDoc(t, `{"_id": {"$numberLong": "2"}, "name": "Grace"}`),
		rawDoc(t, `{"_id": 3, "name": "Edsger", "team": null}`),
		rawDoc(t, `{"_id": 4, "name": "Barbara"}`),
		rawDoc(t, `{"_id": 5, "name": "Alan", "team": ["x", "y"]}`),
	}
	cases := []struct {
		name, local, foreign, doc string
		want                      []string
	}{
		{"a scalar", "authorId", "_id", `{"_id": 10, "authorId": 1}`, []string{"Ada"}},
		{"numbers across types", "authorId", "_id", `{"_id": 10, "authorId": 2.0}`, []string{"Grace"}},
		{"an array of keys", "tagIds", "_id", `{"_id": 10, "tagIds": [4, 1, 99]}`, []string{"Ada", "Barbara"}},
		{"a dotted path through an array of documents", "refs.id", "_id", `{"_id": 10, "refs": [{"id": 3}, {"id": 4}]}`, []string{"Edsger", "Barbara"}},
		{"a missing local field is null: it matches a null or missing foreign field", "team", "team", `{"_id": 10}`, []string{"Ada", "Grace", "Edsger", "Barbara"}},
		{"an array on the foreign side", "team", "team", `{"_id": 10, "team": "y"}`, []string{"Alan"}},
		{"nothing", "authorId", "_id", `{"_id": 10, "authorId": 42}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := jobdef.Lookup{Name: "x", From: "users", LocalField: c.local, ForeignField: c.foreign, Many: true}
			got := l.Match(rawDoc(t, c.doc), users)
			var names []string
			for _, g := range got {
				names = append(names, g.Lookup("name").StringValue())
			}
			if strings.Join(names, ",") != strings.Join(c.want, ",") {
				t.Fatalf("matched %v, want %v", names, c.want)
			}
		})
	}
}

// A declared lookup reaches the transform on ctx.lookups (one document or
// null, or an array with many), and on the document under as; the identity
// job of a mirror puts each under its name.
func TestTheTransformSeesItsLookups(t *testing.T) {
	j := lookupJob(t, "articles", `module.exports = {
  lookups: {
    author: { from: "users", localField: "authorId", foreignField: "_id", project: { name: 1 } },
    tags:   { from: "tags", localField: "tagIds", foreignField: "_id", many: true, as: "tagDocs" },
    editor: { from: "users", localField: "editorId", foreignField: "_id" },
  },
  transform(doc, ctx) {
    return {
      title: doc.title,
      author: ctx.lookups.author ? ctx.lookups.author.name : null,
      tags: doc.tagDocs.map(t => t.label),
      editor: ctx.lookups.editor,
      n: ctx.lookups.tags.length,
    };
  },
};`)
	if len(j.Lookups) != 3 || j.Lookups[0].Projection() == nil {
		t.Fatalf("lookups %+v", j.Lookups)
	}
	doc := rawDoc(t, `{"_id": 1, "title": "T", "authorId": 7, "tagIds": [1, 2]}`)
	res, _, err := j.ApplyWith(context.Background(), nil, doc, transform.OpInsert, nil, jobdef.LookupResults{
		{rawDoc(t, `{"_id": 7, "name": "Ada"}`)},
		{rawDoc(t, `{"_id": 1, "label": "go"}`), rawDoc(t, `{"_id": 2, "label": "db"}`)},
		nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"title":"T","author":"Ada","tags":["go","db"],"editor":null,"n":2,"id":1}`
	if !bytes.Equal(res.JSON, []byte(want)) {
		t.Fatalf("got %s\nwant %s", res.JSON, want)
	}
}

func TestAnIdentityJobMergesItsLookupsUnderTheirNames(t *testing.T) {
	j := lookupJob(t, "articles", `module.exports = {
  mirror: "articles_copy",
  lookups: { author: { from: "users", localField: "authorId", foreignField: "_id" } },
};`)
	doc := rawDoc(t, `{"_id": 1, "authorId": 7}`)
	res, _, err := j.ApplyWith(context.Background(), nil, doc, transform.OpInsert, nil, jobdef.LookupResults{{rawDoc(t, `{"_id": 7, "name": "Ada"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Raw.Lookup("author", "name").StringValue(); got != "Ada" {
		t.Fatalf("mirrored %v", res.Raw)
	}
}

func TestBadLookupsAreConfigErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`lookups: { a: { localField: "x", foreignField: "_id" } }`, "from"},
		{`lookups: { a: { from: "users", foreignField: "_id" } }`, "localField"},
		{`lookups: { a: { from: "users", localField: "x", foreignField: "_id", as: "_id" } }`, "as may not be _id"},
		{`lookups: { a: { from: "users", localField: "x", foreignField: "email", project: { email: 0 } } }`, "leaves out foreignField"},
		{`lookups: { a: { from: "users", localField: "x", foreignField: "_id", project: { a: 1, b: 0 } } }`, "mixes"},
		{`lookups: { a: { from: "users", localField: "$x", foreignField: "_id" } }`, "not a field path"},
		{`lookups: { a: { from: "users", localField: "x", foreignField: "_id", many: "yes" } }`, "many must be"},
		{`lookups: { a: { from: "users", localField: "x", foreignField: "_id", as: "t" }, b: { from: "tags", localField: "y", foreignField: "_id", as: "t" } }`, "both set the field"},
		{`relate: [{ namespace: "app.comments", withNamespace: "app.other", srcField: "articleId" }]`, "withNamespace"},
		{`relate: [{ srcField: "articleId" }]`, "namespace"},
		{`database: "shop", relate: [{ namespace: "shop.comments", withNamespace: "blog.articles", srcField: "articleId" }]`, `withNamespace names database "blog"`},
	} {
		path := filepath.Join(t.TempDir(), "articles.js")
		src := "module.exports = { " + c.src + " };"
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := transform.LoadFile(path, []byte(src), transform.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error saying %q, got %v", c.src, c.want, err)
		}
	}
}

func TestRelatesAndLookupsAreTheJobsDependencies(t *testing.T) {
	j := lookupJob(t, "articles", `module.exports = {
  lookups: { author: { from: "users", localField: "authorId", foreignField: "_id" } },
  relate: [{ namespace: "app.comments", srcField: "articleId", matchField: "_id", keepSrc: true }],
};`)
	deps := j.Dependencies()
	want := []jobdef.Dependency{{Collection: "users", Key: "_id", Field: "authorId"}, {Database: "app", Collection: "comments", Key: "articleId", Field: "_id"}}
	if len(deps) != 2 || deps[0] != want[0] || deps[1] != want[1] {
		t.Fatalf("dependencies %+v, want %+v", deps, want)
	}
	if got := strings.Join(j.RelatedCollections(), ","); got != "comments,users" {
		t.Fatalf("related %s", got)
	}
}

// check resolves lookups against the file's related documents.
func TestCheckResolvesLookupsAgainstRelatedSamples(t *testing.T) {
	dir := t.TempDir()
	src := `module.exports = {
  lookups: { author: { from: "users", localField: "authorId", foreignField: "_id" } },
  transform(doc, ctx) { return { title: doc.title, author: ctx.lookups.author && ctx.lookups.author.name }; },
  samples: [ { _id: 1, title: "T", authorId: 7 }, { _id: 2, title: "U", authorId: 8 } ],
  related: { users: [ { _id: 7, name: "Ada" } ] },
};`
	if err := os.WriteFile(filepath.Join(dir, "articles.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := transform.Check(&out, dir, "", transform.Options{}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `"author":"Ada"`) || !strings.Contains(out.String(), `"author":null`) {
		t.Fatalf("check output:\n%s", out.String())
	}
}

// A monstache script that reads other collections with findId carries its
// [[relate]] on the function, as it carries samples; any other option on a
// function stays refused.
func TestAMonstacheScriptCarriesItsRelates(t *testing.T) {
	j := lookupJob(t, "orders", `module.exports = function (doc) {
  var c = findId(doc.customerId, { collection: "customers" });
  doc.customer = c ? c.name : null;
  return doc;
};
module.exports.relate = [{ namespace: "shop.customers", withNamespace: "shop.orders", matchField: "customerId" }];`)
	deps := j.Dependencies()
	want := jobdef.Dependency{Database: "shop", Collection: "customers", Key: "_id", Field: "customerId"}
	if !j.Function || len(deps) != 1 || deps[0] != want {
		t.Fatalf("function %v, dependencies %+v, want [%+v]", j.Function, deps, want)
	}
	src := []byte(`module.exports = function (doc) { return doc; };
module.exports.relate = [{ srcField: "x" }];
module.exports.lookups = {};`)
	_, err := transform.LoadFile(filepath.Join(t.TempDir(), "orders.js"), src, transform.Options{})
	if err == nil || !strings.Contains(err.Error(), "namespace") || !strings.Contains(err.Error(), `key "lookups"`) {
		t.Fatalf("load: %v", err)
	}
}

// monstache's withNamespace names the job's own namespace: its database,
// when given, is checked against the job's once that is settled.
func TestWithNamespaceOfTheJobsOwnDatabaseIsAccepted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "articles.js")
	src := `module.exports = { relate: [{ namespace: "shop.comments", withNamespace: "shop.articles", srcField: "articleId" }] };`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := transform.LoadFile(path, []byte(src), transform.Options{Database: "shop"}); err != nil {
		t.Fatalf("withNamespace of the job's own database: %v", err)
	}
	if _, err := transform.LoadFile(path, []byte(src), transform.Options{Database: "blog"}); err == nil || !strings.Contains(err.Error(), `withNamespace names database "shop"`) {
		t.Fatalf("withNamespace of another database than the job's: %v", err)
	}
}
