package transform_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

func TestAMonstacheScriptRunsUnchanged(t *testing.T) {
	// A script as monstache users write them (monstache's middleware
	// contract: `this` is the document; return an object to index it, true
	// for the document as it is, false/null/undefined to drop it).
	src := `module.exports = function(doc, ns, updateDesc) {
		if (doc.hidden) { return false; }
		if (doc.asIs) { return true; }
		if (doc.gone) { return null; }
		if (doc.nothing) { return; }
		this.ns = ns;
		this.same = this === doc;
		this.fields = updateDesc ? Object.keys(updateDesc.updatedFields).join() : "none";
		delete doc.secret;
		return doc;
	}`
	set, err := transform.Load(writeFiles(t, map[string]string{"orders.js": src}), transform.Options{Database: "shop", Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	j := set.Job("orders")
	if !j.Function || j.Collection != "orders" || j.Index != "orders" || j.PrimaryKey != "id" {
		t.Fatalf("job %+v", j)
	}
	ctx := context.Background()
	ud := marshal(t, bson.D{{Key: "updatedFields", Value: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 2}}}, {Key: "removedFields", Value: bson.A{}}})
	res, err := j.Apply(ctx, marshal(t, bson.D{{Key: "_id", Value: 9}, {Key: "secret", Value: "x"}}), transform.OpUpdate, ud)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"_id": int64(9), "id": int64(9), "ns": "shop.orders", "same": true, "fields": "a,b"}
	if fmt.Sprint(res.Doc) != fmt.Sprint(want) {
		t.Fatalf("got %v", res.Doc)
	}
	res = mustApply(t, j, bson.D{{Key: "_id", Value: 9}})
	if res.Doc["fields"] != "none" {
		t.Fatalf("without an updateDescription: %v", res.Doc)
	}
	for _, k := range []string{"hidden", "gone", "nothing"} {
		res := mustApply(t, j, bson.D{{Key: "_id", Value: "k"}, {Key: k, Value: true}})
		if !res.Skip || res.ID != "k" || res.Doc != nil {
			t.Errorf("%s: %+v", k, res)
		}
	}
	res = mustApply(t, j, bson.D{{Key: "_id", Value: "k"}, {Key: "asIs", Value: true}, {Key: "secret", Value: "x"}})
	if res.Skip || res.Doc["secret"] != "x" || res.Doc["id"] != "k" {
		t.Errorf("true: %+v", res)
	}

	// monstache hands ObjectIds to scripts as hex strings.
	j = loadJob(t, `module.exports = function (doc) { this.mark = true; return typeof doc._id === "string" && doc._id === doc.ref && doc._id.length === 24; };`)
	oid := bson.NewObjectID()
	res = mustApply(t, j, bson.D{{Key: "_id", Value: oid}, {Key: "ref", Value: oid}})
	if res.Skip || res.ID != oid.Hex() || res.Doc["mark"] != true || res.Doc["ref"] != oid.Hex() {
		t.Errorf("ObjectIds as strings, true as the changed document: %+v", res)
	}
}

func TestTheTransformSeesItsContext(t *testing.T) {
	j := loadJob(t, `module.exports = { collection: "things", transform(doc, ctx) {
		"use strict";
		let frozen = false;
		try { ctx.job = "other"; } catch (e) { frozen = true; }
		return { job: ctx.job, collection: ctx.collection, op: ctx.operation, frozen: frozen,
			ud: ctx.updateDescription ? ctx.updateDescription.removedFields.join() : null };
	} };`)
	for _, op := range []transform.Operation{transform.OpInsert, transform.OpUpdate, transform.OpReplace, transform.OpReindex} {
		res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}}), op, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := res.Doc
		if d["job"] != "job" || d["collection"] != "things" || d["op"] != string(op) || d["frozen"] != true || d["ud"] != nil {
			t.Errorf("%s: %v", op, d)
		}
	}
	ud := marshal(t, bson.D{{Key: "updatedFields", Value: bson.D{}}, {Key: "removedFields", Value: bson.A{"x", "y"}}})
	res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpUpdate, ud)
	if err != nil || res.Doc["ud"] != "x,y" || res.Doc["frozen"] != true || res.Doc["op"] != "update" || res.Doc["job"] != "job" {
		t.Fatalf("%v %v", res.Doc, err)
	}
}

