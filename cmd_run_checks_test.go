package main

import (
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/transform"
)

func TestJobProblem(t *testing.T) {
	base := config.Default()
	base.MongoDBURI = "mongodb://h1:27017,h2:27017/shop"
	base.MongoDBDatabase = "shop"
	base.MeiliURL = "http://meili:7700"
	base.ReplicaURI = "mongodb://H2:27017,h1:27017/shop"
	base.ReplicaDatabase = "shop"
	search := func(coll string) *transform.Job {
		return &transform.Job{Job: jobdef.Job{Name: "j", Kind: jobdef.Search, Collection: coll, Index: "j"}}
	}
	mirror := func(coll, to string) *transform.Job {
		return &transform.Job{Job: jobdef.Job{Name: "j", Kind: jobdef.Mirror, Collection: coll, Mirror: to}}
	}
	tests := []struct {
		name    string
		edit    func(c *config.Config)
		job     *transform.Job
		setting string // "" for no problem
	}{
		{"a search job with a Meilisearch runs", nil, search("books"), ""},
		{"a search job without MEILI_URL is refused", func(c *config.Config) { c.MeiliURL = "" }, search("books"), "MEILISTREAM_MEILI_URL"},
		{"a mirror job without REPLICA_URI is refused", func(c *config.Config) { c.ReplicaURI = "" }, mirror("books", "copy"), "MEILISTREAM_REPLICA_URI"},
		{"a job on the state collection is refused", nil, search("meilistream"), "MEILISTREAM_STATE_COLLECTION"},
		{"a job on the errors collection is refused", nil, search("meilistream_errors"), "MEILISTREAM_STATE_COLLECTION"},
		{"a job on another state collection's name runs", func(c *config.Config) { c.StateCollection = "ms" }, search("meilistream"), ""},
		{"a mirror into its own source on the same servers is refused", nil, mirror("books", "books"), "MEILISTREAM_REPLICA_DATABASE"},
		{"a mirror into the state collection on the same servers is refused", nil, mirror("books", "meilistream"), "MEILISTREAM_REPLICA_DATABASE"},
		{"a mirror into another database runs", func(c *config.Config) { c.ReplicaDatabase = "copy" }, mirror("books", "books"), ""},
		{"a mirror into other servers runs", func(c *config.Config) { c.ReplicaURI = "mongodb://r1/shop" }, mirror("books", "books"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			err := jobProblem(cfg, tt.job)
			switch {
			case tt.setting == "" && err != nil:
				t.Errorf("jobProblem: %v, want none", err)
			case tt.setting != "" && (errs.CodeOf(err) != errs.ConfigInvalid || errs.SettingOf(err) != tt.setting || errs.JobOf(err) != "j"):
				t.Errorf("jobProblem: %v (setting %q), want CONFIG_INVALID of job j naming %s", err, errs.SettingOf(err), tt.setting)
			case err != nil && !strings.Contains(err.Error(), tt.setting):
				t.Errorf("message %q does not name %s", err.Error(), tt.setting)
			}
		})
	}
}
