package transform_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// fakeReader records what the read globals ask and answers with docs (or
// err); block makes each call wait for its context to end.
type fakeReader struct {
	mu    sync.Mutex
	calls []readCall
	docs  []bson.Raw
	err   error
	block bool
}

type readCall struct {
	method, db, coll string
	filter           bson.Raw
	stages           []bson.Raw
	opts             transform.ReadOptions
	deadline         time.Duration // left on the context when called
}

func (f *fakeReader) record(ctx context.Context, c readCall) ([]bson.Raw, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.deadline = time.Until(dl)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	docs, err := f.docs, f.err
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if int64(len(docs)) > c.opts.Limit {
		docs = docs[:c.opts.Limit]
	}
	return docs, err
}

func (f *fakeReader) FindOne(ctx context.Context, db, coll string, filter bson.Raw, opts transform.ReadOptions) (bson.Raw, error) {
	docs, err := f.record(ctx, readCall{method: "FindOne", db: db, coll: coll, filter: filter, opts: opts})
	if len(docs) == 0 {
		return nil, err
	}
	return docs[0], err
}

func (f *fakeReader) Find(ctx context.Context, db, coll string, filter bson.Raw, opts transform.ReadOptions) ([]bson.Raw, error) {
	return f.record(ctx, readCall{method: "Find", db: db, coll: coll, filter: filter, opts: opts})
}

func (f *fakeReader) Aggregate(ctx context.Context, db, coll string, pipeline []bson.Raw, opts transform.ReadOptions) ([]bson.Raw, error) {
	return f.record(ctx, readCall{method: "Aggregate", db: db, coll: coll, stages: pipeline, opts: opts})
}

func (f *fakeReader) only(t *testing.T) readCall {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 1 {
		t.Fatalf("%d reads, want 1: %+v", len(f.calls), f.calls)
	}
	return f.calls[0]
}

