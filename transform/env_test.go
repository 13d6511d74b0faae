package transform_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

func jobNames(set *transform.Set) string {
	var names []string
	for _, j := range set.Jobs() {
		names = append(names, j.Name)
	}
	return strings.Join(names, ",")
}

func TestOverridesApplyAsTheJobLoads(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"articles.js": `module.exports = { transform(doc, ctx) { return { title: doc.title, from: ctx.collection }; } };`,
		"people.js":   `module.exports = { mirror: "people_copy" };`,
	})
	set, err := transform.Load(dir, transform.Options{Pool: 1, IndexPrefix: "p_", Overrides: map[string]map[string]string{
		"articles": {"collection": "posts", "index": "articles_v2", "primary_key": "pk", "reindex": "inplace", "sweep": "false",
			"on_document_error": "fail", "on_history_lost": "fail", "batch_size": "50", "flush_interval": "250ms", "transform_timeout": "3s"},
		"people": {"mirror": "people_v2", "collection": "persons"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := set.Job("articles")
	if a.Collection != "posts" || a.Index != "p_articles_v2" || a.PrimaryKey != "pk" || a.Reindex != "inplace" || a.Sweep ||
		a.OnDocumentError != "fail" || a.OnHistoryLost != "fail" || a.BatchSize != 50 || a.FlushInterval != 250*time.Millisecond || a.Timeout != 3*time.Second {
		t.Errorf("articles: %+v", a)
	}
	// The transform's ctx sees the collection of the override.
	if res := mustApply(t, a, map[string]any{"_id": 1, "title": "x"}); res.Doc["from"] != "posts" || res.Doc["pk"] != int64(1) {
		t.Errorf("result %v", res.Doc)
	}
	if p := set.Job("people"); p.Kind != jobdef.Mirror || p.Mirror != "people_v2" || p.Collection != "persons" || p.Index != "" {
		t.Errorf("people: %+v", p)
	}
}

func TestAnOverrideThatMovesAJobOntoAnotherIsRefused(t *testing.T) {
	files := map[string]string{"ja.js": `module.exports = {};`, "jb.js": `module.exports = {};`}
	set, err := transform.Load(writeFiles(t, files), transform.Options{Pool: 1, Overrides: map[string]map[string]string{"jb": {"index": "ja"}}})
	wantErr(t, err, errs.ConfigInvalid,
		`jb.js: MEILISTREAM_JOB_JB_INDEX=ja: "ja" is also written by job "ja" (ja.js)`,
		`ja.js: key "index": "ja" is also written by job "jb" (jb.js)`)
	if set == nil || len(set.Jobs()) != 0 {
		t.Fatalf("jobs %q, want none of the conflict", jobNames(set))
	}
	// With the prefix, the comparison is on the uids written.
	_, err = transform.Load(writeFiles(t, files), transform.Options{Pool: 1, IndexPrefix: "t_", Overrides: map[string]map[string]string{"jb": {"index": "ja"}}})
	wantErr(t, err, errs.ConfigInvalid, `"t_ja" is also written by job "ja"`)
	// Mirrors too.
	_, err = transform.Load(writeFiles(t, map[string]string{"ma.js": `module.exports = { mirror: "copy" };`, "mb.js": `module.exports = {};`}),
		transform.Options{Pool: 1, Overrides: map[string]map[string]string{"mb": {"mirror": "copy"}}})
	wantErr(t, err, errs.ConfigInvalid, `mb.js: MEILISTREAM_JOB_MB_MIRROR=copy: "copy" is also written by job "ma" (ma.js)`)
}

func TestAnOverrideNamingTwoJobsRefusesBoth(t *testing.T) {
	for name, files := range map[string][]string{"case": {"Upper.js", "upper.js"}, "dash": {"my-job.js", "my_job.js"}} {
		t.Run(name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{files[0]: `module.exports = {};`, files[1]: `module.exports = {};`, "other.js": `module.exports = {};`})
			key := transform.EnvKey(strings.TrimSuffix(files[0], ".js"))
			set, err := transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{key: {"index": "zzz"}}})
			wantErr(t, err, errs.ConfigInvalid, "MEILISTREAM_JOB_"+strings.ToUpper(key)+"_*", files[0], files[1], "none of them runs")
			if jobNames(set) != "other" {
				t.Fatalf("jobs %q, want other only", jobNames(set))
			}
			if n := strings.Count(err.Error(), "would apply to jobs"); n != 2 {
				t.Errorf("%d errors, want one per job: %v", n, err)
			}
			// Without an override naming them, the two are two jobs.
			set, err = transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{"other": {"batch_size": "5"}}})
			if err != nil || len(set.Jobs()) != 3 {
				t.Fatalf("jobs %q, err %v", jobNames(set), err)
			}
		})
	}
}

