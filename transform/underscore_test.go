package transform_test

import (
	"reflect"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// monstache's documented global script (rwynn/monstache-site, advanced.md,
// "Transformation") runs as it is, with the Underscore monstache bundles.
func TestUnderscoreOmitAsMonstacheDocuments(t *testing.T) {
	j := loadJob(t, `module.exports = function(doc, ns, updateDesc) {
	// the doc namespace e.g. test.test is passed as the 2nd arg
        // if available, an object containing the update description is passed as the 3rd arg
	return _.omit(doc, "password", "secret");
}`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: "ada"}, {Key: "name", Value: "Ada"}, {Key: "password", Value: "x"}, {Key: "secret", Value: "y"}})
	want := map[string]any{"id": "ada", "_id": "ada", "name": "Ada"}
	if !reflect.DeepEqual(res.Doc, want) {
		t.Fatalf("got %v, want %v", res.Doc, want)
	}
}

// The library is Underscore 1.4.4, as monstache's otto bundles it: its
// VERSION, and functions of later versions absent.
func TestUnderscoreIsTheVersionMonstacheBundles(t *testing.T) {
	j := loadJob(t, `module.exports = function(doc) {
	return {v: _.VERSION, now: typeof _.now, pick: _.pick({a: 1, b: 2}, "a"), chain: _.chain([3, 1, 2]).sortBy(_.identity).first(2).value()};
}`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	want := map[string]any{"id": int64(1), "v": "1.4.4", "now": "undefined", "pick": map[string]any{"a": int64(1)}, "chain": []any{int64(1), int64(2)}}
	if !reflect.DeepEqual(res.Doc, want) {
		t.Fatalf("got %v, want %v", res.Doc, want)
	}
}

// Object transforms have `_` too: it is a pure library, and costs a
// runtime nothing until it is read.
func TestUnderscoreInObjectTransforms(t *testing.T) {
	j := loadJob(t, `var pick = _.pick; // read while the module loads
module.exports = {transform(doc, ctx) { return _.extend(pick(doc, "title"), {words: _.size(doc.title.split(" "))}); }};`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "a b c"}, {Key: "body", Value: "x"}})
	want := map[string]any{"id": int64(1), "title": "a b c", "words": int64(3)}
	if !reflect.DeepEqual(res.Doc, want) {
		t.Fatalf("got %v, want %v", res.Doc, want)
	}
}

// The functions that need a timer say so when called, rather than fail
// later with "setTimeout is not defined" or seem to work.
func TestUnderscoreTimersThrow(t *testing.T) {
	for _, call := range []string{
		`_.delay(function () {}, 10)`,
		`_.defer(function () {})`,
		`_.throttle(function () {}, 10)()`,
		`_.debounce(function () {}, 10)()`,
	} {
		name := strings.TrimPrefix(call[:strings.IndexByte(call, '(')], "_.")
		t.Run(name, func(t *testing.T) {
			j := loadJob(t, `module.exports = function(doc) { `+call+`; return doc; }`)
			_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
			wantErr(t, err, errs.TransformFailed, "_."+name+" needs a timer (setTimeout), and a transform has none")
		})
	}
}

// Loading Underscore adds no global but `_`; a script may also replace
// `_` with its own.
func TestUnderscoreGlobals(t *testing.T) {
	j := loadJob(t, `module.exports = function(doc) {
	var before = Object.getOwnPropertyNames(Function("return this")()).sort().join(",");
	_.identity(1);
	var after = Object.getOwnPropertyNames(Function("return this")()).sort().join(",");
	return {same: before === after, has: before.split(",").indexOf("_") >= 0};
}`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	if res.Doc["same"] != true || res.Doc["has"] != true {
		t.Fatalf("globals changed by loading Underscore: %v", res.Doc)
	}
	// A function transform's globals beyond an object transform's are
	// monstache's read functions.
	j = loadJob(t, `module.exports = function(doc) {
	var base = ["_", "console", "ObjectId", "Decimal128", "Timestamp", "BSONRegExp"];
	return {extra: Object.getOwnPropertyNames(Function("return this")()).filter(function (k) { return base.indexOf(k) >= 0 || ["findId", "findOne", "find", "pipe"].indexOf(k) >= 0; }).sort().join(",")};
}`)
	res = mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	if res.Doc["extra"] != "BSONRegExp,Decimal128,ObjectId,Timestamp,_,console,find,findId,findOne,pipe" {
		t.Fatalf("globals: %v", res.Doc["extra"])
	}
	own := loadJob(t, `_ = {omit: function () { return {mine: true}; }};
module.exports = function(doc) { return _.omit(doc, "x"); }`)
	res = mustApply(t, own, bson.D{{Key: "_id", Value: 1}})
	if res.Doc["mine"] != true {
		t.Fatalf("a script's own _ was not kept: %v", res.Doc)
	}
}

// _.template compiles through Function, which the sandbox bounds like any
// other source.
func TestUnderscoreTemplate(t *testing.T) {
	j := loadJob(t, `var t = _.template("<%= name %> (<%- role %>)");
module.exports = function(doc) { return {label: t(doc)}; }`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "Ada"}, {Key: "role", Value: "<admin>"}})
	if res.Doc["label"] != "Ada (&lt;admin&gt;)" {
		t.Fatalf("label %q", res.Doc["label"])
	}
}

// A file that reaches `_` without naming it gets it when it first reads it.
func TestUnderscoreReachedWithoutItsName(t *testing.T) {
	j := loadJob(t, `module.exports = {transform(doc) { return {v: globalThis["\x5f"].VERSION}; }};`)
	res := mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	if res.Doc["v"] != "1.4.4" {
		t.Fatalf("v = %v", res.Doc["v"])
	}
}

// An error thrown inside the bundled Underscore points at the script's
// line that called it and names the function, not the library's line; a
// callback of the script throwing keeps its own line; a job named
// underscore is its own file still.
func TestUnderscoreErrorPointsAtTheScript(t *testing.T) {
	for _, c := range []struct{ file, src, want string }{
		{"job.js", "module.exports = function(doc) {\n  var x = 1;\n  return {r: _.reduce([], function (a, b) { return a + b; })};\n}",
			"transform: job.js: TypeError: No initial value (line 3:22, in Underscore's _.reduce)"},
		// The library calls itself (invoke through map and each): the
		// function named is the one the script called.
		{"job.js", "module.exports = function(doc) {\n  return {r: _.invoke([1], \"nope\")};\n}",
			"(line 2:22, in Underscore's _.invoke)"},
		{"job.js", "module.exports = function(doc) {\n  return {r: _.map([1], function (v) {\n    throw new Error(\"no \" + v);\n  })};\n}",
			"transform: job.js: Error: no 1 (line 3:11)"},
		{"underscore.js", "module.exports = function(doc) {\n\n  return {r: _.reduce([], function (a, b) { return a + b; })};\n}",
			"transform: underscore.js: TypeError: No initial value (line 3:22, in Underscore's _.reduce)"},
	} {
		set, err := transform.Load(writeFiles(t, map[string]string{c.file: c.src}), transform.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = apply(t, set.Jobs()[0], bson.D{{Key: "_id", Value: 1}})
		set.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.file, err, c.want)
		}
	}
}
