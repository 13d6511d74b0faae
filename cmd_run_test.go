package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/sidecar"
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
	load := func() []*transform.Job {
		set, err := transform.Load(dir, transform.Options{Pool: 1})
		if err != nil {
			t.Fatal(err)
		}
		return set.Jobs()
	}
	plain := map[string]string{}
	for _, j := range load() {
		plain[j.Name] = j.Hash
	}
	cfg := sidecar.Default()
	cfg.IndexPrefix = "staging_"
	cfg.Jobs = map[string]map[string]string{
		"articles": {"index": "articles_v2", "batch_size": "50"},
		"my_books": {"primary_key": "bookId"},
		"users":    {"mirror": "users_public", "collection": "accounts"},
		"tags":     {},
	}
	env := newJobEnv(cfg, hclog.NewNullLogger())
	jobs := env.jobs(load())
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
		if u == nil || u.Kind != transform.Mirror || u.Mirror != "users_public" || u.Collection != "accounts" || u.Index != "" {
			t.Errorf("users = %+v, want a mirror of accounts into users_public", u)
		}
		g := by["tags"]
		if g == nil || g.Kind != transform.Search || g.Collection != "tags" || g.Index != "staging_tags" || g.PrimaryKey != "id" || g.Hash == "" {
			t.Errorf("tags = %+v, want a search job with defaults", g)
		}
	})
	t.Run("a reload keeps adjusted jobs as they are", func(t *testing.T) {
		again := env.jobs(jobs[:2])
		if again[0].Index != by[again[0].Name].Index || by["articles"].Index != "staging_articles_v2" {
			t.Errorf("adjusted twice: %q", by["articles"].Index)
		}
		found := false
		for _, j := range env.jobs(load()) {
			found = found || j == by["tags"]
		}
		if !found {
			t.Error("a job by environment alone is built anew on every reload")
		}
	})
}
