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
		"fields":            {"title, body,tags", "title,a.b", `"a.b" is not a top-level field name (no dots)`},
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