// ext is a document written as canonical Extended JSON, for comparing
// what the globals sent.
func ext(t *testing.T, raw bson.Raw) string {
	t.Helper()
	if raw == nil {
		return "<nil>"
	}
	b, err := bson.MarshalExtJSON(raw, true, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readerJob(t *testing.T, src string, r transform.Reader, opts ...transform.Options) *transform.Job {
	t.Helper()
	o := transform.Options{Database: "test"}
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Reader = r
	return loadJob(t, src, o)
}

var (
	authorID = bson.NewObjectIDFromTimestamp(time.Unix(1700000000, 0))
	postID   = bson.NewObjectIDFromTimestamp(time.Unix(1700000100, 0))
)

// monstache's documented findId example (advanced.md, "Embedding
// Documents"): the author reference, an ObjectId the script sees as its
// hex, is looked up as an ObjectId in the collection the options name, and
// the author comes back with its own ObjectIds as hex strings.
func TestFindIdAsMonstacheDocuments(t *testing.T) {
	r := &fakeReader{docs: []bson.Raw{marshal(t, bson.D{{Key: "_id", Value: authorID}, {Key: "name", Value: "Ada"}})}}
	j := readerJob(t, `module.exports = function(post) {
    if (post.author) { // author is a an object id reference
        post.author = findId(post.author, {
          database: "test",
          collection: "users"
        });
    }
    return post;
}`, r, transform.Options{Database: "blog"})
	res := mustApply(t, j, bson.D{{Key: "_id", Value: postID}, {Key: "author", Value: authorID}})
	c := r.only(t)
	if c.method != "FindOne" || c.db != "test" || c.coll != "users" {
		t.Errorf("read %s on %s.%s, want FindOne on test.users", c.method, c.db, c.coll)
	}
	if got, want := ext(t, c.filter), fmt.Sprintf(`{"_id":{"$oid":"%s"}}`, authorID.Hex()); got != want {
		t.Errorf("filter %s, want %s", got, want)
	}
	want := map[string]any{"id": postID.Hex(), "_id": postID.Hex(), "author": map[string]any{"_id": authorID.Hex(), "name": "Ada"}}
	if !reflect.DeepEqual(res.Doc, want) {
		t.Errorf("got %v, want %v", res.Doc, want)
	}
}

// Not found is null, as in monstache; without options the database is the
// job's source database and the collection the job's collection.
func TestFindOneNotFoundAndDefaults(t *testing.T) {
	r := &fakeReader{}
	j := readerJob(t, `module.exports = function(doc) {
	return {other: findOne({slug: doc.slug, _id: {$ne: doc._id}}, {select: {title: 1, _id: 0}, sort: {date: -1}})};
}`, r, transform.Options{Database: "blog"})
	res := mustApply(t, j, bson.D{{Key: "_id", Value: postID}, {Key: "slug", Value: "a"}})
	if res.Doc["other"] != nil {
		t.Errorf("other = %v, want null", res.Doc["other"])
	}
	c := r.only(t)
	if c.db != "blog" || c.coll != "job" {
		t.Errorf("read %s.%s, want the job's blog.job", c.db, c.coll)
	}
	if got, want := ext(t, c.filter), fmt.Sprintf(`{"slug":"a","_id":{"$ne":{"$oid":"%s"}}}`, postID.Hex()); got != want {
		t.Errorf("filter %s, want %s", got, want)
	}
	if got := ext(t, c.opts.Projection); got != `{"title":{"$numberInt":"1"},"_id":{"$numberInt":"0"}}` {
		t.Errorf("projection %s", got)
	}
	if got := ext(t, c.opts.Sort); got != `{"date":{"$numberInt":"-1"}}` {
		t.Errorf("sort %s", got)
	}
	if c.opts.Limit != 1 {
		t.Errorf("limit %d, want 1", c.opts.Limit)
	}
}

// monstache's documented find example: sort as an array of field names,
// limit and select; and the object form of sort its code reads.
func TestFindAsMonstacheDocuments(t *testing.T) {
	docs := []bson.Raw{
		marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "age", Value: 36}}),
		marshal(t, bson.D{{Key: "_id", Value: 2}, {Key: "age", Value: 41}}),
	}
	r := &fakeReader{docs: docs}
	j := readerJob(t, `module.exports = function(doc) {
    doc.twoAgesSortedByName = find({}, {
            sort: ["name"],
            limit: 2,
            select: {
              age: 1
            }
    });
    return doc;
}`, r)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 9}})
	c := r.only(t)
	if c.method != "Find" || ext(t, c.filter) != `{}` || ext(t, c.opts.Sort) != `{"name":{"$numberInt":"1"}}` || c.opts.Limit != 2 ||
		ext(t, c.opts.Projection) != `{"age":{"$numberInt":"1"}}` {
		t.Errorf("read %+v (filter %s, sort %s, projection %s)", c, ext(t, c.filter), ext(t, c.opts.Sort), ext(t, c.opts.Projection))
	}
	want := []any{map[string]any{"_id": int64(1), "age": int64(36)}, map[string]any{"_id": int64(2), "age": int64(41)}}
	if !reflect.DeepEqual(res.Doc["twoAgesSortedByName"], want) {
		t.Errorf("got %v, want %v", res.Doc["twoAgesSortedByName"], want)
	}

	r = &fakeReader{}
	j = readerJob(t, `module.exports = function(doc) { return {n: find({}, {sort: ["-age", "+name"]}).length, m: find({}, {sort: {age: -1, name: 1}}).length}; }`, r)
	res = mustApply(t, j, bson.D{{Key: "_id", Value: 9}})
	if res.Doc["n"] != int64(0) || res.Doc["m"] != int64(0) {
		t.Errorf("no match: got %v, want empty arrays", res.Doc)
	}
	for _, c := range r.calls {
		if got := ext(t, c.opts.Sort); got != `{"age":{"$numberInt":"-1"},"name":{"$numberInt":"1"}}` {
			t.Errorf("sort %s", got)
		}
	}
}

