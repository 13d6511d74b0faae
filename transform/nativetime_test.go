package transform_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// timed applies d and fails the test if that takes longer than within.
func timed(t *testing.T, j *transform.Job, d any, within time.Duration) (transform.Result, error) {
	t.Helper()
	start := time.Now()
	res, err := apply(t, j, d)
	if took := time.Since(start); took > within {
		t.Fatalf("the call took %s, more than %s", took, within)
	}
	return res, err
}

// A regular expression with a lookahead runs on regexp2, which
// backtracks: on 25 characters this one takes seconds, out of
// Interrupt's reach. The document fails on time and the job goes on.
func TestABacktrackingRegularExpressionFailsOnTime(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return { ok: /^(a+)+(?=b)b/.test(doc.s) }; } };`,
		transform.Options{Pool: 1, Timeout: 100 * time.Millisecond})
	_, err := timed(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: strings.Repeat("a", 25) + "c"}}, 3*time.Second)
	wantErr(t, err, errs.TransformFailed, "did not finish within 100ms")
	res, err := timed(t, j, bson.D{{Key: "_id", Value: 2}, {Key: "s", Value: "ab"}}, 3*time.Second)
	if err != nil || res.Doc["ok"] != true {
		t.Fatalf("the next document: %v %v", res.Doc, err)
	}
}

// A call stuck in a built-in does not hold its caller past its context.
func TestACanceledContextAbandonsAStuckCall(t *testing.T) {
	j := loadJob(t, `module.exports = { transform(doc) { return { ok: /^(a+)+(?=b)b/.test(doc.s) }; } };`,
		transform.Options{Pool: 1, Timeout: 50 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := j.Apply(ctx, marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: strings.Repeat("a", 25) + "c"}}), transform.OpInsert, nil)
	if err == nil || ctx.Err() == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
}

// Built-ins that looped or allocated in Go for as long as an array-like's
// length said (2**53-1 iterations; 64 GB at once, a fatal "out of
// memory"), or built strings without end, refuse: each case must end
// within seconds, with an error the transform can catch or a
// per-document error.
func TestNativeWorkIsBounded(t *testing.T) {
	cases := map[string]string{
		"indexOf on a huge array-like": `Array.prototype.indexOf.call({length: 2 ** 53 - 1}, 1)`,
		"forEach on a sparse array":    `const a = []; a.length = 2 ** 32 - 1; a.forEach(x => x)`,
		"join of a sparse array":       `const a = []; a.length = 2 ** 32 - 1; a.join()`,
		"apply with a huge array-like": `Math.max.apply(null, {length: 2 ** 32 - 1})`,
		"Reflect.apply":                `Reflect.apply(Math.max, null, {length: 2 ** 32 - 1})`,
		"Reflect.construct":            `Reflect.construct(Array, {length: 2 ** 32 - 1})`,
		"sort of a huge array-like":    `Array.prototype.sort.call({length: 2 ** 32 - 1})`,
		"concat of a huge spreadable":  `[].concat({length: 2 ** 32 - 1, [Symbol.isConcatSpreadable]: true})`,
		"Array.from a huge array-like": `Array.from({length: 2 ** 31})`,
		"map of a huge array-like":     `[].map.call({length: 2 ** 31}, x => x)`,
		"fill of a huge array":         `new Array(2 ** 30).fill(0)`,
		"a huge typed array":           `new Uint8Array(2 ** 33)`,
		"a huge ArrayBuffer":           `new ArrayBuffer(2 ** 33)`,
		"a typed array from an object": `new Float64Array({length: 2 ** 30})`,
		"Uint8Array.from":              `Uint8Array.from({length: 2 ** 33})`,
		"a typed array subclass":       `class U extends Uint8Array {} new U(2 ** 33)`,
		"a typed array's constructor":  `new (new Uint8Array(1).constructor)(2 ** 33)`,
		"repeat":                       `"ab".repeat(2 ** 29)`,
		"padStart":                     `"a".padStart(2 ** 30)`,
		"stringify of a shared array":  `let a = [1]; for (let i = 0; i < 60; i++) a = [a, a]; JSON.stringify(a)`,
		"join of a shared array":       `let a = [1]; for (let i = 0; i < 60; i++) a = [a, a]; String(a)`,
		"stringify of a long string":   `JSON.stringify("x".repeat(2 ** 25))`,
		"flat of a shared array":       `let a = [1]; for (let i = 0; i < 60; i++) a = [a, a]; a.flat(Infinity)`,
		"JSON.parse of a long text":    `JSON.parse(" ".repeat(2 ** 25) + "1")`,
		"eval of a long source":        `eval(" ".repeat(100000) + "1")`,
	}
	src := `module.exports = { transform(doc) {
		try { (function () { ` + "%s" + ` })(); } catch (e) { return { caught: e.name }; }
		return { caught: "" };
	} };`
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			// The memory bound, as users have it: these allocate.
			j := loadJob(t, strings.Replace(src, "%s", code, 1), transform.Options{Timeout: 300 * time.Millisecond, MemoryLimit: transform.DefaultMemoryLimit})
			res, err := timed(t, j, bson.D{{Key: "_id", Value: 1}}, 8*time.Second)
			if err != nil {
				if strings.Contains(err.Error(), "MEILISTREAM_TRANSFORM_MEMORY") {
					// What it allocates took the heap past the memory
					// bound before its time ran out.
					wantErr(t, err, errs.TransformFailed, "memory bound")
					return
				}
				wantErr(t, err, errs.TransformFailed, "did not finish within")
				return
			}
			if c := res.Doc["caught"]; c != "RangeError" {
				t.Fatalf("caught %v, want a RangeError", c)
			}
		})
	}
}

// A call that runs out of time is tried again on a fresh runtime, so that
// a busy machine does not fail documents for good; one that loops for
// good fails after three limits.
func TestATimeoutIsTriedAgain(t *testing.T) {
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	// The transform spins until a wall-clock time 2.5 s away: the first
	// two tries (1 s each) run out of time, the third one returns. The
	// first try need only start within 1.5 s, which a loaded machine
	// keeps to.
	j := loadJob(t, `module.exports = { transform(doc) { while (Date.now() < doc.until) {} return { ok: true }; } };`,
		transform.Options{Pool: 1, Timeout: time.Second, Logger: log})
	res, err := apply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "until", Value: time.Now().Add(2500 * time.Millisecond).UnixMilli()}})
	if err != nil || res.Doc["ok"] != true {
		t.Fatalf("got %v, %v", res.Doc, err)
	}
	if !strings.Contains(logs.String(), "trying it again on a fresh runtime") {
		t.Fatalf("no try again in the log:\n%s", logs.String())
	}
	loop := loadJob(t, `module.exports = { transform(doc) { for (;;) {} } };`, transform.Options{Pool: 1, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_, err = apply(t, loop, bson.D{{Key: "_id", Value: 1}})
	wantErr(t, err, errs.TransformFailed, "did not finish within 100ms")
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("failed after %s: not tried three times", took)
	}
}

func TestTheTimeLimitHasAnUpperBound(t *testing.T) {
	_, err := transform.Load(writeFiles(t, map[string]string{"job.js": `module.exports = { transformTimeout: "2m" };`}), transform.Options{})
	wantErr(t, err, errs.ConfigInvalid, "job.js", `"transformTimeout"`, "1m0s")
	_, err = transform.Load(writeFiles(t, map[string]string{"job.js": `module.exports = {};`}),
		transform.Options{Overrides: map[string]map[string]string{"job": {"transform_timeout": "90s"}}})
	wantErr(t, err, errs.ConfigInvalid, "MEILISTREAM_JOB_JOB_TRANSFORM_TIMEOUT", "1m0s")
	_, err = transform.Load(writeFiles(t, map[string]string{"job.js": `module.exports = {};`}), transform.Options{Timeout: time.Hour})
	wantErr(t, err, errs.ConfigInvalid, "MEILISTREAM_TRANSFORM_TIMEOUT", "1m0s")
	if j := loadJob(t, `module.exports = { transformTimeout: "1m" };`); j.Timeout != time.Minute {
		t.Fatalf("timeout %s", j.Timeout)
	}
}