func TestAJobDeclaredByEnvironmentAlone(t *testing.T) {
	dir := writeFiles(t, map[string]string{"articles.js": `module.exports = { index: "tags" };`, "notes.js": `module.exports = {};`})
	set, err := transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{
		"tags":  {},
		"users": {"mirror": "users_public", "collection": "accounts"},
	}})
	// tags (by environment, index tags) and articles (file, index tags) conflict.
	wantErr(t, err, errs.ConfigInvalid,
		`MEILISTREAM_JOB_TAGS_*: key "index": "tags" is also written by job "articles" (articles.js)`,
		`articles.js: key "index": "tags" is also written by job "tags" (MEILISTREAM_JOB_TAGS_*)`)
	if jobNames(set) != "notes,users" {
		t.Fatalf("jobs %q", jobNames(set))
	}
	u := set.Job("users")
	if u.File != "" || u.Kind != jobdef.Mirror || u.Mirror != "users_public" || u.Collection != "accounts" || u.Hash == "" || u.Sweep {
		t.Errorf("users: %+v", u)
	}
	if res := mustApply(t, u, map[string]any{"_id": 1, "a": 2}); res.Raw == nil || res.Raw.Lookup("a").Int32() != 2 {
		t.Errorf("identity: %v", res.Raw)
	}
	set, err = transform.Load(writeFiles(t, map[string]string{"notes.js": `module.exports = {};`}), transform.Options{Pool: 1, IndexPrefix: "p_",
		Overrides: map[string]map[string]string{"tags": {}}})
	if err != nil {
		t.Fatal(err)
	}
	if g := set.Job("tags"); g == nil || g.Kind != jobdef.Search || g.Collection != "tags" || g.Index != "p_tags" || g.PrimaryKey != "id" || !g.Sweep || g.Reindex != "swap" {
		t.Errorf("tags: %+v", g)
	}
	// With no paths, only the jobs by environment.
	set, err = transform.LoadFiles(nil, transform.Options{Pool: 1, Overrides: map[string]map[string]string{"tags": {}}})
	if err != nil || jobNames(set) != "tags" {
		t.Fatalf("jobs %q, err %v", jobNames(set), err)
	}
}