// find without a limit returns at most MaxReadDocuments: when more match,
// it fails rather than return some of them; a larger limit is refused.
func TestFindResultCap(t *testing.T) {
	var many []bson.Raw
	for i := 0; i <= transform.MaxReadDocuments; i++ {
		many = append(many, marshal(t, bson.D{{Key: "_id", Value: i}}))
	}
	r := &fakeReader{docs: many}
	j := readerJob(t, `module.exports = function(doc) { return {n: find({}).length}; }`, r)
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "RangeError", "find on test.job: more than 1000 documents match; give a limit (at most 1000)")
	if c := r.only(t); c.opts.Limit != transform.MaxReadDocuments+1 || c.opts.MaxBytes != transform.MaxReadBytes {
		t.Errorf("limit %d, max bytes %d: want %d, %d", c.opts.Limit, c.opts.MaxBytes, transform.MaxReadDocuments+1, transform.MaxReadBytes)
	}

	r.docs = many[:transform.MaxReadDocuments]
	r.calls = nil
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	if res.Doc["n"] != int64(transform.MaxReadDocuments) {
		t.Errorf("n = %v, want %d", res.Doc["n"], transform.MaxReadDocuments)
	}

	j = readerJob(t, `module.exports = function(doc) { return {n: find({}, {limit: 1001}).length}; }`, r)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "RangeError: find: limit 1001 is more than 1000")

	r.docs = many
	j = readerJob(t, `module.exports = function(doc) { return {n: pipe([{$match: {}}]).length}; }`, r)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "pipe on test.job: the pipeline returns more than 1000 documents")
}

// monstache's documented pipe example, and the stages that write (or never
// end) refused wherever they are, before anything is sent.
func TestPipe(t *testing.T) {
	r := &fakeReader{docs: []bson.Raw{marshal(t, bson.D{{Key: "foo", Value: 1}})}}
	j := readerJob(t, `module.exports = function(doc, ns) {
  doc.extra = pipe([
    { $match: {foo: 1} },
    { $limit: 1 },
    { $project: { _id: 0, foo: 1}}
  ]
  // optional , { database: "foo", collection: "bar"} // defaults to same namespace
  );
  return doc;
}`, r)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	c := r.only(t)
	var stages []string
	for _, s := range c.stages {
		stages = append(stages, ext(t, s))
	}
	if got := strings.Join(stages, " "); got != `{"$match":{"foo":{"$numberInt":"1"}}} {"$limit":{"$numberInt":"1"}} {"$project":{"_id":{"$numberInt":"0"},"foo":{"$numberInt":"1"}}}` {
		t.Errorf("stages %s", got)
	}
	if !reflect.DeepEqual(res.Doc["extra"], []any{map[string]any{"foo": int64(1)}}) {
		t.Errorf("extra %v", res.Doc["extra"])
	}

	for _, stages := range []string{
		`[{$out: "x"}]`,
		`[{$match: {}}, {$merge: {into: "x"}}]`,
		`[{$lookup: {from: "x", pipeline: [{$out: "y"}], as: "z"}}]`,
		`[{$facet: {a: [{$merge: "y"}]}}]`,
		`[{$changeStream: {}}]`,
	} {
		r := &fakeReader{}
		j := readerJob(t, `module.exports = function(doc) { pipe(`+stages+`); return doc; }`, r)
		_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
		wantErr(t, err, errs.TransformFailed, "TypeError: pipe: ")
		if len(r.calls) != 0 {
			t.Errorf("%s: sent to MongoDB", stages)
		}
	}
}