// The ctx of an update with an updateDescription is a new object for each
// call (made as a host object, for speed), and reads, lists, spreads and
// serialises like the plain frozen ctx of the other calls.
func TestTheUpdateContextIsAnOrdinaryObject(t *testing.T) {
	j := loadJob(t, `let kept = null;
	module.exports = { collection: "things", transform(doc, ctx) {
		const first = kept === null;
		if (first) kept = ctx;
		let refused = false;
		try { (function () { "use strict"; ctx.extra = 1; })(); } catch (e) { refused = e instanceof TypeError; }
		return {
			keys: Object.keys(ctx).join(),
			spread: Object.keys({...ctx}).join(),
			json: JSON.stringify(ctx),
			has: "updateDescription" in ctx && "job" in ctx && !("extra" in ctx) && ctx.hasOwnProperty("operation"),
			refused: refused,
			keptUnchanged: first || (kept !== ctx && kept.updateDescription.removedFields.join() === "a"),
		};
	} };`)
	for i, removed := range []string{"a", "b"} {
		ud := marshal(t, bson.D{{Key: "updatedFields", Value: bson.D{{Key: "n", Value: int32(i)}}}, {Key: "removedFields", Value: bson.A{removed}}})
		res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpUpdate, ud)
		if err != nil {
			t.Fatal(err)
		}
		d := res.Doc
		wantJSON := fmt.Sprintf(`{"job":"job","collection":"things","operation":"update","updateDescription":{"updatedFields":{"n":%d},"removedFields":["%s"]}}`, i, removed)
		if d["keys"] != "job,collection,operation,updateDescription" || d["spread"] != d["keys"] || d["json"] != wantJSON ||
			d["has"] != true || d["refused"] != true || d["keptUnchanged"] != true {
			t.Errorf("call %d: %v", i, d)
		}
	}
}

func TestAThrowIsTransformFailedWithWhere(t *testing.T) {
	j := loadJob(t, "module.exports = {\n  transform(doc) {\n    if (doc.bad) throw new TypeError('bad document');\n    return doc.missing.field;\n  },\n};")
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "bad", Value: true}})
	wantErr(t, err, errs.TransformFailed, "TypeError: bad document", "line 3:")
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "TypeError", "line 4:")
	_, err = apply(t, loadJob(t, `module.exports = { transform() { throw "a string"; } };`), bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "a string")
}

func TestAnEndlessLoopIsStoppedAndTheNextCallWorks(t *testing.T) {
	// Module state shows that the runtime that timed out was replaced by a
	// freshly loaded one (doc.go, "Module state").
	j := loadJob(t, `let calls = 0;
	module.exports = { transform(doc) {
		calls++;
		if (doc.loop) { for (;;) {} }
		if (doc.recurse) { const f = (n) => f(n + 1) + 1; return {n: f(0)}; }
		return {calls: calls};
	} };`, transform.Options{Pool: 1, Timeout: time.Minute})
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	if got := mustApply(t, j, bson.D{{Key: "_id", Value: 1}}).Doc["calls"]; got != int64(2) {
		t.Fatalf("calls %v", got)
	}
	// Only the endless loop gets a short deadline (the job's own, read at
	// each call): the other calls have one no stall of a loaded machine
	// reaches, or the 2000-deep recursion below can time out before it
	// overflows (it did, once, under load: not a RangeError then).
	j.Timeout = 100 * time.Millisecond
	start := time.Now()
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "loop", Value: true}})
	wantErr(t, err, errs.TransformFailed, "did not finish within 100ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %s", d)
	}
	j.Timeout = 0
	if got := mustApply(t, j, bson.D{{Key: "_id", Value: 1}}).Doc["calls"]; got != int64(1) {
		t.Fatalf("after a timeout the runtime is fresh: calls %v", got)
	}
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "recurse", Value: true}})
	wantErr(t, err, errs.TransformFailed, "RangeError")
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
}