func TestTheHashCoversOverridesAndThePrefix(t *testing.T) {
	dir := writeFiles(t, map[string]string{"job.js": `module.exports = {};`})
	hash := func(opts transform.Options) string {
		opts.Pool = 1
		set, err := transform.Load(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return set.Job("job").Hash
	}
	plain := hash(transform.Options{})
	seen := map[string]string{"plain": plain}
	for name, opts := range map[string]transform.Options{
		"index":        {Overrides: map[string]map[string]string{"job": {"index": "other"}}},
		"batch":        {Overrides: map[string]map[string]string{"job": {"batch_size": "7"}}},
		"prefix":       {IndexPrefix: "p_"},
		"other prefix": {IndexPrefix: "q_"},
	} {
		h := hash(opts)
		for other, oh := range seen {
			if h == oh {
				t.Errorf("%s and %s have one hash", name, other)
			}
		}
		seen[name] = h
		if again := hash(opts); again != h {
			t.Errorf("%s: the hash is not stable", name)
		}
	}
	// The sum the main package computed before overrides moved into
	// transform: an upgrade must not reindex.
	sum := sha256.Sum256([]byte(plain + "\x00index=other"))
	if h := seen["index"]; h != hex.EncodeToString(sum[:]) {
		t.Errorf("index override hash %s, want sha256(file hash, \"\\x00index=other\")", h)
	}
	sum = sha256.Sum256([]byte(plain + "\x00index_prefix=p_"))
	if h := seen["prefix"]; h != hex.EncodeToString(sum[:]) {
		t.Errorf("prefix hash %s", h)
	}
	// An override for another job changes nothing here.
	if h := hash(transform.Options{Overrides: map[string]map[string]string{"else": {"index": "x"}}}); h != plain {
		t.Error("another job's override changed the hash")
	}
}

func TestABadOverrideNamesTheVariable(t *testing.T) {
	cases := []struct {
		src    string
		ov     map[string]string
		prefix string
		says   []string
	}{
		{`module.exports = {};`, map[string]string{"reindex": "copy"}, "", []string{`job.js: MEILISTREAM_JOB_JOB_REINDEX: "copy" is not a choice; accepts swap or inplace`}},
		{`module.exports = {};`, map[string]string{"sweep": "maybe"}, "", []string{"MEILISTREAM_JOB_JOB_SWEEP", "accepts true or false"}},
		{`module.exports = {};`, map[string]string{"batch_size": "0"}, "", []string{"MEILISTREAM_JOB_JOB_BATCH_SIZE", "1 to 100000"}},
		{`module.exports = {};`, map[string]string{"flush_interval": "5"}, "", []string{"MEILISTREAM_JOB_JOB_FLUSH_INTERVAL", "positive Go duration"}},
		{`module.exports = {};`, map[string]string{"on_document_error": "drop"}, "", []string{"MEILISTREAM_JOB_JOB_ON_DOCUMENT_ERROR", "skip or fail"}},
		{`module.exports = {};`, map[string]string{"on_history_lost": "pray"}, "", []string{"MEILISTREAM_JOB_JOB_ON_HISTORY_LOST", "reindex or fail"}},
		{`module.exports = {};`, map[string]string{"index": "a b"}, "", []string{"MEILISTREAM_JOB_JOB_INDEX", "not a Meilisearch index uid"}},
		{`module.exports = {};`, map[string]string{"index": "x__reindex"}, "", []string{"MEILISTREAM_JOB_JOB_INDEX", "__reindex"}},
		{`module.exports = {};`, map[string]string{"primary_key": "a.b"}, "", []string{"MEILISTREAM_JOB_JOB_PRIMARY_KEY", "without dots"}},
		{`module.exports = {};`, map[string]string{"collection": "a$b"}, "", []string{"MEILISTREAM_JOB_JOB_COLLECTION", "not a collection name"}},
		{`module.exports = {};`, map[string]string{"frobnicate": "1"}, "", []string{"MEILISTREAM_JOB_JOB_FROBNICATE", "unknown per-job option", "BATCH_SIZE"}},
		{`module.exports = { mirror: "m" };`, map[string]string{"index": "i"}, "", []string{"MEILISTREAM_JOB_JOB_INDEX", "not an option of a mirror job"}},
		{`module.exports = { index: "i" };`, map[string]string{"mirror": "m"}, "", []string{"MEILISTREAM_JOB_JOB_MIRROR", `the file sets "index"`}},
		{`module.exports = function (doc) { return doc; };`, map[string]string{"mirror": "m"}, "", []string{"MEILISTREAM_JOB_JOB_MIRROR", "monstache-style"}},
		{`module.exports = {};`, nil, strings.Repeat("p", 399), []string{"job.js: MEILISTREAM_INDEX_PREFIX", "not a Meilisearch index uid"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.says, " "), func(t *testing.T) {
			set, err := transform.Load(writeFiles(t, map[string]string{"job.js": tc.src, "ok.js": `module.exports = {};`}),
				transform.Options{Pool: 1, IndexPrefix: tc.prefix, Overrides: map[string]map[string]string{"job": tc.ov}})
			wantErr(t, err, errs.ConfigInvalid, tc.says...)
			if set.Job("job") != nil {
				t.Error("the job loaded")
			}
		})
	}
	// A job by environment alone is named by its variables.
	_, err := transform.Load(t.TempDir(), transform.Options{Pool: 1, Overrides: map[string]map[string]string{"tags": {"reindex": "copy"}}})
	wantErr(t, err, errs.ConfigInvalid, `MEILISTREAM_JOB_TAGS_*: MEILISTREAM_JOB_TAGS_REINDEX: "copy" is not a choice`)
}

func TestAReloadKeepsApplyingOverrides(t *testing.T) {
	dir := writeFiles(t, map[string]string{"ja.js": `module.exports = {};`})
	opts := transform.Options{Pool: 1, IndexPrefix: "p_", Overrides: map[string]map[string]string{"jb": {"index": "ja"}, "ja": {"batch_size": "9"}, "tags": {}}}
	set, err := transform.Load(dir, opts)
	// jb has no file yet: a job by environment alone, writing p_ja too.
	wantErr(t, err, errs.ConfigInvalid, `"p_ja" is also written by job "ja"`)
	if jobNames(set) != "tags" {
		t.Fatalf("jobs %q", jobNames(set))
	}
	if err := os.WriteFile(filepath.Join(dir, "ja.js"), []byte(`module.exports = { index: "other" };`), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if jobNames(next) != "ja,jb,tags" || next.Job("tags") != set.Job("tags") {
		t.Fatalf("jobs %q; tags kept %v", jobNames(next), next.Job("tags") == set.Job("tags"))
	}
	if ja := next.Job("ja"); ja.Index != "p_other" || ja.BatchSize != 9 {
		t.Errorf("ja after the reload: index %q batch %d", ja.Index, ja.BatchSize)
	}
	if jb := next.Job("jb"); jb.Index != "p_ja" {
		t.Errorf("jb: index %q", jb.Index)
	}
	// A file jb.js now takes the overrides of jb, and the running jb keeps
	// its index... as a new job of that file.
	if err := os.WriteFile(filepath.Join(dir, "jb.js"), []byte(`module.exports = { transform(doc) { return doc; } };`), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := next.Reload()
	if err != nil {
		t.Fatal(err)
	}
	jb := third.Job("jb")
	if jb == nil || jb.File == "" || jb.Index != "p_ja" || jb == next.Job("jb") || third.Job("ja") != next.Job("ja") {
		t.Fatalf("jb after its file appeared: %+v", jb)
	}
	// A file that then claims what a running job writes is refused; the
	// running one keeps its previous version, not adjusted twice.
	if err := os.WriteFile(filepath.Join(dir, "jc.js"), []byte(`module.exports = { index: "other" };`), 0o644); err != nil {
		t.Fatal(err)
	}
	fourth, err := third.Reload()
	wantErr(t, err, errs.ConfigInvalid, `jc.js: key "index": "p_other" is also written by job "ja" (ja.js)`)
	if jobNames(fourth) != "ja,jb,tags" || fourth.Job("ja") != third.Job("ja") || fourth.Job("ja").Index != "p_other" {
		t.Fatalf("jobs %q, ja index %q", jobNames(fourth), fourth.Job("ja").Index)
	}
	// Removing jc.js lets nothing change; the refusal is not remembered.
	if err := os.Remove(filepath.Join(dir, "jc.js")); err != nil {
		t.Fatal(err)
	}
	if fifth, err := fourth.Reload(); err != nil || fifth.Job("ja") != third.Job("ja") {
		t.Fatalf("after removing jc.js: %v", err)
	}
}

func TestAConflictResolvedElsewhereStartsTheRefusedJob(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": `module.exports = { index: "shared" };`, "b.js": `module.exports = { index: "shared" };`})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	wantErr(t, err, errs.ConfigInvalid, "is also written")
	// b.js moves away; a.js, unchanged, must run now as on a fresh pod.
	if err := os.WriteFile(filepath.Join(dir, "b.js"), []byte(`module.exports = { index: "b" };`), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	if err != nil || jobNames(next) != "a,b" {
		t.Fatalf("jobs %q, err %v", jobNames(next), err)
	}
}

func TestAMisspeltJobNameInAVariableIsRefusedWithTheJobItMeant(t *testing.T) {
	dir := writeFiles(t, map[string]string{"books.js": `module.exports = {};`, "articles.js": `module.exports = {};`})
	set, err := transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{
		"boks":    {"index": "books2"},
		"artcles": {"batch_size": "10"},
	}})
	wantErr(t, err, errs.ConfigInvalid,
		`MEILISTREAM_JOB_BOKS_INDEX: no transform file is named "boks"; did you mean job "books" (MEILISTREAM_JOB_BOOKS_*)?`,
		`also set MEILISTREAM_JOB_BOKS_COLLECTION`,
		`MEILISTREAM_JOB_ARTCLES_BATCH_SIZE: no transform file is named "artcles"; did you mean job "articles"`)
	if jobNames(set) != "articles,books" {
		t.Fatalf("jobs %q, want the files' only", jobNames(set))
	}
	// Naming the collection says the job is meant; a name far from every
	// file's is a job of its own as before.
	set, err = transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{
		"boks":  {"index": "books2", "collection": "boks"},
		"users": {},
	}})
	if err != nil || jobNames(set) != "articles,boks,books,users" {
		t.Fatalf("jobs %q, err %v", jobNames(set), err)
	}
}