// Each read has what remains of the call's time limit; a read that runs
// out of it fails the call as running out of time does (tried again on
// fresh runtimes), even when the script catches what it threw.
func TestReadTimeLimit(t *testing.T) {
	r := &fakeReader{block: true}
	j := readerJob(t, `module.exports = function(doc) {
	try { doc.a = findOne({x: 1}); } catch (e) { doc.a = "caught"; }
	return doc;
}`, r, transform.Options{Database: "test", Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "did not finish within 100ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) != 3 {
		t.Errorf("%d reads, want 3 (the call and its two tries on fresh runtimes)", len(r.calls))
	}
	for _, c := range r.calls {
		if c.deadline <= 0 || c.deadline > 100*time.Millisecond {
			t.Errorf("a read's context had %s left, want at most the call's 100ms", c.deadline)
		}
	}
}

// The server refusing the query is the script's mistake: the document
// fails (or the script catches it). The server failing is not: the call
// fails with FAILED, so the job tries the batch again, even when the
// script catches it.
func TestReadErrors(t *testing.T) {
	src := `module.exports = function(doc) {
	try { doc.a = findOne({x: 1}); } catch (e) { doc.a = String(e); }
	return doc;
}`
	r := &fakeReader{err: fmt.Errorf("%w: (BadValue) unknown operator: $nope", transform.ErrQuery)}
	res := mustApply(t, readerJob(t, src, r), bson.D{{Key: "_id", Value: 1}})
	if a, _ := res.Doc["a"].(string); !strings.Contains(a, "findOne on test.job: the server refused the query: (BadValue) unknown operator: $nope") {
		t.Errorf("caught %q", a)
	}

	r = &fakeReader{err: errors.New("connection reset by peer")}
	_, err := apply(t, readerJob(t, src, r), bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.Failed, "findOne on test.job (for a monstache script): reading MongoDB failed; the batch is tried again: connection reset by peer")
	if !errorsAs(err, new(*errs.Error)) || errs.JobOf(err) != "job" {
		t.Errorf("error %v does not name the job", err)
	}
}

// Mistakes in the arguments are TypeErrors naming the function.
func TestReadArguments(t *testing.T) {
	for _, c := range []struct{ call, msg string }{
		{`findOne()`, "TypeError: findOne needs a query"},
		{`findOne("x")`, "TypeError: findOne: the query must be an object, not a string"},
		{`find([])`, "TypeError: find: the query must be an object, not an array"},
		{`pipe({})`, "TypeError: pipe: the stages must be an array, not an object"},
		{`pipe([1])`, "TypeError: pipe: stage 0 must be an object, not a number"},
		{`findOne({}, "users")`, "TypeError: findOne: the options must be an object, not a string"},
		{`findOne({}, {colection: "users"})`, `TypeError: findOne: unknown option "colection"`},
		{`findOne({}, {collection: 3})`, "TypeError: findOne: option collection must be a collection name, not a number"},
		{`findOne({}, {database: "a.b"})`, "TypeError: findOne: option database must be a database name"},
		{`find({}, {limit: "2"})`, "TypeError: find: option limit must be an integer, not a string"},
		{`find({}, {sort: [1]})`, "TypeError: find: option sort: element 0 must be a field name, not a number"},
		{`find({}, {select: 1})`, "TypeError: find: option select must be an object"},
		{`findOne({f: function () {}})`, "TypeError: findOne: f: a function is not a value a query can hold"},
		{`findOne({m: new Map()})`, "TypeError: findOne: m: a Map is not a value a query can hold"},
		{`var o = {}; o.o = o; findOne(o)`, "TypeError: findOne: o.o: a cyclic object"},
		{`findOne({n: 1n << 70n})`, "TypeError: findOne: n: a BigInt beyond int64"},
	} {
		t.Run(c.call, func(t *testing.T) {
			r := &fakeReader{}
			j := readerJob(t, `module.exports = function(doc) { `+c.call+`; return doc; }`, r)
			_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
			wantErr(t, err, errs.TransformFailed, c.msg)
			if len(r.calls) != 0 {
				t.Error("sent to MongoDB")
			}
		})
	}
}

// Query values: a RegExp is a BSON regular expression, a Date a date,
// undefined null (a query on a missing field must not match everything),
// 24-hex strings ObjectIds wherever they are (monstache's restoreIds), an
// ObjectId made in the script an ObjectId.
func TestReadQueryValues(t *testing.T) {
	r := &fakeReader{}
	j := readerJob(t, `module.exports = function(doc) {
	findOne({name: /^ad/im, at: new Date(0), missing: doc.nope, ids: {$in: [doc.author, "65f1a2b3c4d5e6f7a8b9c0d1"]},
		explicit: ObjectId("65f1a2b3c4d5e6f7a8b9c0d2"), n: 2.5, big: 2 ** 40, word: "plain"});
	return doc;
}`, r)
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "author", Value: authorID}})
	want := fmt.Sprintf(`{"name":{"$regularExpression":{"pattern":"^ad","options":"im"}},"at":{"$date":{"$numberLong":"0"}},"missing":null,`+
		`"ids":{"$in":[{"$oid":"%s"},{"$oid":"65f1a2b3c4d5e6f7a8b9c0d1"}]},"explicit":{"$oid":"65f1a2b3c4d5e6f7a8b9c0d2"},`+
		`"n":{"$numberDouble":"2.5"},"big":{"$numberDouble":"1.099511627776E+12"},"word":"plain"}`, authorID.Hex())
	if got := ext(t, r.only(t).filter); got != want {
		t.Errorf("filter\n%s\nwant\n%s", got, want)
	}
}

