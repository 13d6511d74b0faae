package transform_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

func TestLoadReadsOptionsAndDefaults(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"articles.js": `module.exports = { collection: "posts", index: "articles_v2", primaryKey: "pk", dates: "epoch",
			reindex: "inplace", sweep: false, onDocumentError: "fail", onHistoryLost: "fail", batchSize: 50,
			flushInterval: "250ms", settings: { filterableAttributes: ["tags"], rankingRules: ["words"] },
			samples: [{ _id: { $oid: "65f1c0a2b3c4d5e6f7a8b9c0" }, at: { $date: "2024-01-01T00:00:00Z" } }, { x: 1 }],
			transform(doc) { return doc; } };`,
		"plain.js":  `module.exports = {};`,
		"mon.js":    `module.exports = function (doc) { return true; };`,
		"people.js": `module.exports = { mirror: "people_copy", collection: "people" };`,
		"notes.txt": `not a transform`,
		".swap.js":  `this is hidden`,
	})
	set, err := transform.Load(dir, transform.Options{Defaults: transform.JobDefaults{OnDocumentError: "fail", BatchSize: 7, FlushInterval: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	var names []string
	for _, j := range set.Jobs() {
		names = append(names, j.Name)
	}
	if strings.Join(names, ",") != "articles,mon,people,plain" {
		t.Fatalf("jobs %v", names)
	}
	a := set.Job("articles")
	if a.Collection != "posts" || a.Index != "articles_v2" || a.PrimaryKey != "pk" || a.Dates != "epoch" || a.Reindex != "inplace" ||
		a.Sweep || a.OnDocumentError != "fail" || a.OnHistoryLost != "fail" || a.BatchSize != 50 || a.FlushInterval != 250*time.Millisecond ||
		a.Kind != jobdef.Search || a.Function || len(a.Samples) != 2 {
		t.Errorf("articles: %+v", a)
	}
	if a.Settings["filterableAttributes"].([]any)[0] != "tags" {
		t.Errorf("settings %v", a.Settings)
	}
	if id := a.Samples[1].Lookup("_id"); id.Int32() != 2 {
		t.Errorf("a sample without _id gets its position: %v", id)
	}
	p := set.Job("plain")
	if p.Collection != "plain" || p.Index != "plain" || p.PrimaryKey != "id" || p.Dates != "iso" || p.Reindex != "swap" || !p.Sweep ||
		p.OnDocumentError != "fail" || p.OnHistoryLost != "reindex" || p.BatchSize != 7 || p.FlushInterval != 3*time.Second || p.Settings != nil {
		t.Errorf("plain: %+v", p)
	}
	if m := set.Job("mon"); !m.Function || m.Kind != jobdef.Search || m.Index != "mon" {
		t.Errorf("mon: %+v", m)
	}
	if m := set.Job("people"); m.Kind != jobdef.Mirror || m.Mirror != "people_copy" || m.Collection != "people" || m.Index != "" || m.Sweep || m.Reindex != "inplace" {
		t.Errorf("people: %+v", m)
	}
	if set.Job("notes") != nil || set.Job("nope") != nil {
		t.Error("a job that is not there")
	}
}

func TestTheLegacyHashIsTheFileContentSHA256(t *testing.T) {
	src := `module.exports = {};`
	j := loadJob(t, src)
	sum := sha256.Sum256([]byte(src))
	if j.LegacyHash != hex.EncodeToString(sum[:]) || j.Hash == j.LegacyHash {
		t.Fatalf("legacy hash %s, hash %s", j.LegacyHash, j.Hash)
	}
}

func TestLoadNamesEveryProblemWithFileAndKey(t *testing.T) {
	cases := []struct {
		name, src string
		code      errs.Code
		says      []string
	}{
		{"an unknown key", `module.exports = { colection: "x" };`, errs.ConfigInvalid, []string{"job.js", `key "colection"`, "unknown key"}},
		{"a wrong type", `module.exports = { collection: 5 };`, errs.ConfigInvalid, []string{`key "collection"`, "must be a string, not a number"}},
		{"a bad dates value", `module.exports = { dates: "unix" };`, errs.ConfigInvalid, []string{`key "dates"`, `"iso" or "epoch"`}},
		{"a bad reindex value", `module.exports = { reindex: "never" };`, errs.ConfigInvalid, []string{`key "reindex"`}},
		{"a bad onDocumentError", `module.exports = { onDocumentError: "ignore" };`, errs.ConfigInvalid, []string{`key "onDocumentError"`}},
		{"a bad onHistoryLost", `module.exports = { onHistoryLost: "pray" };`, errs.ConfigInvalid, []string{`key "onHistoryLost"`}},
		{"sweep not a boolean", `module.exports = { sweep: "yes" };`, errs.ConfigInvalid, []string{`key "sweep"`}},
		{"a zero batch size", `module.exports = { batchSize: 0 };`, errs.ConfigInvalid, []string{`key "batchSize"`}},
		{"a bad flush interval", `module.exports = { flushInterval: "soon" };`, errs.ConfigInvalid, []string{`key "flushInterval"`}},
		{"transform not a function", `module.exports = { transform: "x" };`, errs.ConfigInvalid, []string{`key "transform"`, "must be a function"}},
		{"settings not an object", `module.exports = { settings: [] };`, errs.ConfigInvalid, []string{`key "settings"`}},
		{"settings holding a function", `module.exports = { settings: { f() {} } };`, errs.ConfigInvalid, []string{`key "settings"`, "f: a function"}},
		{"samples not an array", `module.exports = { samples: {} };`, errs.ConfigInvalid, []string{`key "samples"`}},
		{"a sample that is not Extended JSON", `module.exports = { samples: [{ a: { $oid: "nope" } }] };`, errs.ConfigInvalid, []string{`key "samples"`, "sample 1"}},
		{"a bad index uid", `module.exports = { index: "my index" };`, errs.ConfigInvalid, []string{`key "index"`, "not a Meilisearch index uid"}},
		{"an index uid kept for reindexing", `module.exports = { index: "a__reindex" };`, errs.ConfigInvalid, []string{`key "index"`, "__reindex"}},
		{"a bad primary key", `module.exports = { primaryKey: "a.b" };`, errs.ConfigInvalid, []string{`key "primaryKey"`}},
		{"a bad collection", `module.exports = { collection: "a$b" };`, errs.ConfigInvalid, []string{`key "collection"`}},
		{"index on a mirror", `module.exports = { mirror: "m", index: "i" };`, errs.ConfigInvalid, []string{`key "index"`, "mirror"}},
		{"dates on a mirror", `module.exports = { mirror: "m", dates: "epoch" };`, errs.ConfigInvalid, []string{`key "dates"`}},
		{"an empty mirror", `module.exports = { mirror: "" };`, errs.ConfigInvalid, []string{`key "mirror"`}},
		{"exports a string", `module.exports = "x";`, errs.ConfigInvalid, []string{"module.exports must be an object or a function"}},
		{"an option on a function", `module.exports = function () {}; module.exports.index = "x";`, errs.ConfigInvalid, []string{`key "index"`, "function transform takes no options"}},
		{"a syntax error", "module.exports = {\n  transform(doc) {\n    return doc +* 1;\n  },\n};", errs.ConfigInvalid, []string{"job.js:3:", "syntax error"}},
		{"a syntax error on line 1", "module.exports = {;", errs.ConfigInvalid, []string{"job.js:1:", "syntax error"}},
		{"a throw while loading", "const x = 1;\nthrow new Error('boom');", errs.TransformFailed, []string{"job.js:2:7: Error thrown"}},
		{"require while loading", "const fs = require('fs');", errs.TransformFailed, []string{"ReferenceError", "require"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := transform.Load(writeFiles(t, map[string]string{"job.js": tc.src, "ok.js": "module.exports = {};"}), transform.Options{Pool: 1})
			wantErr(t, err, tc.code, tc.says...)
			var e *errs.Error
			if errors.As(err, &e); e.Job != "job" {
				t.Errorf("the error names job %q", e.Job)
			}
			if set == nil || set.Job("job") != nil || set.Job("ok") == nil {
				t.Errorf("the set must hold the jobs that loaded, and only those")
			}
		})
	}
}

func TestLoadJoinsEveryProblem(t *testing.T) {
	_, err := transform.Load(writeFiles(t, map[string]string{
		"a.js": `module.exports = { colection: "x", dates: "unix" };`,
		"b.js": `module.exports = {`,
	}), transform.Options{Pool: 1})
	for _, s := range []string{`a.js: key "colection"`, `a.js: key "dates"`, "b.js:1:"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("%v does not say %q", err, s)
		}
	}
}

func TestTwoJobsCannotWriteOneDestination(t *testing.T) {
	set, err := transform.Load(writeFiles(t, map[string]string{
		"a.js": `module.exports = { index: "shared" };`,
		"b.js": `module.exports = { index: "shared" };`,
		"c.js": `module.exports = { mirror: "copy" };`,
		"d.js": `module.exports = { mirror: "copy" };`,
		"e.js": `module.exports = { mirror: "e" };`, // a mirror may share its name with an index
		"f.js": `module.exports = { index: "e" };`,
	}), transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid,
		`a.js: key "index": "shared" is also written by job "b" (b.js)`,
		`b.js: key "index": "shared" is also written by job "a" (a.js)`,
		`d.js: key "mirror": "copy" is also written by job "c"`)
	var names []string
	for _, j := range set.Jobs() {
		names = append(names, j.Name)
	}
	// Neither of a conflicting pair runs: a pod starting fresh must decide
	// as every other pod does, whatever order they loaded files in.
	if strings.Join(names, ",") != "e,f" {
		t.Fatalf("jobs %v", names)
	}
}

func TestAnUnreadableFolderIsAnError(t *testing.T) {
	set, err := transform.Load(t.TempDir()+"/missing", transform.Options{})
	if set != nil {
		t.Fatal("a set")
	}
	wantErr(t, err, errs.ConfigInvalid, "missing")
}

func TestLoadingIsTimeLimitedToo(t *testing.T) {
	for name, src := range map[string]string{
		"a loop at the top":     `for (;;) {} module.exports = {};`,
		"a loop in an option":   `module.exports = { get collection() { for (;;) {} } };`,
		"a loop in a sample":    `module.exports = { samples: [{ toJSON() { for (;;) {} } }] };`,
		"a throwing option":     `module.exports = { get index() { throw new Error("getter"); } };`,
		"runaway recursion top": `const f = () => f(); f();`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), transform.Options{Pool: 1, Timeout: 20 * time.Millisecond})
			wantErr(t, err, errs.TransformFailed, "job.js")
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestHugeSettingsAreRefusedNotAllocated(t *testing.T) {
	_, err := transform.Load(writeFiles(t, map[string]string{"job.js": `module.exports = { settings: { stopWords: new Array(1e9) } };`}), transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid, `key "settings"`, "larger than the limit")
}

func TestARunningJobKeepsItsIndexWhenAnotherFileClaimsIt(t *testing.T) {
	dir := writeFiles(t, map[string]string{"geo.js": `module.exports = { index: "geo" };`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aaa.js"), []byte(`module.exports = { collection: "ids", index: "geo" };`), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	wantErr(t, err, errs.ConfigInvalid, `aaa.js: key "index": "geo" is also written by job "geo"`)
	if next.Job("geo") == nil || next.Job("aaa") != nil {
		t.Fatalf("after the reload: geo %v, aaa %v; want geo kept, aaa refused", next.Job("geo"), next.Job("aaa"))
	}
	// A pod that starts now, with both files, runs neither.
	fresh, err := transform.Load(dir, transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid, `geo.js: key "index": "geo" is also written by job "aaa"`)
	if len(fresh.Jobs()) != 0 {
		t.Fatalf("a fresh load runs %d jobs of a conflict", len(fresh.Jobs()))
	}
}

func TestASyntaxErrorSaysWhatItCanAndQuotesNothing(t *testing.T) {
	cases := []struct {
		name, src string
		says      []string
		not       []string
	}{
		{"the later errors, each once", "module.exports = {\n  transform(doc) {\n    return { t: doc.t\n  },\n};\n",
			[]string{"job.js:5:1: syntax error: Unexpected token }", "; then 6:1: Unexpected end of input"}, []string{"(and ", "then 6:1: Unexpected end of input; 6:1"}},
		{"an ES module", "export default { collection: \"secret-token-1234\" };\n",
			[]string{"job.js:1:1: syntax error", "write module.exports = { ... }"}, []string{"secret-token-1234"}},
		{"an import", "import x from \"y\";\nmodule.exports = {};\n", []string{"instead of export/import"}, nil},
		{"no hint for CommonJS", "module.exports = {;\n", []string{"syntax error"}, []string{"CommonJS"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := transform.Load(writeFiles(t, map[string]string{"job.js": c.src}), transform.Options{Pool: 1})
			wantErr(t, err, errs.ConfigInvalid, c.says...)
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("%q says %q", err, n)
				}
			}
			var se *transform.SyntaxError
			if !errors.As(err, &se) || se.Line < 1 || !strings.HasSuffix(se.File, "job.js") {
				t.Errorf("no syntax error position in %#v", err)
			}
		})
	}
}

func TestAMisspeltOptionKeySaysWhichItMeant(t *testing.T) {
	for key, want := range map[string]string{"primarKey": "primaryKey", "colection": "collection", "Index": "index", "transfrom": "transform"} {
		_, err := transform.Load(writeFiles(t, map[string]string{"job.js": "module.exports = { " + key + ": \"x\" };"}), transform.Options{Pool: 1})
		wantErr(t, err, errs.ConfigInvalid, `key "`+key+`": unknown key; did you mean "`+want+`"?`)
	}
	_, err := transform.Load(writeFiles(t, map[string]string{"job.js": "module.exports = { zzz: 1 };"}), transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid, `key "zzz": unknown key (known:`)
}
