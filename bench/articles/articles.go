// Package articles generates the article documents the benchmark, the demo
// and the end-to-end scripts seed: about 1 KB of BSON each, shaped like the
// source of examples/transforms/articles.js, deterministic in their number.
package articles

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

var words = strings.Fields(`lorem ipsum dolor sit amet consectetur adipiscing elit sed do
eiusmod tempor incididunt ut labore et dolore magna aliqua enim ad minim veniam quis nostrud
exercitation ullamco laboris nisi aliquip ex ea commodo consequat duis aute irure in
reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint occaecat
search index mongodb stream sidecar lease follow change batch`)

// Article returns the i-th article: _id i (int64), a title, a body of about
// 800 characters, a status ("draft" for one in ten, else "published"), an
// author sub-document, tags, a view count and a publication date.
func Article(i int) bson.D { return WithBody(i, 760) }

// WithBody is Article(i) with a body of at least bodyLen characters (and
// at most one word more): the benchmark's large documents. Article's body
// is WithBody's at 760.
func WithBody(i, bodyLen int) bson.D {
	word := func(k int) string { return words[(i*7+k*13+k*k)%len(words)] }
	var body strings.Builder
	body.Grow(bodyLen + 16)
	for k := 0; body.Len() < bodyLen; k++ {
		body.WriteString(word(k))
		body.WriteByte(' ')
	}
	status := "published"
	if i%10 == 0 {
		status = "draft"
	}
	return bson.D{
		{Key: "_id", Value: int64(i)},
		{Key: "title", Value: fmt.Sprintf("Article %d: %s %s", i, word(1), word(2))},
		{Key: "body", Value: strings.TrimSpace(body.String())},
		{Key: "status", Value: status},
		{Key: "author", Value: bson.D{
			{Key: "name", Value: "Author " + strconv.Itoa(i%97)},
			{Key: "email", Value: fmt.Sprintf("author%d@example.com", i%97)},
		}},
		{Key: "tags", Value: bson.A{word(3), word(4), word(5)}},
		{Key: "views", Value: int64(i * 31 % 10007)},
		{Key: "publishedAt", Value: bson.NewDateTimeFromTime(time.Unix(1700000000+int64(i)*60, 0).UTC())},
	}
}

// Published reports whether Article(i) is published.
func Published(i int) bool { return i%10 != 0 }
