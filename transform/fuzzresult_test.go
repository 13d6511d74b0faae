package transform_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// resultMachine is a transform that builds what it returns from the
// document's program p, a list of bytes read as a small stack machine:
// every kind of value a transform can return (numbers, NaN, strings with
// lone surrogates, BigInts, dates, the BSON classes, symbols, functions,
// arrays, objects, cycles, proxies, throwing getters and traps, Map,
// RegExp, typed arrays, boxed values, deep nesting, long strings, the
// document itself, true), so that fuzzing p explores the results one
// loaded job can give.
const resultMachine = `module.exports = { MIRROR transform(doc) {
	const p = doc.p || [];
	let i = 0;
	const next = () => i < p.length ? p[i++] : 0;
	const stack = [];
	const pop = () => stack.length ? stack.pop() : undefined;
	const obj = (x) => x !== null && typeof x === "object";
	while (i < p.length && stack.length < 64) {
		switch (next() % 42) {
		case 0: stack.push(next()); break;
		case 1: stack.push(-next() / 7); break;
		case 2: stack.push(NaN); break;
		case 3: stack.push(-Infinity); break;
		case 4: stack.push(String.fromCharCode(next() * 257, next())); break;
		case 5: stack.push(null); break;
		case 6: stack.push(undefined); break;
		case 7: stack.push(!!(next() & 1)); break;
		case 8: stack.push(BigInt(next()) ** BigInt(next() % 40)); break;
		case 9: stack.push(new Date(next() * 4e13 - 5e15)); break;
		case 10: stack.push(doc._id); break;
		case 11: stack.push(Decimal128(["1E-6000", "0.1", "NaN", "x", "-0", "1E+6144"][next() % 6])); break;
		case 12: stack.push(Symbol("s")); break;
		case 13: stack.push(() => 1); break;
		case 14: { const n = next() % 5; const a = []; for (let k = 0; k < n; k++) a.unshift(pop()); stack.push(a); break; }
		case 15: { const n = next() % 5; const o = {}; for (let k = 0; k < n; k++) o[["a", "b", "id", "_id", "0", "", "x.y", "\u0000"][next() % 8]] = pop(); stack.push(o); break; }
		case 16: { const a = pop(); if (obj(a)) { try { a.self = a; } catch (e) {} } stack.push(a); break; }
		case 17: { const t = pop(); stack.push(new Proxy(obj(t) ? t : {}, {})); break; }
		case 18: stack.push({ get boom() { throw new Error("getter"); } }); break;
		case 19: stack.push(new Map([[1, 2]])); break;
		case 20: stack.push(/re/g); break;
		case 21: stack.push(new Uint8Array(2)); break;
		case 22: stack.push(new Number(next())); break;
		case 23: stack.push(new String("s")); break;
		case 24: stack.push(Object.create(null)); break;
		case 25: stack.push(Timestamp(next() * 1e7, next())); break;
		case 26: stack.push(BSONRegExp(["a", "a\u0000b"][next() % 2], "mi")); break;
		case 27: stack.push({ id: pop() }); break;
		case 28: stack.push({ _id: pop() }); break;
		case 29: stack.push(doc); break;
		case 30: { const o = pop(); if (obj(o)) { try { delete o[Object.keys(o)[0]]; } catch (e) {} } stack.push(o); break; }
		case 31: stack.push("x".repeat(next() * 5000)); break;
		case 32: { let a = []; const n = next(); for (let k = 0; k < n; k++) a = [a]; stack.push(a); break; }
		case 33: stack.push(new Proxy({}, { ownKeys() { throw new Error("keys"); } })); break;
		case 34: stack.push(new Proxy({}, { get() { return 1; }, ownKeys() { return ["a", "b"]; }, getOwnPropertyDescriptor() { return { value: 1, enumerable: true, configurable: true }; } })); break;
		case 35: stack.push(Object.freeze({ a: pop() })); break;
		case 36: stack.push(true); break;
		case 37: stack.push(new Error("e")); break;
		case 38: stack.push(Object.assign(Object.create({ inherited: 1 }), { own: pop() })); break;
		case 39: stack.push([, , 1]); break;
		case 40: { const o = pop(); if (obj(o)) { try { o[["a", "_id", "id"][next() % 3]] = pop(); } catch (e) {} } stack.push(o); break; }
		case 41: stack.push(doc[["a", "b", "_id", "p"][next() % 4]]); break;
		}
	}
	return pop();
} };`

