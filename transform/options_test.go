package transform_test

import (
	"strings"
	"testing"

	"github.com/meilistream/meilistream/transform"
)

func TestJobOptionsAreOneConsistentTable(t *testing.T) {
	keys, envs := map[string]bool{}, map[string]bool{}
	for _, o := range transform.JobOptions {
		if keys[o.Key] || (o.Env != "" && envs[o.Env]) {
			t.Errorf("option %q (%q) is listed twice", o.Key, o.Env)
		}
		keys[o.Key], envs[o.Env] = true, true
		if o.Accepts == "" || o.Default == "" || o.Doc == "" {
			t.Errorf("option %q lacks what it accepts, its default or its doc: %+v", o.Key, o)
		}
		if o.Env != "" && strings.ToLower(o.Env) != o.Env {
			t.Errorf("option %q: Env %q is not lower case", o.Key, o.Env)
		}
	}
	if md := transform.JobOptionsMarkdown(); strings.Count(md, "\n") != len(transform.JobOptions)+2 {
		t.Errorf("the manual's table has not one row per option:\n%s", md)
	}
}

// Each variable's value is checked at start by its option's kind, with the
// message the transform package gives when it applies it.
func TestCheckOverride(t *testing.T) {
	cases := map[string]struct{ good, bad, says string }{
		"collection":        {"books", "", ""},
		"database":          {"shop", "a.b", `"a.b" is not a database name`},
		"index":             {"books_v2", "a.b", `"a.b" is not a Meilisearch index uid`},
		"primary_key":       {"id", "", ""},
		"mirror":            {"books", "", ""},
		"reindex":           {"inplace", "copy", `"copy" is not a choice`},
		"sweep":             {"false", "maybe", `"maybe" is not a boolean`},
		"on_document_error": {"fail", "drop", `"drop" is not a choice`},
		"on_history_lost":   {"reindex", "pray", `"pray" is not a choice`},
		"batch_size":        {"100000", "100001", `"100001" is not a whole number from 1 to 100000`},
		"flush_interval":    {"250ms", "5", `"5" is not a positive Go duration`},
		"transform_timeout": {"2s", "-1s", `"-1s" is not a positive Go duration`},
		"skip_unchanged":    {"false", "off", `"off" is not a boolean`},
		"verify":            {"true", "yes", `"yes" is not a boolean`},
		"verify_repair":     {"true", "1x", `"1x" is not a boolean`},
		"fields":            {"title, body,tags", "title,a.b", `"a.b" is not a top-level field name (no dots)`},
		"mode":              {"scan", "poll", `"poll" is not a choice`},
		"key":               {"meta.updatedAt", "$when", `"$when" starts a path element with '$'`},
		"scan_interval":     {"100ms", "0s", `"0s" is not a positive Go duration`},
		"sweep_interval":    {"5m", "often", `"often" is not a positive Go duration`},
		"scan_overlap":      {"5000", "-1s", `"-1s" is not a Go duration or a plain number, 0 or more`},
		"reindex_rate":      {"500", "0", `"0" is not a whole number from 1 to 100000`},
	}
	for _, o := range transform.EnvOptions() {
		c, ok := cases[o]
		if !ok {
			t.Errorf("no case for option %s", o)
			continue
		}
		if problem, _, known := transform.CheckOverride(o, c.good); !known || problem != "" {
			t.Errorf("%s=%s: %q (known %v), want fine", o, c.good, problem, known)
		}
		if c.bad == "" {
			continue // any text is of its kind; the job checks it
		}
		problem, accepts, _ := transform.CheckOverride(o, c.bad)
		if problem != c.says || accepts == "" {
			t.Errorf("%s=%s: %q (accepts %q), want %q", o, c.bad, problem, accepts, c.says)
		}
	}
	if _, _, known := transform.CheckOverride("primarykey", "id"); known {
		t.Error("an unknown option is known")
	}
	if _, _, known := transform.CheckOverride("dates", "iso"); known {
		t.Error("dates, which only a file sets, has a variable")
	}
}

// skipUnchanged decides what is sent, not what a document becomes: its
// override leaves the hash (and so the index) alone; fields changes what
// the transform sees, and the hash.
func TestSkipUnchangedLeavesTheHashAndFieldsChangeIt(t *testing.T) {
	src := `module.exports = { transform(d) { return {t: d.title}; } };`
	load := func(ov map[string]string) *transform.Job {
		t.Helper()
		return loadJob(t, src, transform.Options{Overrides: map[string]map[string]string{"job": ov}})
	}
	plain := loadJob(t, src)
	off := load(map[string]string{"skip_unchanged": "false"})
	if off.SkipUnchanged || !plain.SkipUnchanged {
		t.Fatalf("skipUnchanged: override %v, default %v", off.SkipUnchanged, plain.SkipUnchanged)
	}
	if off.Hash != plain.Hash {
		t.Error("MEILISTREAM_JOB_JOB_SKIP_UNCHANGED changed the hash: turning it off would reindex")
	}
	fields := load(map[string]string{"fields": "title, body"})
	if fields.Hash == plain.Hash || strings.Join(fields.Fields, ",") != "title,body" {
		t.Errorf("fields %q: hash changed %v", fields.Fields, fields.Hash != plain.Hash)
	}
	if both := load(map[string]string{"fields": "title, body", "skip_unchanged": "false"}); both.Hash != fields.Hash {
		t.Error("skip_unchanged beside fields changed the hash")
	}
	// Nor does verifying the destination in the background.
	if v := load(map[string]string{"verify": "true", "verify_repair": "true"}); v.Hash != plain.Hash || !v.Verify || !v.VerifyRepair {
		t.Errorf("verify, verify_repair: hash changed %v, set %v %v", v.Hash != plain.Hash, v.Verify, v.VerifyRepair)
	}
	for _, bad := range []string{`fields: []`, `fields: "title"`, `fields: ["a.b"]`, `fields: ["$a"]`, `fields: [1]`, `skipUnchanged: "no"`} {
		_, err := transform.Load(writeFiles(t, map[string]string{"job.js": `module.exports = { ` + bad + ` };`}), transform.Options{Pool: 1})
		if err == nil {
			t.Errorf("%s: loaded", bad)
		}
	}
	only := loadJob(t, `module.exports = { fields: ["_id", "title", "title"] };`)
	if strings.Join(only.Fields, ",") != "title" {
		t.Errorf("fields %q, want title once", only.Fields)
	}
	id := loadJob(t, `module.exports = { fields: ["_id"] };`)
	if id.Fields == nil || len(id.Fields) != 0 {
		t.Errorf("fields of _id alone: %#v, want empty, not nil (every field)", id.Fields)
	}
}
