package transform_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/transform"
)

// A Decimal128 is a JSON number only when the number is its value;
// otherwise its exact text, never a number that lost it (1E-6000 was 0).
func TestADecimalNeverLosesItsValue(t *testing.T) {
	d := func(s string) bson.Decimal128 { return dec(t, s) }
	doc := bson.D{{Key: "_id", Value: 1},
		{Key: "tiny", Value: d("1E-6000")}, {Key: "huge", Value: d("-1E+6000")}, {Key: "long", Value: d("1234.5678901234567890123")},
		{Key: "nan", Value: d("NaN")}, {Key: "inf", Value: d("Infinity")}, {Key: "tenth", Value: d("0.1")},
		{Key: "price", Value: d("2.50")}, {Key: "int", Value: d("42")}, {Key: "zero", Value: d("-0.00")},
	}
	want := map[string]any{"tiny": "1E-6000", "huge": "-1E+6000", "long": "1234.5678901234567890123", "nan": "NaN",
		"inf": "Infinity", "tenth": 0.1, "price": 2.5, "int": int64(42), "zero": int64(0)}
	for _, src := range []string{`module.exports = {};`, `module.exports = { transform(doc) { return {...doc}; } };`,
		`module.exports = { transform(doc) { const o = {}; for (const k of Object.keys(doc)) o[k] = doc[k]; return o; } };`} {
		got := mustApply(t, loadJob(t, src), doc).Doc
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s = %#v, want %#v", src, k, got[k], w)
			}
		}
	}
	// Made in JavaScript, the same rule.
	got := mustApply(t, loadJob(t, `module.exports = { transform() { return { a: Decimal128("1E-6000"), b: Decimal128("0.25") }; } };`), bson.D{{Key: "_id", Value: 1}}).Doc
	if got["a"] != "1E-6000" || got["b"] != 0.25 {
		t.Fatalf("got %v", got)
	}
}

// The classes' values live in Go: getOwnPropertySymbols (or anything
// else) finds nothing to read or to rewrite, so a mirror writes the
// document's own bytes.
func TestABSONValueHidesItsBytes(t *testing.T) {
	minKey := bsoncore.NewDocumentBuilder().AppendInt32("_id", 1).AppendMinKey("m").
		AppendBinary("b", 0, []byte("secret")).AppendObjectID("o", bson.NewObjectID()).
		AppendDecimal128("d", 0, 1).Build()
	j := loadJob(t, `module.exports = { mirror: "m", transform(doc) {
		const found = [];
		for (const k of ["m", "b", "o", "d"]) {
			const v = doc[k];
			for (const s of Object.getOwnPropertySymbols(v)) { found.push(k); try { v[s] = {t: 3, d: "AAAA"}; } catch (e) {} }
			for (const s of Reflect.ownKeys(v)) found.push(k + ":" + String(s));
			for (const s in v) found.push(k + " in");
			try { v.t = 3; } catch (e) {}
			const p = new Proxy(v, { get(t, key) { if (typeof key === "symbol") found.push("leak"); return Reflect.get(t, key); } });
			try { Object.getPrototypeOf(v).toString.call(p); } catch (e) { found.push(k + ":" + e.name); }
		}
		return { ...doc, found };
	} };`)
	res, err := j.Apply(context.Background(), bson.Raw(minKey), transform.OpInsert, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := bson.Raw(res.Raw)
	for _, k := range []string{"m", "b", "o", "d"} {
		if !got.Lookup(k).Equal(bson.Raw(minKey).Lookup(k)) {
			t.Errorf("%s changed: %v", k, got.Lookup(k))
		}
	}
	found, _ := got.Lookup("found").Array().Values()
	for _, f := range found {
		if s := f.StringValue(); !strings.HasSuffix(s, ":TypeError") {
			t.Errorf("the transform found %q", s)
		}
	}
}

// A job without a transform on documents with their own "id" field: the
// error says that the document's field collides with the primary key, and
// what to do; it never blames a transform and never quotes the value.
func TestAnIdentityJobSaysTheDocumentsOwnIDCollides(t *testing.T) {
	doc := bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "id", Value: "alice-smith"}}
	for _, src := range []string{`module.exports = {};`, `module.exports = { transform(doc) { return doc; } };`, `module.exports = { transform(doc) { return true; } };`} {
		_, err := apply(t, loadJob(t, src), doc)
		wantErr(t, err, errs.IDMismatch, `the document has its own field "id"`, "primaryKey", "transform")
		if strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "the transform set") {
			t.Errorf("%s: %v", src, err)
		}
	}
	_, err := apply(t, loadJob(t, `module.exports = { transform(doc) { return { id: "bob-jones" }; } };`), doc)
	wantErr(t, err, errs.IDMismatch, `the transform set the primary key "id" to a string`)
	if strings.Contains(err.Error(), "bob") {
		t.Errorf("the value is in %v", err)
	}
	// The same id as _id's is fine, as before.
	if _, err := apply(t, loadJob(t, `module.exports = {};`), bson.D{{Key: "_id", Value: 5}, {Key: "id", Value: 5}}); err != nil {
		t.Fatal(err)
	}
}

// Text cut for an error or a log line is cut between characters, never
// inside one, and stays short.
func TestCutTextStaysValidUTF8(t *testing.T) {
	long := strings.Repeat("é", 3000)
	_, err := apply(t, loadJob(t, `module.exports = { transform(doc) { return { [doc.k]: NaN }; } };`), bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	wantErr(t, err, errs.NotADocument, "NaN")
	if !utf8.ValidString(err.Error()) || len(err.Error()) > 600 {
		t.Fatalf("%d bytes, valid %v", len(err.Error()), utf8.ValidString(err.Error()))
	}
	_, err = apply(t, loadJob(t, `module.exports = { transform(doc) { throw new Error("x" + doc.k); } };`), bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	wantErr(t, err, errs.TransformFailed)
	if !utf8.ValidString(err.Error()) || len(err.Error()) > 1300 {
		t.Fatalf("%d bytes, valid %v", len(err.Error()), utf8.ValidString(err.Error()))
	}
	var logs testutil.SyncBuffer
	j := loadJob(t, `module.exports = { transform(doc) { console.log("x" + doc.k); console.log({k: doc.k}); return {}; } };`,
		transform.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true})})
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		msg, _ := m["@message"].(string)
		if strings.ContainsRune(msg, utf8.RuneError) || len(msg) > 4200 || !strings.HasSuffix(msg, "…") {
			t.Fatalf("line of %d bytes: %q", len(msg), msg[len(msg)-10:])
		}
	}
}
