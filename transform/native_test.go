package transform_test

import (
	"context"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// TestMain runs the package's tests with a quarter of Go's default
// maximum goroutine stack: the bounds on what built-in functions may
// recurse must hold with room to spare, and a test that breaks them
// crashes sooner.
func TestMain(m *testing.M) {
	debug.SetMaxStack(256 << 20)
	os.Exit(m.Run())
}

// A document whose payload is millions of '[' for JSON.parse: the
// process must not die (goja's parser recursed once per '['), the
// transform gets a RangeError it can catch, and the job goes on.
func TestJSONParseOfADeepDocumentIsARangeError(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) {
		let caught = "";
		try { JSON.parse(doc.payload); } catch (e) { caught = e.name; }
		return { caught };
	} };`)
	doc := marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "payload", Value: strings.Repeat("[", 5_000_000)}})
	res, out, err := j.ApplyTo(context.Background(), nil, doc, transform.OpInsert, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.JSON) != `{"caught":"RangeError","id":1}` || string(out) != string(res.JSON) {
		t.Fatalf("got %s", res.JSON)
	}
	// Shallow JSON still parses, reviver and all.
	got := mustApply(t, loadJob(t, `module.exports = { transform(doc) {
		return JSON.parse('{"a": [1, {"b": 2}], "c": "x"}', function (k, v) { return typeof v === "number" ? v * 10 : v; });
	} };`), bson.D{{Key: "_id", Value: 1}})
	if m, _ := got.Doc["a"].([]any); len(m) != 2 || m[0] != int64(10) || got.Doc["c"] != "x" {
		t.Fatalf("got %v", got.Doc)
	}
}

// Every built-in that recursed in Go as deep as its input nests is
// bounded: each case builds a structure far deeper than the bound and
// must get an error it can catch (or a per-document error), never a
// crash of the process.
func TestNativeRecursionIsBounded(t *testing.T) {
	const deepArray = `let a = []; for (let i = 0; i < 200000; i++) a = [a];`
	const deepObject = `let a = {}; for (let i = 0; i < 200000; i++) a = {a};`
	cases := map[string]string{
		"String of a nested array":     deepArray + `String(a)`,
		"a template literal":           deepArray + "`${a}`",
		"concatenation":                deepArray + `"" + a`,
		"join":                         deepArray + `a.join("-")`,
		"toLocaleString":               deepArray + `a.toLocaleString()`,
		"JSON.stringify of an array":   deepArray + `JSON.stringify(a)`,
		"JSON.stringify of an object":  deepObject + `JSON.stringify(a)`,
		"JSON.stringify, indented":     deepObject + `JSON.stringify(a, null, 2)`,
		"JSON.stringify with toJSON":   `let n = 0; const o = {toJSON() { return n++ < 200000 ? [o] : 1; }}; JSON.stringify(o)`,
		"flat(Infinity)":               deepArray + `a.flat(Infinity)`,
		"JSON.parse with a reviver":    `JSON.parse('{"a":1,"b":2}', function (k, v) { if (k === "a") { let d = []; for (let i = 0; i < 200000; i++) d = [d]; this.b = d; } return v; })`,
		"a chain of proxies":           `let p = {}; for (let i = 0; i < 200000; i++) p = new Proxy(p, {}); p.x`,
		"a chain of handlers":          `let p = {}; for (let i = 0; i < 200000; i++) p = new Proxy({}, p); p.x`,
		"a chain of bound functions":   `let f = function () { return 1; }; for (let i = 0; i < 5000; i++) f = f.bind(null); f()`,
		"proxies and bindings in turn": `let f = function () { return 1; }; for (let i = 0; i < 5000; i++) f = i % 2 ? f.bind(null) : new Proxy(f, {}); f()`,
		"a prototype chain":            `let p = {}; for (let i = 0; i < 200000; i++) p = Object.create(p); p.x`,
		"setPrototypeOf":               `let p = {}; for (let i = 0; i < 200000; i++) { const o = {}; Object.setPrototypeOf(o, p); p = o; } p.x`,
		"__proto__":                    `let p = {}; for (let i = 0; i < 200000; i++) { const o = {}; o.__proto__ = p; p = o; } p.x`,
		"eval of nested parentheses":   `eval("(".repeat(1000000) + "1" + ")".repeat(1000000))`,
		"Function of nested brackets":  `Function("return " + "[".repeat(1000000) + "]".repeat(1000000))`,
		"new Function":                 `new Function("return " + "[".repeat(1000000) + "]".repeat(1000000))`,
		"a function's constructor":     `(function () {}).constructor("return " + "[".repeat(1000000))`,
		"a generator's constructor":    `(function* () {}).constructor("[".repeat(1000000))`,
		"a sort comparator that sorts": `const s = (a, b) => { [3, 2, 1].sort(s); return a - b; }; [2, 1].sort(s)`,
		"getters that call themselves": `const o = { get x() { return this.x; } }; o.x`,
		"toString that calls itself":   `const o = { toString() { return String(this); } }; String(o)`,
		"toJSON that stringifies":      `const o = { toJSON() { return JSON.stringify(this); } }; JSON.stringify(o)`,
		"join reentered by toString":   `const o = { toString() { return [this].join(); } }; [o].join()`,
	}
	src := `module.exports = { transform(doc) {
		try { (function () { ` + "%s" + ` })(); } catch (e) { return { caught: e.name }; }
		return { caught: "" };
	} };`
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			// The memory bound, as users have it: these allocate.
			j := loadJob(t, strings.Replace(src, "%s", code, 1), transform.Options{Timeout: 20 * time.Second, MemoryLimit: transform.DefaultMemoryLimit})
			res, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
			if err != nil {
				wantErr(t, err, errs.TransformFailed)
				return
			}
			if c := res.Doc["caught"]; c != "RangeError" && c != "TypeError" {
				t.Fatalf("caught %v, want a RangeError", c)
			}
		})
	}
}

// What stays is ordinary use: shallow values go through the guarded
// built-ins as through goja's own; each expression gives the same string
// in a plain goja runtime and in a transform.
func TestGuardedBuiltinsKeepTheirMeaning(t *testing.T) {
	exprs := []string{
		`[1, [2, [3, [4]]], null, undefined, "x"].join()`,
		`String([1, [2, [3]], null])`, "`${[1, [2]]}`", `"" + [[1], [2, 3]]`,
		`(() => { const c = []; c.push(1, c, [c]); return String(c); })()`,
		`[1, 2].join(undefined)`, `[1, 2].join({toString() { return "+"; }})`, `Array.prototype.join.call("abc", "-")`,
		`Array.prototype.join.call({length: 3, 0: "a", 2: "c"})`, `[1, "a", new Date(0)].toLocaleString().length > 3`,
		`[{toString() { return "o"; }}, Symbol.iterator.description].join("|")`,
		`JSON.stringify({b: 1, a: [true, null, "q\"\u2028\n\u0001"], d: new Date(0), u: undefined, f() {}, s: Symbol("s"), n: NaN, i: -Infinity, z: -0})`,
		`JSON.stringify({a: [1, {}], b: {}, c: []}, null, "--")`, `JSON.stringify([1, [2, {x: 3}]], null, 20)`,
		`JSON.stringify({a: 1}, null, new Number(3))`, `JSON.stringify({a: 1}, null, new String("ab"))`,
		`JSON.stringify({b: 1, a: 2, c: 3, 1: 4}, ["c", "a", "a", 1, new String("b"), {}])`,
		`JSON.stringify({a: 1, b: "x", c: {d: 2}}, function (k, v) { return typeof v === "number" ? v + 1 : v; })`,
		`JSON.stringify({a: 1, b: 2}, (k, v) => k === "a" ? undefined : v)`,
		`JSON.stringify([new Number(1), new String("s"), new Boolean(false), undefined, () => 1, Symbol()])`,
		`JSON.stringify("\ud800x\udc00\ud83d\ude00\u00e9")`, `String(JSON.stringify(undefined))`, `String(JSON.stringify(() => 1))`,
		`JSON.stringify({toJSON(k) { return "key:" + k; }})`, `JSON.stringify({a: {toJSON(k) { return k + "!"; }}})`,
		`(() => { try { const c = {}; c.c = c; JSON.stringify(c); } catch (e) { return e.name; } })()`,
		`(() => { try { JSON.stringify({b: 1n}); } catch (e) { return e.name; } })()`,
		`JSON.stringify(new Proxy({a: 1, b: [2]}, {}))`, `JSON.stringify(new Proxy([1, 2], {}))`,
		`JSON.stringify(Object.create({inherited: 1}, {own: {value: 2, enumerable: true}}))`,
		`JSON.stringify(JSON.rawJSON("1e1000"))`, `JSON.stringify({m: new Map([[1, 2]]), s: new Set([1])})`,
		`JSON.stringify(JSON.parse('{"a": [1, {"b": 2}], "c": "x"}', function (k, v) { return typeof v === "number" ? v * 10 : v; }))`,
		`JSON.stringify(JSON.parse('[1, 2, 3]', function (k, v) { return v === 2 ? undefined : v; }))`,
		`JSON.stringify(JSON.parse(' {"a" : "\\u00e9\\"[{"} '))`,
		`(() => { try { JSON.parse("{"); } catch (e) { return e.name; } })()`,
		`JSON.stringify([1, [2, [3, [4]]], null, undefined, "x"].flat(Infinity))`,
		`JSON.stringify([1, [2, [3, [4]]], , "x"].flat())`, `JSON.stringify([1, [2, [3]]].flat(0))`,
		`JSON.stringify([1, 2].flatMap(x => [x, [x]]))`, `JSON.stringify([[1], [2]].flatMap(function (x) { return x.concat(this.y); }, {y: 9}))`,
		`(() => { class Sub extends Array {} const s = Sub.from([1, [2]]).flat(); return s instanceof Sub && s.length; })()`,
		`JSON.stringify(Array.prototype.flat.call({length: 2, 0: [1], 1: 2}))`,
		`new Proxy({x: 1}, {}).x`, `Proxy.revocable({y: 2}, {}).proxy.y`, `(function (y) { return this.x + y; }).bind({x: 1}, 2)()`,
		`(function f(a, b) {}).bind(null, 1).length`, `(function f() {}).bind(null).name`,
		`Object.create({x: 5}).x`, `Object.create(null, {x: {value: 1}}).x`, `Object.getPrototypeOf(Object.setPrototypeOf({}, Array.prototype)) === Array.prototype`,
		`(() => { const o = {}; o.__proto__ = {z: 3}; return o.z; })()`, `Reflect.setPrototypeOf({}, null)`,
		`new Function("a", "b", "return a + b")(1, 2)`, `Function("return 7")()`, `eval("1 + 1")`,
		`Function.prototype.constructor === Function && (() => {}) instanceof Function && typeof Function`,
		`(function* () {}).constructor("yield 1")().next().value`, `typeof (async function () {}).constructor("return 1")`,
		`Math.max.apply(null, [1, 5, 2])`, `Reflect.apply(Math.min, null, [3, 1])`, `Reflect.construct(Date, [0]).getTime()`,
		`"ab".repeat(2)`, `"1".padStart(3, "0") + "1".padEnd(3, "*")`, `[3, 1, 2].sort().concat([4], 5, [[6]]).join()`,
		`Array.from({length: 3}, (x, i) => i * 2).join()`, `Array.from(new Set([1, 2])).join()`, `Array.from("ab").join()`,
		`[1, 2, 3].indexOf(2) + [1, 2, 3].includes(3) + [1, 2].map(x => x * 2).join() + [1, 2, 3].filter(x => x > 1).length`,
		`new Uint8Array([1, 2]).join("|") + String(new Float64Array([1.5]))`, `new ArrayBuffer(8).byteLength`,
		`new Uint8Array(2) instanceof Uint8Array && Uint8Array.from([1, 2]).length && new Uint8Array(new ArrayBuffer(4), 1, 2).length`,
		`(() => { class U extends Uint8Array {} return new U(3).length; })()`, `Uint8Array.BYTES_PER_ELEMENT + new Int32Array(2).byteLength`,
		`typeof Proxy.prototype + typeof Proxy.revocable + Proxy.length`,
		`[JSON.stringify.name, JSON.stringify.length, [].join.name, [].join.length, JSON.parse.length, [].flat.name, Proxy.name, Function.name].join()`,
	}
	var b strings.Builder
	b.WriteString("module.exports = { transform(doc) { const out = []; ")
	for _, e := range exprs {
		b.WriteString("try { out.push(String(" + e + ")); } catch (e) { out.push(\"threw \" + e); }\n")
	}
	b.WriteString("return { out }; } };")
	got := mustApply(t, loadJob(t, b.String()), bson.D{{Key: "_id", Value: 1}}).Doc["out"].([]any)
	rt := goja.New()
	for i, e := range exprs {
		want, err := rt.RunString("(function () { try { return String(" + e + "); } catch (e) { return \"threw \" + e; } })()")
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if got[i] != want.String() {
			t.Errorf("%s\n got %q\nwant %q", e, got[i], want.String())
		}
	}
}

// A JavaScript-with-scope value whose scope nests 2,000,000 documents: the
// driver writes a scope out recursively, so it is not written.
func TestADeepScopeIsNotWrittenOut(t *testing.T) {
	doc := bsoncore.NewDocumentBuilder().AppendInt32("_id", 1).
		AppendCodeWithScope("c", "f()", nestedDoc(2_000_000)).Build()
	for _, src := range []string{`module.exports = {};`, `module.exports = { transform(doc) { return { c: doc.c }; } };`} {
		res, err := loadJob(t, src).Apply(context.Background(), bson.Raw(doc), transform.OpInsert, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Doc["c"] != "codeWithScope" && res.Doc["c"] != "code with scope" {
			t.Fatalf("c = %v", res.Doc["c"])
		}
	}
}

// nestedDoc is {a: {a: ... {x: 1}}}, n levels of "a", built in one pass.
func nestedDoc(n int) []byte {
	inner := bsoncore.NewDocumentBuilder().AppendInt32("x", 1).Build()
	total := len(inner) + 8*n
	b := make([]byte, 0, total)
	for k := 0; k < n; k++ {
		l := total - 8*k
		b = append(b, byte(l), byte(l>>8), byte(l>>16), byte(l>>24), byte(bsoncore.TypeEmbeddedDocument), 'a', 0)
	}
	b = append(b, inner...)
	for k := 0; k < n; k++ {
		b = append(b, 0)
	}
	return b
}

// goja's parser recurses per level of nesting: a file that nests a
// million brackets is refused by its size before it is parsed.
func TestAHugeFileIsRefusedBeforeParsing(t *testing.T) {
	src := "module.exports = " + strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + ";"
	_, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), transform.Options{})
	wantErr(t, err, errs.TransformFailed, "job.js is more than 131072 bytes")
}
