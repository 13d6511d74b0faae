package transform_test

import (
	"context"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// article is the document of the reads tests.
var article = bson.D{
	{Key: "_id", Value: 1}, {Key: "title", Value: "T"}, {Key: "body", Value: "B"},
	{Key: "views", Value: 3}, {Key: "secret", Value: "s"},
	{Key: "address", Value: bson.D{{Key: "city", Value: "Lyon"}}},
}

// updated is an updateDescription setting keys and removing removed.
func updated(t *testing.T, keys []string, removed ...string) bson.Raw {
	t.Helper()
	set := bson.D{}
	for _, k := range keys {
		set = append(set, bson.E{Key: k, Value: 1})
	}
	rm := bson.A{}
	for _, r := range removed {
		rm = append(rm, r)
	}
	return marshal(t, bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: rm}, {Key: "truncatedArrays", Value: bson.A{}}})
}

// readsOf runs an update of doc through j and returns what the call read.
func readsOf(t *testing.T, j *transform.Job, doc any, ud bson.Raw) *transform.Reads {
	t.Helper()
	res, err := j.Apply(context.Background(), marshal(t, doc), transform.OpUpdate, ud)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if res.Reads == nil {
		t.Fatal("an update of a job with skipUnchanged has no Reads")
	}
	return res.Reads
}

func TestReadsSayWhichUpdatesCannotChangeTheResult(t *testing.T) {
	cases := []struct {
		name, src string
		// unchanged by an update of each of these keys; changed by each of touched.
		unchanged, touched []string
	}{
		{"fields read one by one", `return {title: doc.title, city: doc.address.city};`,
			[]string{"views", "body", "secret", "addressBook", "titles"}, []string{"title", "address", "address.city", "title.x"}},
		{"a field asked for but absent", `return {t: doc.tagline || doc.title};`,
			[]string{"views"}, []string{"tagline", "title"}},
		{"in and hasOwnProperty", `return {a: "draft" in doc, b: doc.hasOwnProperty("status")};`,
			[]string{"views"}, []string{"draft", "status"}},
		{"a field written", `doc.extra = 1; return {e: doc.extra};`,
			[]string{"views"}, []string{"extra"}},
		{"Object.keys", `return {n: Object.keys(doc).length};`, nil, []string{"views", "anything"}},
		{"spread", `return {...doc};`, nil, []string{"views"}},
		{"for...in", `var n = 0; for (var k in doc) n++; return {n: n};`, nil, []string{"views"}},
		{"JSON.stringify", `return {s: JSON.stringify(doc)};`, nil, []string{"views"}},
		{"Object.assign", `return Object.assign({}, doc);`, nil, []string{"views"}},
		{"the document returned", `return doc;`, nil, []string{"views", "new"}},
		{"the document inside the result", `return {d: doc};`, nil, []string{"views"}},
		{"a field deleted unread, then the document returned", `delete doc.secret; return doc;`,
			[]string{"secret"}, []string{"views", "title", "secret.x"}},
		{"a field read then deleted", `var s = doc.secret; delete doc.secret; return {...doc, n: s.length};`,
			nil, []string{"secret", "views"}},
		{"ctx.operation", `return {t: doc.title, o: ctx.operation};`, nil, []string{"views"}},
		{"ctx.updateDescription", `return {t: doc.title, u: ctx.updateDescription ? 1 : 0};`, nil, []string{"views"}},
		{"ctx enumerated", `return {t: doc.title, k: Object.keys(ctx).length};`, nil, []string{"views"}},
		{"updateDescription tested with in", `return {t: doc.title, u: "updateDescription" in ctx};`, nil, []string{"views"}},
		{"ctx.job and ctx.collection", `return {t: doc.title, j: ctx.job + ctx.collection};`, []string{"views"}, []string{"title"}},
		{"Date.now()", `return {t: doc.title, at: Date.now()};`, nil, []string{"views"}},
		{"new Date()", `return {t: doc.title, at: new Date()};`, nil, []string{"views"}},
		{"Date()", `return {t: doc.title, at: Date()};`, nil, []string{"views"}},
		{"Math.random()", `return {t: doc.title, r: Math.random()};`, nil, []string{"views"}},
		{"dates of the document", `return {t: doc.title, d: new Date(0).toISOString(), u: Date.UTC(2024, 0, 1), p: Date.parse("2024-01-01")};`,
			[]string{"views"}, []string{"title"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := loadJob(t, `module.exports = { transform(doc, ctx) { `+c.src+` } };`)
			for _, k := range c.unchanged {
				if r := readsOf(t, j, article, updated(t, []string{k})); !r.UnchangedBy(updated(t, []string{k})) {
					t.Errorf("an update of %q counts as a change; reads %+v", k, r)
				}
			}
			for _, k := range c.touched {
				ud := updated(t, []string{k})
				if r := readsOf(t, j, article, ud); r.UnchangedBy(ud) {
					t.Errorf("an update of %q counts as no change; reads %+v", k, r)
				}
				ud = updated(t, nil, k)
				if r := readsOf(t, j, article, ud); r.UnchangedBy(ud) {
					t.Errorf("removing %q counts as no change; reads %+v", k, r)
				}
			}
		})
	}
}