func TestAnEndlessLoopInAGetterIsStoppedToo(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return { get x() { for (;;) {} } }; } };`,
		transform.Options{Pool: 1, Timeout: 100 * time.Millisecond})
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "did not finish")
	j = loadJob(t, `module.exports = { mirror: "m", transform(doc) { return { get x() { for (;;) {} } }; } };`,
		transform.Options{Pool: 1, Timeout: 100 * time.Millisecond})
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "did not finish")
	j = loadJob(t, `module.exports = { transform(doc) { return { get x() { throw new Error("getter"); } }; } };`)
	_, err = apply(t, j, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "getter")
}

func TestACanceledContextStopsTheCall(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { for (;;) {} } };`, transform.Options{Pool: 1, Timeout: time.Minute})
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("shutting down")
	time.AfterFunc(50*time.Millisecond, func() { cancel(stop) })
	_, err := j.Apply(ctx, marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpInsert, nil)
	if !errors.Is(err, stop) {
		t.Fatalf("got %v", err)
	}
}

// The time limit is kept per call though the timer is not re-armed at
// each call: quick calls spread over several limits are never stopped, and
// a call that starts while the timer is set for an earlier call's deadline
// still gets its whole limit.
func TestTheTimeLimitIsEachCallsOwn(t *testing.T) {
	const limit = 300 * time.Millisecond
	j := loadJob(t, `module.exports = { transform(doc) { if (doc.loop) { for (;;) {} } return {}; } };`,
		transform.Options{Pool: 1, Timeout: limit})
	for end := time.Now().Add(3 * limit); time.Now().Before(end); {
		if _, err := apply(t, j, bson.D{{Key: "_id", Value: 1}}); err != nil {
			t.Fatalf("a quick call was stopped: %v", err)
		}
	}
	// Let the timer lapse, then arm it with one quick call: it is set for
	// that call's deadline, half-way through the next call's limit.
	time.Sleep(limit + limit/2)
	if _, err := apply(t, j, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(limit / 2)
	start := time.Now()
	_, err := apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "loop", Value: true}})
	wantErr(t, err, errs.TransformFailed, "did not finish within 300ms")
	if d := time.Since(start); d < limit {
		t.Fatalf("stopped after %s, before its own limit of %s", d, limit)
	}
	if _, err := apply(t, j, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
}

