package main

import (
	"os"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/transform"
)

// -lookups derives its transform from the articles example: if the example
// changes where the author comes from, the derivation must fail rather
// than measure a transform without its lookup.
func TestWithLookupDerivesTheExample(t *testing.T) {
	src, err := os.ReadFile("../examples/transforms/articles.js")
	if err != nil {
		t.Fatal(err)
	}
	looked, err := withLookup(src)
	if err != nil {
		t.Fatal(err)
	}
	job, err := transform.LoadFile("articles.js", looked, transform.Options{})
	if err != nil {
		t.Fatalf("the derived transform does not load: %v\n%s", err, looked)
	}
	if len(job.Lookups) != 1 {
		t.Fatalf("the derived transform declares %d lookups, want 1", len(job.Lookups))
	}
	if l := job.Lookups[0]; l.Name != "author" || l.From != "users" || l.LocalField != "authorId" || l.ForeignField != "_id" {
		t.Errorf("the lookup is %+v, want author from users by authorId = _id", l)
	}
	if !strings.Contains(string(looked), lookedUpAuthor) || strings.Contains(string(looked), embeddedAuthor) {
		t.Errorf("the derived transform still takes the author from the article:\n%s", looked)
	}

	other := strings.Replace(string(src), embeddedAuthor, "author: doc.writer,", 1)
	if _, err := withLookup([]byte(other)); err == nil {
		t.Error("a transform without the example's author line was derived anyway")
	}
}

// Past the renamed user's, each reindex part of consecutive articles looks
// up as many distinct users as it has articles (up to -users), and the
// renamed user has exactly -fanout articles.
func TestAuthorIDSpreadsTheJoin(t *testing.T) {
	const fanout, users, docs, part = 2500, 10000, 20000, 1000
	renamed := 0
	for i := 1; i <= docs; i++ {
		if authorID(i, fanout, users) == renamedUser {
			renamed++
		}
	}
	if renamed != fanout {
		t.Errorf("user %d wrote %d articles, want %d", renamedUser, renamed, fanout)
	}
	for from := fanout + 1; from+part <= docs; from += part {
		seen := map[int64]bool{}
		for i := from; i < from+part; i++ {
			seen[authorID(i, fanout, users)] = true
		}
		if len(seen) != part {
			t.Fatalf("articles %d..%d have %d distinct authors, want %d", from, from+part-1, len(seen), part)
		}
	}
}