func TestReadsSeeTruncatedArraysAndRefuseWhatIsNoUpdateDescription(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return {tags: doc.tags}; } };`)
	doc := bson.D{{Key: "_id", Value: 1}, {Key: "tags", Value: bson.A{"a", "b"}}, {Key: "views", Value: 1}}
	trunc := marshal(t, bson.D{{Key: "updatedFields", Value: bson.D{}}, {Key: "removedFields", Value: bson.A{}},
		{Key: "truncatedArrays", Value: bson.A{bson.D{{Key: "field", Value: "tags"}, {Key: "newSize", Value: 1}}}}})
	r := readsOf(t, j, doc, trunc)
	if r.UnchangedBy(trunc) {
		t.Error("a truncated array read counts as no change")
	}
	for name, ud := range map[string]bson.Raw{
		"nil":                nil,
		"no updatedFields":   marshal(t, bson.D{{Key: "removedFields", Value: bson.A{}}}),
		"updatedFields text": marshal(t, bson.D{{Key: "updatedFields", Value: "views"}}),
		"a removed number":   marshal(t, bson.D{{Key: "updatedFields", Value: bson.D{}}, {Key: "removedFields", Value: bson.A{1}}}),
	} {
		if r.UnchangedBy(ud) {
			t.Errorf("%s: counts as no change", name)
		}
	}
	var none *transform.Reads
	if none.UnchangedBy(updated(t, []string{"views"})) {
		t.Error("a nil Reads counts as no change")
	}
}

func TestReadsAreOnlyKeptForUpdatesOfJobsThatSkip(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return {t: doc.title}; } };`)
	ctx := context.Background()
	for _, op := range []transform.Operation{transform.OpInsert, transform.OpReplace, transform.OpReindex} {
		res, err := j.Apply(ctx, marshal(t, article), op, nil)
		if err != nil || res.Reads != nil {
			t.Errorf("%s: reads %+v, err %v; want none", op, res.Reads, err)
		}
	}
	// Without its updateDescription an update cannot be judged (UnchangedBy
	// is false whatever was read): nothing is kept.
	if res, err := j.Apply(ctx, marshal(t, article), transform.OpUpdate, nil); err != nil || res.Reads != nil {
		t.Errorf("an update without its updateDescription: reads %+v, err %v; want none", res.Reads, err)
	}
	off := loadJob(t, `module.exports = { skipUnchanged: false, transform(doc) { return {t: doc.title}; } };`)
	if res, err := off.Apply(ctx, marshal(t, article), transform.OpUpdate, updated(t, []string{"views"})); err != nil || res.Reads != nil {
		t.Errorf("skipUnchanged false: reads %+v, err %v; want none", res.Reads, err)
	}
	ident := loadJob(t, `module.exports = {};`)
	if res, err := ident.Apply(ctx, marshal(t, article), transform.OpUpdate, updated(t, []string{"views"})); err != nil || res.Reads != nil {
		t.Errorf("the identity: reads %+v, err %v; want none (it reads everything)", res.Reads, err)
	}
}