// FuzzTransformResult: whatever a transform returns, a search job and a
// mirror job give a document (valid JSON with its primary key, valid BSON
// with _id first) or a per-document error (NOT_A_DOCUMENT, ID_MISMATCH,
// TRANSFORM_FAILED), never a panic and never an internal error.
func FuzzTransformResult(f *testing.F) {
	for _, seed := range [][]byte{
		{}, {0, 7}, {2}, {4, 0xd8, 0}, {8, 5, 30}, {9, 200}, {10}, {11, 0}, {11, 1}, {11, 5}, {12}, {13},
		{0, 1, 0, 2, 14, 2}, {0, 1, 0, 2, 15, 2}, {15, 0, 16}, {15, 0, 17}, {18}, {19}, {20}, {21}, {22, 3}, {23},
		{24}, {25, 1, 2}, {26, 1}, {0, 9, 27}, {0, 9, 28}, {29}, {29, 30}, {31, 250}, {32, 200}, {33}, {34},
		{0, 1, 35}, {36}, {37}, {0, 1, 38}, {39}, {15, 0, 0, 1, 40, 1}, {41, 2}, {10, 27}, {10, 28}, {29, 0, 1, 40, 2},
	} {
		f.Add(seed, byte(0))
		f.Add(seed, byte(1))
	}
	load := func(src string) *transform.Job {
		set, err := transform.Load(writeFiles(f, map[string]string{"job.js": src}), transform.Options{Pool: 1})
		if err != nil {
			f.Fatal(err)
		}
		return set.Job("job")
	}
	search := load(strings.Replace(resultMachine, "MIRROR", "", 1))
	mirror := load(strings.Replace(resultMachine, "MIRROR", `mirror: "m",`, 1))
	ids := []any{bson.NewObjectID(), int32(7), "doc-1", 2.5, bson.D{{Key: "k", Value: 1}}}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, program []byte, idKind byte) {
		if len(program) > 512 {
			return
		}
		p := make(bson.A, len(program))
		for i, b := range program {
			p[i] = int32(b)
		}
		doc := marshal(t, bson.D{{Key: "_id", Value: ids[int(idKind)%len(ids)]}, {Key: "a", Value: "x"}, {Key: "b", Value: bson.D{{Key: "c", Value: 1.5}}}, {Key: "p", Value: p}})
		check := func(err error) {
			if err == nil {
				return
			}
			var e *errs.Error
			if !errorsAs(err, &e) {
				t.Fatalf("%v (%T)", err, err)
			}
			switch e.Code {
			case errs.NotADocument, errs.IDMismatch, errs.TransformFailed:
			default:
				t.Fatalf("%v", err)
			}
			if strings.Contains(e.Msg, "internal error") {
				t.Fatalf("%v", err)
			}
		}
		res, _, err := search.ApplyTo(ctx, nil, doc, transform.OpInsert, nil)
		check(err)
		if err == nil && !res.Skip {
			var m map[string]any
			if json.Unmarshal(res.JSON, &m) != nil || m["id"] == nil {
				t.Fatalf("not a document with its id: %s", res.JSON)
			}
		}
		res, err = mirror.Apply(ctx, doc, transform.OpInsert, nil)
		check(err)
		if err == nil && !res.Skip {
			els, verr := bsoncore.Document(res.Raw).Elements()
			if verr != nil || bsoncore.Document(res.Raw).Validate() != nil || len(els) == 0 || els[0].Key() != "_id" {
				t.Fatalf("not a document with _id first: %v", res.Raw)
			}
		}
	})
}

// FuzzParseIndexID: any id Meilisearch could hand back either is refused
// (NOT_A_DOCUMENT) or stands for an _id whose IndexID is that very id.
func FuzzParseIndexID(f *testing.F) {
	for _, v := range idCorpus(f) {
		if id, err := jobdef.IndexID(v); err == nil {
			f.Add(externalID(id))
		}
	}
	for _, s := range []string{"", "_", "_s", "_u", "_b", "_bAA", "-0", "007", "9223372036854775808", "123456789012345678901234", "_sabc", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		back, err := jobdef.ParseIndexID(s)
		if err != nil {
			if errs.CodeOf(err) != errs.NotADocument {
				t.Fatal(err)
			}
			return
		}
		id, err := jobdef.IndexID(back)
		if err != nil {
			t.Fatalf("%q -> %v: %v", s, back, err)
		}
		if externalID(id) != s {
			t.Fatalf("%q -> %v -> %#v", s, back, id)
		}
	})
}