// A context that ended while no call ran (its registration found nothing
// to stop) still stops the next call made under it.
func TestAContextThatEndedBetweenCallsStopsTheNext(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { if (doc.loop) { for (;;) {} } return {}; } };`,
		transform.Options{Pool: 1, Timeout: time.Minute})
	ctx, cancel := context.WithCancelCause(context.Background())
	if _, err := j.Apply(ctx, marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpInsert, nil); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("shutting down")
	cancel(stop)
	time.Sleep(10 * time.Millisecond) // let the registration's callback run and find no call
	_, err := j.Apply(ctx, marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "loop", Value: true}}), transform.OpInsert, nil)
	if !errors.Is(err, stop) {
		t.Fatalf("got %v", err)
	}
	// The runtime that was stopped is replaced; a live context works.
	if _, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpInsert, nil); err != nil {
		t.Fatal(err)
	}
}

func TestTheSandboxHoldsNothingOutside(t *testing.T) {
	probes := map[string]string{
		"require":               `typeof require`,
		"process":               `typeof process`,
		"setTimeout":            `typeof setTimeout`,
		"setInterval":           `typeof setInterval`,
		"fetch":                 `typeof fetch`,
		"XMLHttpRequest":        `typeof XMLHttpRequest`,
		"module from the doc":   `doc.constructor.constructor("return typeof module")()`,
		"Function this":         `typeof Function("return this")().require`,
		"Function process":      `typeof Function("return this.process")()`,
		"constructor chain":     `(() => {}).constructor("return typeof require")()`,
		"console constructor":   `typeof console.log.constructor("return this")().process`,
		"eval":                  `eval("typeof require")`,
		"indirect eval":         `(0, eval)("typeof process")`,
		"import":                `(function () { try { return typeof eval("import('fs')"); } catch (e) { return "undefined"; } })()`,
		"Go values in console":  `Object.getOwnPropertyNames(console.log).filter(k => !["length", "name"].includes(k)).join() || "undefined"`,
		"globals are built-ins": `Object.getOwnPropertyNames(globalThis).filter(k => !BUILTINS.includes(k)).join() || "undefined"`,
		"ObjectId has no Go":    `Object.getOwnPropertyNames(Object.getPrototypeOf(doc._id)).filter(k => !["constructor","toHexString","toString","toJSON","equals","getTimestamp"].includes(k)).join() || "undefined"`,
	}
	builtins := `["Object","Function","Array","String","Number","BigInt","RegExp","Date","Boolean","Proxy","Reflect","Error","AggregateError","TypeError","ReferenceError","SyntaxError","RangeError","EvalError","URIError","GoError","eval","Math","JSON","ArrayBuffer","DataView","Uint8Array","Uint8ClampedArray","Int8Array","Uint16Array","Int16Array","Uint32Array","Int32Array","Float32Array","Float64Array","BigInt64Array","BigUint64Array","Symbol","WeakSet","WeakMap","Map","Set","Promise","globalThis","NaN","undefined","Infinity","isNaN","parseInt","parseFloat","isFinite","decodeURI","decodeURIComponent","encodeURI","encodeURIComponent","escape","unescape","console","_","ObjectId","Decimal128","Timestamp","BSONRegExp","WeakRef","FinalizationRegistry","Iterator","AsyncFunction"]`
	for name, expr := range probes {
		t.Run(name, func(t *testing.T) {
			j := loadJob(t, `const BUILTINS = `+builtins+`; module.exports = { transform(doc) { return { r: `+expr+` }; } };`)
			res, err := apply(t, j, bson.D{{Key: "_id", Value: bson.NewObjectID()}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Doc["r"] != "undefined" {
				t.Fatalf("reached %v", res.Doc["r"])
			}
		})
	}
}

func TestConsoleGoesToTheJobLoggerRateLimited(t *testing.T) {
	var buf testutil.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true, Level: hclog.Debug})
	j := loadJob(t, `module.exports = { transform(doc) {
		console.log("hello", {a: 1}, [2], null);
		console.warn("careful");
		console.error(new Error("bad"));
		for (let i = 0; i < 100; i++) console.info("spam", i);
		console.log("x".repeat(10000));
		return null;
	} };`, transform.Options{Logger: log, Pool: 1})
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}})
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 20 {
		t.Errorf("%d lines, want the burst of 20", len(lines))
	}
	for _, s := range []string{`"@message":"hello {\"a\":1} [2] null"`, `"@level":"warn","@message":"careful"`, `"@level":"error","@message":"Error: bad"`, `"job":"job"`, `"source":"console"`} {
		if !strings.Contains(out, s) {
			t.Errorf("the log does not hold %s:\n%s", s, out)
		}
	}
}

func TestApplyIsSafeFromManyGoroutines(t *testing.T) {
	j := loadJob(t, `const seen = {};
	module.exports = { transform(doc, ctx) {
		return { n: doc.n * 2, tags: doc.tags.map(s => s.toUpperCase()), op: ctx.operation };
	} };`, transform.Options{Pool: 3})
	mirror := loadJob(t, `module.exports = { mirror: "m", transform(doc) { doc.n += 1; return doc; } };`, transform.Options{Pool: 2})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				n := int32(g*1000 + i)
				doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: n}, {Key: "n", Value: n}, {Key: "tags", Value: bson.A{"a", "b"}}})
				res, err := j.Apply(context.Background(), doc, transform.OpReindex, nil)
				if err != nil || res.Doc["n"] != int64(2*n) || res.ID != int64(n) || res.Doc["tags"].([]any)[1] != "B" {
					errc <- fmt.Errorf("search %d: %v %v", n, res.Doc, err)
					return
				}
				m, err := mirror.Apply(context.Background(), doc, transform.OpReindex, nil)
				if err != nil || m.Raw.Lookup("n").Int32() != n+1 {
					errc <- fmt.Errorf("mirror %d: %v %v", n, m.Raw, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestAJobWithoutATransformIsTheIdentity(t *testing.T) {
	// A job declared by environment alone is a Job built by hand.
	j := &transform.Job{Job: jobdef.Job{Name: "env", Collection: "c", Index: "c", PrimaryKey: "id"}}
	res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: "a"}, {Key: "x", Value: 1}}), transform.OpInsert, nil)
	if err != nil || res.Doc["id"] != "a" || res.Doc["x"] != int64(1) {
		t.Fatalf("%v %v", res, err)
	}
	m := &transform.Job{Job: jobdef.Job{Name: "envm", Kind: jobdef.Mirror, Mirror: "c"}}
	doc := marshal(t, bson.D{{Key: "_id", Value: "a"}, {Key: "x", Value: 1}})
	res, err = m.Apply(context.Background(), doc, transform.OpInsert, nil)
	if err != nil || string(res.Raw) != string(doc) {
		t.Fatalf("%v %v", res, err)
	}
}

func TestADocumentWithoutIDIsNotADocument(t *testing.T) {
	_, err := apply(t, loadJob(t, `module.exports = {};`), bson.D{{Key: "x", Value: 1}})
	wantErr(t, err, errs.NotADocument, "no _id")
}

// A panic that no case expects (a bug in a conversion, here a stand-in
// for one) fails that document with TRANSFORM_FAILED, never the process:
// raised inside goja (a field read), after it (a key written out) or with
// no transform at all. The runtime it unwound through is not reused (the
// module's state starts again) and the pool's place is given back; the
// log has the stack.
func TestAnUnexpectedPanicIsAPerDocumentError(t *testing.T) {
	defer transform.SetTestPanic("boom", "a stand-in bug")()
	var buf testutil.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true})
	opts := transform.Options{Pool: 1, Logger: log}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	applyCtx := func(j *transform.Job, d any) (transform.Result, error) {
		return j.Apply(ctx, marshal(t, d), transform.OpInsert, nil)
	}

	read := loadJob(t, `let n = 0;
		module.exports = { transform(doc) { n++; if (doc.read) doc.boom; return { n: n, out: doc.out }; } };`, opts)
	if res, err := applyCtx(read, bson.D{{Key: "_id", Value: 1}}); err != nil || res.Doc["n"] != int64(1) {
		t.Fatalf("first document: %v, %v", res.Doc, err)
	}
	_, err := applyCtx(read, bson.D{{Key: "_id", Value: 2}, {Key: "read", Value: true}, {Key: "boom", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "internal error", "a stand-in bug", "report")
	res, err := applyCtx(read, bson.D{{Key: "_id", Value: 3}})
	if err != nil || res.Doc["n"] != int64(1) {
		t.Fatalf("after the panic: %v, %v; want n 1 from a fresh runtime", res.Doc, err)
	}
	_, err = applyCtx(read, bson.D{{Key: "_id", Value: 4}, {Key: "out", Value: bson.D{{Key: "boom", Value: 1}}}})
	wantErr(t, err, errs.TransformFailed, "internal error", "a stand-in bug")
	if res, err := applyCtx(read, bson.D{{Key: "_id", Value: 5}}); err != nil || res.Doc["n"] != int64(1) {
		t.Fatalf("after the second panic: %v, %v", res.Doc, err)
	}

	for _, src := range []string{`module.exports = {};`, `module.exports = { transform(doc) { return true; } };`} {
		same := loadJob(t, src, opts)
		_, err = applyCtx(same, bson.D{{Key: "_id", Value: 1}, {Key: "boom", Value: 1}})
		wantErr(t, err, errs.TransformFailed, "internal error", "a stand-in bug")
		if res, err := applyCtx(same, bson.D{{Key: "_id", Value: 2}, {Key: "ok", Value: 1}}); err != nil || res.Doc["ok"] != int64(1) {
			t.Fatalf("%s after the panic: %v, %v", src, res.Doc, err)
		}
	}
	if out := buf.String(); strings.Count(out, `"stack":"goroutine`) != 4 || !strings.Contains(out, "please report") {
		t.Fatalf("log: %s", out)
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