func TestATrackedUpdateSeesTheSameContextAsBefore(t *testing.T) {
	// Without an updateDescription a tracked update's ctx has none, as the
	// frozen ctx of other calls.
	j := loadJob(t, `module.exports = { transform(doc, ctx) {
		return {has: "updateDescription" in ctx, keys: Object.keys(ctx).join(), op: ctx.operation, ud: typeof ctx.updateDescription};
	} };`)
	res, err := j.Apply(context.Background(), marshal(t, article), transform.OpUpdate, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Doc["has"] != false || res.Doc["keys"] != "job,collection,operation" || res.Doc["op"] != "update" || res.Doc["ud"] != "undefined" {
		t.Errorf("ctx without an updateDescription: %v", res.Doc)
	}
	res, err = j.Apply(context.Background(), marshal(t, article), transform.OpUpdate, updated(t, []string{"views"}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Doc["has"] != true || res.Doc["keys"] != "job,collection,operation,updateDescription" || res.Doc["ud"] != "object" {
		t.Errorf("ctx with an updateDescription: %v", res.Doc)
	}
}

func TestOneCallAskingTheClockMakesEveryUpdateOfTheJobCount(t *testing.T) {
	// Only documents with stamp: true ask the clock; once one has, a call
	// that did not ask is not judged either: the transform may keep what
	// it got (here, in a module variable).
	j := loadJob(t, `var first; module.exports = { transform(doc) {
		if (doc.stamp && first === undefined) first = Date.now();
		return {t: doc.title, first: first};
	} };`)
	views := updated(t, []string{"views"})
	if r := readsOf(t, j, article, views); !r.UnchangedBy(views) {
		t.Fatalf("before any clock: %+v", r)
	}
	stamped := append(bson.D{}, article...)
	stamped = append(stamped, bson.E{Key: "stamp", Value: true})
	if r := readsOf(t, j, stamped, views); !r.Unknown || r.UnchangedBy(views) {
		t.Errorf("the call asking the clock: %+v", r)
	}
	for i := 0; i < 4; i++ { // every runtime of the pool
		if r := readsOf(t, j, article, views); !r.Unknown || r.UnchangedBy(views) {
			t.Errorf("a later call: %+v", r)
		}
	}
	top := loadJob(t, `var loaded = Date.now(); module.exports = { transform(doc) { return {t: doc.title, at: loaded}; } };`)
	if r := readsOf(t, top, article, views); !r.Unknown {
		t.Errorf("the clock asked by the module's top-level code: %+v", r)
	}
}

func TestDateIsStillTheDateClass(t *testing.T) {
	j := loadJob(t, `class Stamp extends Date { year() { return this.getUTCFullYear(); } }
	module.exports = { transform(doc) {
		var d = new Date(86400000);
		return {
			inst: d instanceof Date, ctor: d.constructor === Date, proto: Object.getPrototypeOf(d) === Date.prototype,
			name: Date.name, length: Date.length, iso: d.toISOString(), utc: Date.UTC(1970, 0, 2), parse: Date.parse("1970-01-02T00:00:00Z"),
			sub: new Stamp(0).year(), subInst: new Stamp(0) instanceof Date, docDate: doc.at instanceof Date,
			str: typeof Date(), now: typeof Date.now(), rnd: Math.random() < 1,
			perf: typeof performance, crypto: typeof crypto,
		};
	} };`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "at", Value: bson.DateTime(0)}})
	want := map[string]any{
		"inst": true, "ctor": true, "proto": true, "name": "Date", "length": int64(7), "iso": "1970-01-02T00:00:00.000Z",
		"utc": int64(86400000), "parse": int64(86400000), "sub": int64(1970), "subInst": true, "docDate": true,
		"str": "string", "now": "number", "rnd": true, "perf": "undefined", "crypto": "undefined",
	}
	for k, v := range want {
		if res.Doc[k] != v {
			t.Errorf("%s: %#v, want %#v", k, res.Doc[k], v)
		}
	}
}

func TestMonstacheFunctionsReadTheirUpdateDescriptionWhenTheyCanSeeIt(t *testing.T) {
	views := updated(t, []string{"views"})
	for src, sees := range map[string]bool{
		`module.exports = function (doc) { return {t: doc.title}; }`:                          false,
		`module.exports = function (doc, ns) { return {t: this.title, ns: ns}; }`:             false,
		`module.exports = (doc) => ({t: doc.title})`:                                          false,
		`module.exports = function (doc, ns, ud) { return {t: doc.title, u: !!ud}; }`:         true,
		`module.exports = function (doc, ns, a, ud = null) { return {t: doc.title}; }`:        true,
		`module.exports = function (doc, ...rest) { return {t: doc.title, n: rest.length}; }`: true,
		`module.exports = function (doc) { return {t: doc.title, n: arguments.length}; }`:     true,
		`module.exports = function (doc) { return {t: doc.title, n: eval("1")}; }`:            true,
		`function f(doc, ns, ud) { return {t: doc.title}; } module.exports = f.bind(null)`:    true,
	} {
		j := loadJob(t, src)
		r := readsOf(t, j, article, views)
		if r.Context != sees || r.UnchangedBy(views) == sees {
			t.Errorf("%s: reads %+v, want it to see its update description: %v", src, r, sees)
		}
	}
}

func TestMirrorReadsWhatItCopiesAndWhatDecidesTypes(t *testing.T) {
	views := updated(t, []string{"views"})
	drop := loadJob(t, `module.exports = { mirror: "m", transform(doc) { delete doc.secret; return doc; } };`)
	r := readsOf(t, drop, article, views)
	if !r.All || !slices.Equal(r.Except, []string{"secret"}) || r.UnchangedBy(views) || !r.UnchangedBy(updated(t, []string{"secret"})) {
		t.Errorf("a mirror dropping a field: %+v", r)
	}
	// A new object's keys take the type of the source's field of the same
	// name: "views" is read, though the transform never asked for it.
	typed := loadJob(t, `module.exports = { mirror: "m", transform(doc) { return {views: 1, t: doc.title}; } };`)
	if r := readsOf(t, typed, article, views); r.UnchangedBy(views) || !r.UnchangedBy(updated(t, []string{"body"})) {
		t.Errorf("a mirror writing a key the source has: %+v", r)
	}
}

func TestReadingALookupReadsItsLocalField(t *testing.T) {
	lookups := `lookups: { author: { from: "users", localField: "author.id", foreignField: "_id" },
		tags: { from: "tags", localField: "tagIds", foreignField: "_id", many: true, as: "labels" } },`
	doc := bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}, {Key: "author", Value: bson.D{{Key: "id", Value: 7}}}, {Key: "tagIds", Value: bson.A{1}}, {Key: "views", Value: 1}}
	user := marshal(t, bson.D{{Key: "_id", Value: 7}, {Key: "name", Value: "Ada"}})
	tag := marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "label", Value: "go"}})
	res := jobdef.LookupResults{{user}, {tag}}
	for name, c := range map[string]struct {
		body               string
		changed, unchanged []string
	}{
		"ctx.lookups":       {`return {t: doc.title, a: ctx.lookups.author.name};`, []string{"author", "author.id", "tagIds"}, []string{"views"}},
		"the field as sets": {`return {t: doc.title, l: doc.labels.length};`, []string{"tagIds", "labels"}, []string{"views", "author"}},
		"no lookup read":    {`return {t: doc.title};`, []string{"title"}, []string{"views", "author", "tagIds"}},
		"ctx enumerated":    {`return {t: doc.title, k: Object.keys(ctx).length};`, []string{"views"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			j := loadJob(t, `module.exports = { `+lookups+` transform(doc, ctx) { `+c.body+` } };`)
			for _, k := range c.changed {
				ud := updated(t, []string{k})
				r, _, err := j.ApplyWith(context.Background(), nil, marshal(t, doc), transform.OpUpdate, ud, res)
				if err != nil {
					t.Fatal(err)
				}
				if r.Reads.UnchangedBy(ud) {
					t.Errorf("an update of %q counts as no change: %+v", k, r.Reads)
				}
			}
			for _, k := range c.unchanged {
				ud := updated(t, []string{k})
				r, _, err := j.ApplyWith(context.Background(), nil, marshal(t, doc), transform.OpUpdate, ud, res)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Reads.UnchangedBy(ud) {
					t.Errorf("an update of %q counts as a change: %+v", k, r.Reads)
				}
			}
		})
	}
}

func TestAMonstacheReadOfAnotherCollectionMakesTheUpdateCount(t *testing.T) {
	j := readerJob(t, `module.exports = function (doc) {
		if (doc.lookup) { findId(1, {collection: "users"}); }
		return {t: doc.title};
	}`, &fakeReader{}, transform.Options{Database: "app"})
	views := updated(t, []string{"views"})
	if r := readsOf(t, j, article, views); !r.UnchangedBy(views) {
		t.Fatalf("without a read: %+v", r)
	}
	withRead := append(bson.D{}, article...)
	withRead = append(withRead, bson.E{Key: "lookup", Value: true})
	if r := readsOf(t, j, withRead, views); !r.Unknown || r.UnchangedBy(views) {
		t.Errorf("a call reading another collection: %+v", r)
	}
}
