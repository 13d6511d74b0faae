//go:build floor

package transform

import (
	"context"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// The floor build (go build -tags floor) measures what the work itself
// costs: the same engine, reads, BSON, JSON and HTTP, with the transform
// of examples/transforms/articles.js compiled in Go in place of goja, so
// the bench (go run ./bench -floor) can put the real sidecar beside it. It
// is a yardstick, never a feature: the binary users run is built without
// the tag, and this file is not in it. A job whose file has a transform
// function gets the articles logic whatever the function says; one
// without stays the identity, as in the real build.
const floorBuild = true

// floorMaxBody is articles.js's MAX_BODY, in UTF-16 code units as
// JavaScript counts a string's length.
const floorMaxBody = 500

// floorReads are the fields articles.js reads of a published article, in
// the order it reads them; a draft's call reads only the status.
var floorReads = []string{"status", "body", "title", "summary", "tags", "author", "publishedAt", "updatedAt"}

// floorEach is ApplyEach's series of calls with the Go transform.
func (j *Job) floorEach(ctx context.Context, dst []byte, calls []prepared, out []Outcome) []byte {
	v, err := j.rt.pool.get(ctx)
	if err != nil {
		for k := range calls {
			if !calls[k].skip {
				out[k] = Outcome{Err: errs.WithJob(j.Name, err)}
			}
		}
		return dst
	}
	hasFn := v.fn != nil
	j.rt.pool.put(v)
	for k := range calls {
		c := &calls[k]
		if c.skip {
			continue
		}
		var (
			res Result
			e   error
		)
		if hasFn {
			res, dst, e = j.floorArticle(dst, c)
		} else {
			res, dst, e = j.identityGuarded(dst, c.doc, c.idv, c.res)
		}
		out[k] = Outcome{Result: res, Err: e}
	}
	return dst
}

// floorArticle is articles.js's transform on one document, written as
// the JSON Meilisearch receives, through the same writer as a result of
// goja.
func (j *Job) floorArticle(dst []byte, c *prepared) (Result, []byte, error) {
	doc := bsoncore.Document(c.doc)
	res := c.res
	status := doc.Lookup("status")
	if s, ok := status.StringValueOK(); !ok || s != "published" {
		if c.track {
			res.Reads = &Reads{Fields: floorReads[:1]}
		}
		res.Skip = true
		return res, dst, nil
	}
	if c.track {
		res.Reads = &Reads{Fields: floorReads}
	}
	o := j.newOutConv(nil, dst, c.idv, res.ID)
	if err := o.open('{'); err != nil {
		return Result{}, dst, err
	}
	n := 0
	member := func(k string, write func() (bool, error)) error { return o.member(&n, k, write) }
	bsonMember := func(k string, val bsoncore.Value) error {
		return member(k, func() (bool, error) {
			if val.Type == 0 {
				return false, nil // undefined: left out
			}
			return o.bsonValue(val)
		})
	}
	str := func(k, s string) error {
		return member(k, func() (bool, error) { o.buf = jobdef.AppendJSONString(o.buf, s); return true, nil })
	}
	if err := bsonMember("title", doc.Lookup("title")); err != nil {
		return Result{}, dst, err
	}
	summary := doc.Lookup("summary")
	if floorTruthy(summary) {
		if err := bsonMember("summary", summary); err != nil {
			return Result{}, dst, err
		}
	} else if err := str("summary", ""); err != nil {
		return Result{}, dst, err
	}
	body, _ := doc.Lookup("body").StringValueOK()
	if err := str("body", floorCut(body)); err != nil {
		return Result{}, dst, err
	}
	err := member("tags", func() (bool, error) {
		o.buf = append(o.buf, '[')
		tags, ok := doc.Lookup("tags").ArrayOK()
		if ok {
			vals, _ := tags.Values()
			var seen []string
			for _, t := range vals {
				s, ok := t.StringValueOK()
				if !ok {
					continue
				}
				s = strings.ToLower(strings.TrimSpace(s))
				if s == "" || slices.Contains(seen, s) {
					continue
				}
				if len(seen) > 0 {
					o.buf = append(o.buf, ',')
				}
				seen = append(seen, s)
				o.buf = jobdef.AppendJSONString(o.buf, s)
			}
		}
		o.buf = append(o.buf, ']')
		return true, nil
	})
	if err != nil {
		return Result{}, dst, err
	}
	author := doc.Lookup("author")
	if floorTruthy(author) {
		var name bsoncore.Value
		if d, ok := author.DocumentOK(); ok {
			name = d.Lookup("name")
		}
		err = bsonMember("author", name)
	} else {
		err = member("author", func() (bool, error) { o.buf = append(o.buf, "null"...); return true, nil })
	}
	if err != nil {
		return Result{}, dst, err
	}
	if err := bsonMember("publishedAt", doc.Lookup("publishedAt")); err != nil {
		return Result{}, dst, err
	}
	if err := bsonMember("updatedAt", doc.Lookup("updatedAt")); err != nil {
		return Result{}, dst, err
	}
	if err := o.endObject(n); err != nil {
		return Result{}, dst, err
	}
	if err := o.room(0); err != nil {
		return Result{}, dst, err
	}
	return o.result(res)
}

// floorTruthy is JavaScript's truthiness for the BSON values the articles
// carry.
func floorTruthy(v bsoncore.Value) bool {
	switch v.Type {
	case 0, bsoncore.TypeNull, bsoncore.TypeUndefined:
		return false
	case bsoncore.TypeString:
		return v.StringValue() != ""
	case bsoncore.TypeBoolean:
		return v.Boolean()
	case bsoncore.TypeInt32:
		return v.Int32() != 0
	case bsoncore.TypeInt64:
		return v.Int64() != 0
	case bsoncore.TypeDouble:
		f := v.Double()
		return f != 0 && f == f
	}
	return true
}

// floorCut is body.slice(0, MAX_BODY) + "..." when the body is longer
// than MAX_BODY UTF-16 code units.
func floorCut(s string) string {
	if len(s) <= floorMaxBody { // never more code units than bytes
		return s
	}
	units := 0
	for i, r := range s {
		w := utf16.RuneLen(r)
		if w < 0 {
			w = 1
		}
		if units+w > floorMaxBody {
			if units < floorMaxBody { // half of a surrogate pair
				return s[:i] + string(utf8.RuneError) + "..."
			}
			return s[:i] + "..."
		}
		units += w
	}
	return s
}