// The calls are counted for the metrics, with the time waited and the
// documents returned.
func TestReadStats(t *testing.T) {
	var mu sync.Mutex
	var stats []transform.ReadStat
	r := &fakeReader{docs: []bson.Raw{marshal(t, bson.D{{Key: "_id", Value: 1}})}}
	j := readerJob(t, `module.exports = function(doc) { findId(1); find({}); pipe([]); return doc; }`, r, transform.Options{
		Database: "test",
		OnRead: func(s transform.ReadStat) {
			mu.Lock()
			stats = append(stats, s)
			mu.Unlock()
		},
	})
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for _, s := range stats {
		got = append(got, fmt.Sprintf("%s/%s/%d/%v", s.Job, s.Func, s.Docs, s.Err))
		if s.Took < 0 {
			t.Errorf("took %s", s.Took)
		}
	}
	if want := "job/findId/1/<nil> job/find/1/<nil> job/pipe/1/<nil>"; strings.Join(got, " ") != want {
		t.Errorf("stats %v, want %s", got, want)
	}
}

// Where there is no MongoDB (meilistream check) the globals say so; an
// object transform does not have them; they do not exist while the module
// loads (as in monstache, which sets them after running the script).
func TestReadWhereNotAvailable(t *testing.T) {
	j := loadJob(t, `module.exports = function(doc) { return findId(doc._id); }`, transform.Options{Database: "test"})
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "findId: the transform reads MongoDB, and there is no MongoDB to read here")
	if !errors.Is(err, transform.ErrNoMongoDB) {
		t.Errorf("%v: want ErrNoMongoDB under it", err)
	}

	// Every read global says the same, with a database given or not (no
	// question of which database arises without a MongoDB), and a script
	// that catches the throw still fails: its result would be made up.
	for _, c := range []struct{ call, opts string }{
		{"findId(doc._id)", ""},
		{"findOne({a: 1})", ""},
		{"find({a: 1})", ""},
		{"pipe([{$match: {}}])", ""},
		{"pipe([{$match: {}}], {database: 'x'})", "x"},
		{"(function () { try { return find({}); } catch (e) { return []; } })()", ""},
	} {
		j := loadJob(t, `module.exports = function(doc) { return {r: `+c.call+`}; }`, transform.Options{})
		_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
		fn := c.call[:strings.IndexAny(c.call, "(")]
		if fn == "" {
			fn = "find"
		}
		wantErr(t, err, errs.TransformFailed, fn+": the transform reads MongoDB, and there is no MongoDB to read here")
		if !errors.Is(err, transform.ErrNoMongoDB) {
			t.Errorf("%s: %v: want ErrNoMongoDB under it", c.call, err)
		}
	}

	j = readerJob(t, `module.exports = {transform(doc) { return findId(doc._id); }};`, &fakeReader{})
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "ReferenceError: findId is not defined")

	set, err := transform.Load(writeFiles(t, map[string]string{"job.js": `var x = findOne({}); module.exports = function(doc) { return doc; };`}), transform.Options{Reader: &fakeReader{}})
	defer set.Close()
	wantErr(t, err, errs.TransformFailed, "ReferenceError")

	j = readerJob(t, `module.exports = function(doc) { return findOne({}); }`, &fakeReader{}, transform.Options{})
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "findOne: no database: give options.database")
}

// _meta_monstache in a result is refused, naming the feature and what to
// do, for both shapes of transform; an object without it is unaffected.
func TestMetaMonstacheRefused(t *testing.T) {
	for _, src := range []string{
		`module.exports = function(doc) { doc._meta_monstache = { routing: doc.post_id }; return doc; }`,
		`module.exports = {transform(doc) { return {title: doc.title, _meta_monstache: {index: "other"}}; }};`,
	} {
		j := loadJob(t, src)
		_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "post_id", Value: "123"}, {Key: "title", Value: "t"}})
		wantErr(t, err, errs.NotADocument, "_meta_monstache, monstache's per-document indexing metadata", "routing", "delete the field from the result", "docs/monstache.md")
	}
	j := loadJob(t, `module.exports = function(doc) { delete doc._meta_monstache; return doc; }`)
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "_meta_monstache", Value: bson.D{{Key: "index", Value: "x"}}}})
}

// A sparse array's length costs a script nothing to set; a query holding
// one is refused before it is walked.
func TestReadQueryArrayBound(t *testing.T) {
	r := &fakeReader{}
	j := readerJob(t, `module.exports = function(doc) { var a = []; a.length = 4e9; findOne({x: {$in: a}}); return doc; }`, r)
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "TypeError: findOne: x.$in: an array of 4000000000 elements")
}
