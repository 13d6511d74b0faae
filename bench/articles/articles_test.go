package articles_test

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/bench/articles"
)

// The articles are the benchmark's workload: figures measured on different
// builds compare only while the documents stay byte for byte the same.
func TestArticlesStayTheSame(t *testing.T) {
	h := sha256.New()
	for i := 1; i <= 1000; i++ {
		b, err := bson.Marshal(articles.Article(i))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	const want = "2af5f67663a4e3a164dda456a926daf679bf836dc1efb884442af59104522a35"
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		t.Errorf("the BSON of articles 1..1000 hashes to %s, want %s: the default workload changed, so figures measured before no longer compare", got, want)
	}
}

func TestWithBodyGrowsTheBodyOnly(t *testing.T) {
	small, err := bson.Marshal(articles.Article(7))
	if err != nil {
		t.Fatal(err)
	}
	big, err := bson.Marshal(articles.WithBody(7, 10_000))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(big); n < 10_000 || n > 10_600 {
		t.Errorf("WithBody(7, 10000) is %d bytes of BSON, want about 10 KB", n)
	}
	for _, key := range []string{"_id", "title", "status", "author", "tags", "views", "publishedAt"} {
		if a, b := bson.Raw(small).Lookup(key), bson.Raw(big).Lookup(key); !a.Equal(b) {
			t.Errorf("field %s: Article has %s, WithBody %s", key, a, b)
		}
	}
}
