package transform_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

func TestCheckReportsEveryProblemAndEveryResult(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"good.js":   `module.exports = { transform(d) { return d.n > 1 ? {n: d.n} : null; }, samples: [{ _id: 1, n: 2 }, { _id: 2, n: 1 }] };`,
		"throws.js": `module.exports = { transform(d) { throw new Error("nope"); }, samples: [{ _id: 1 }] };`,
		"broken.js": `module.exports = { index: 5 };`,
	})
	var out bytes.Buffer
	err := transform.Check(&out, dir, "", transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid) // the first joined problem
	for _, s := range []string{
		`error: CONFIG_INVALID broken: broken.js: key "index": must be a string, not a number`,
		`good.js: ok: search good -> index good`,
		`  sample 1 (_id 1): {"id":1,"n":2}`,
		`  sample 2 (_id 2): skipped (kept out of the index)`,
		`  sample 1 (_id 1): error: TRANSFORM_FAILED throws: transform: throws.js: Error: nope (line 1:`,
		`2 problem(s)`,
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, out.String())
		}
	}
	if !strings.Contains(errs.Format(err), "TRANSFORM_FAILED") {
		t.Errorf("the error does not hold the failing sample: %v", err)
	}
}

func TestCheckReadsASampleFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = { mirror: "m" };`})
	samples := filepath.Join(t.TempDir(), "s.jsonl")
	os.WriteFile(samples, []byte("// comment\n\n{\"_id\": {\"$numberLong\": \"5\"}, \"d\": {\"$date\": \"2024-01-01T00:00:00Z\"}}\n{\"x\": 1}\n"), 0o644)
	var out bytes.Buffer
	if err := transform.Check(&out, dir, samples, transform.Options{Pool: 1}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`  sample 1 (_id 5): {"_id":{"$numberLong":"5"},"d":{"$date":{"$numberLong":"1704067200000"}}}`,
		`  sample 2 (_id 2): {"_id":{"$numberInt":"2"},"x":{"$numberInt":"1"}}`,
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, out.String())
		}
	}
	os.WriteFile(samples, []byte("{\"_id\": 1}\n{not json}\n"), 0o644)
	err := transform.Check(&out, dir, samples, transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid, "s.jsonl:2:")
}

func TestCheckWarnsOfReadsOutsideFieldsAndShowsTrimmedResults(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"narrow.js": `module.exports = { fields: ["title"], transform(d) { return {title: d.title, s: d.summary, v: "" + d.valueOf}; },
			samples: [{ _id: 1, title: "T", summary: "S" }] };`,
		"whole.js": `module.exports = { fields: ["title"], transform(d) { return {...d}; }, samples: [{ _id: 1, title: "T", views: 3 }] };`,
		"fine.js":  `module.exports = { fields: ["title", "views"], skipUnchanged: false, transform(d) { return {title: d.title, v: d.views}; }, samples: [{ _id: 1, title: "T", views: 3, x: 1 }] };`,
	})
	var out bytes.Buffer
	if err := transform.Check(&out, dir, "", transform.Options{Pool: 1}); err != nil {
		t.Fatalf("warnings are no problems: %v\n%s", err, out.String())
	}
	for _, s := range []string{
		`narrow.js: ok: search narrow -> index narrow (primary key id, dates iso, reindex swap), fields title`,
		`  sample 1 (_id 1): warning: the transform reads "summary", which fields (title) leaves out`,
		`  sample 1 (_id 1): {"id":1,"title":"T","v":"function valueOf() { [native code] }"}`,
		`  sample 1 (_id 1): warning: the transform reads the whole document (it enumerates or returns it), which fields (title) leaves out`,
		`  sample 1 (_id 1): {"_id":1,"id":1,"title":"T"}`,
		`fine.js: ok: search fine -> index fine (primary key id, dates iso, reindex swap), fields title, views, skipUnchanged off`,
		`  sample 1 (_id 1): {"id":1,"title":"T","v":3}`,
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output does not say %q:\n%s", s, out.String())
		}
	}
	if n := strings.Count(out.String(), "warning:"); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, out.String())
	}
}
