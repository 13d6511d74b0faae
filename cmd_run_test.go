package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/transform"
)

func TestJobEnv(t *testing.T) {
	dir := t.TempDir()
	src := `module.exports = { transform(doc) { return { title: doc.title }; } };`
	for _, f := range []string{"articles.js", "my-books.js"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plainSet, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]string{}
	for _, j := range plainSet.Jobs() {
		plain[j.Name] = j.Hash
	}
	cfg := config.Default()
	cfg.Transforms = dir
	cfg.TransformPool = 1
	cfg.IndexPrefix = "staging_"
	cfg.Jobs = map[string]map[string]string{
		"articles": {"index": "articles_v2", "batch_size": "50"},
		"my_books": {"primary_key": "bookId"},
		"users":    {"mirror": "users_public", "collection": "accounts"},
		"tags":     {},
	}
	set, err := loadJobs(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	jobs := set.Jobs()
	by := map[string]*transform.Job{}
	for _, j := range jobs {
		by[j.Name] = j
	}
	if len(jobs) != 4 {
		t.Fatalf("jobs = %d, want 4 (2 files, 2 by environment alone)", len(jobs))
	}
	t.Run("overrides apply and the prefix goes before the index", func(t *testing.T) {
		a := by["articles"]
		if a.Index != "staging_articles_v2" || a.BatchSize != 50 || a.Hash == plain["articles"] {
			t.Errorf("articles = index %q batch %d hash changed %v", a.Index, a.BatchSize, a.Hash != plain["articles"])
		}
		if b := by["my-books"]; b.PrimaryKey != "bookId" || b.Index != "staging_my-books" {
			t.Errorf("my-books = pk %q index %q", b.PrimaryKey, b.Index)
		}
	})
	t.Run("jobs declared by environment alone", func(t *testing.T) {
		u := by["users"]
		if u == nil || u.Kind != jobdef.Mirror || u.Mirror != "users_public" || u.Collection != "accounts" || u.Index != "" {
			t.Errorf("users = %+v, want a mirror of accounts into users_public", u)
		}
		g := by["tags"]
		if g == nil || g.Kind != jobdef.Search || g.Collection != "tags" || g.Index != "staging_tags" || g.PrimaryKey != "id" || g.Hash == "" {
			t.Errorf("tags = %+v, want a search job with defaults", g)
		}
	})
	t.Run("a reload keeps adjusted jobs as they are", func(t *testing.T) {
		next, err := set.Reload()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range next.Jobs() {
			if j != by[j.Name] {
				t.Errorf("job %s built anew by a reload of unchanged files", j.Name)
			}
		}
		if by["articles"].Index != "staging_articles_v2" {
			t.Errorf("adjusted twice: %q", by["articles"].Index)
		}
	})
	t.Run("an unreadable folder runs the jobs declared by environment", func(t *testing.T) {
		c := cfg
		c.Transforms = filepath.Join(dir, "missing")
		set, err := loadJobs(c, hclog.NewNullLogger())
		// Every override key is then a job of its own, files' included.
		if err != nil || set == nil || len(set.Jobs()) != 4 || set.Job("users") == nil || set.Job("my_books") == nil {
			t.Fatalf("set %v err %v, want articles, my_books, tags and users", set.Jobs(), err)
		}
	})
}

// The engine gets the configured batch and page sizes, most of the
// shutdown timeout to drain, and refreshes presence on the lease's cadence.
func TestEngineConfigCarriesTheVariables(t *testing.T) {
	cfg := config.Default()
	cfg.Lease = 15 * time.Second
	cfg.BatchSize, cfg.PageSize = 50, 300
	cfg.ShutdownTimeout = 8 * time.Second
	ec := engineConfig(cfg)
	if ec.PresenceInterval != 5*time.Second || ec.BatchSize != 50 || ec.PageSize != 300 || ec.DrainTimeout != 6*time.Second {
		t.Fatalf("engine config %+v", ec)
	}
}

func TestReindexFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		f    reindexFlags
		mode string
		bad  bool
	}{
		{reindexFlags{timeout: time.Hour}, "", false},
		{reindexFlags{inplace: true, timeout: time.Hour}, "inplace", false},
		{reindexFlags{swap: true, timeout: time.Hour}, "swap", false},
		{reindexFlags{inplace: true, swap: true, timeout: time.Hour}, "inplace", true},
		{reindexFlags{timeout: 0}, "", true},
	} {
		if err := tc.f.check(); (err != nil) != tc.bad || tc.f.mode() != tc.mode {
			t.Errorf("%+v: check %v, mode %q; want bad %v, mode %q", tc.f, err, tc.f.mode(), tc.bad, tc.mode)
		}
	}
}
