package transform_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/transform"
)

// plainDoc reports whether a document survives a trip through JavaScript
// unchanged in principle: valid UTF-8 everywhere, no duplicate keys, no NaN
// payloads (JavaScript has one NaN), _id first.
func plainDoc(d bsoncore.Document, top bool) bool {
	els, err := d.Elements()
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	for i, el := range els {
		k := el.Key()
		if seen[k] || !utf8.ValidString(k) || (top && i == 0 && k != "_id") {
			return false
		}
		seen[k] = true
		if !plainValue(el.Value()) {
			return false
		}
	}
	return true
}

func plainValue(v bsoncore.Value) bool {
	switch v.Type {
	case bsoncore.TypeString:
		return utf8.ValidString(v.StringValue())
	case bsoncore.TypeSymbol:
		return utf8.ValidString(v.Symbol())
	case bsoncore.TypeJavaScript:
		return utf8.ValidString(v.JavaScript())
	case bsoncore.TypeRegex:
		p, o := v.Regex()
		return utf8.ValidString(p) && utf8.ValidString(o) && sortedASCII(o)
	case bsoncore.TypeDouble:
		f := v.Double()
		return !math.IsNaN(f) || math.Float64bits(f) == math.Float64bits(math.NaN())
	case bsoncore.TypeBinary:
		_, _, ok := v.BinaryOK() // an old binary's inner length may be wrong
		return ok
	case bsoncore.TypeEmbeddedDocument:
		return plainDoc(v.Data, false)
	case bsoncore.TypeArray:
		// The BSON spec's array keys are "0", "1"... in order; JavaScript
		// keeps only the order, so a mirror writes those keys again.
		els, err := bsoncore.Document(v.Data).Elements()
		if err != nil {
			return false
		}
		for i, el := range els {
			if el.Key() != strconv.Itoa(i) {
				return false
			}
		}
		return plainDoc(v.Data, false)
	}
	return true
}

func sortedASCII(s string) bool {
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1] {
			return false
		}
	}
	return true
}

// FuzzDocument sends arbitrary BSON documents through the search and mirror
// paths: nothing panics, every error is a per-document *errs.Error, the
// JavaScript path writes what the direct path writes, and a mirror copy
// ({...doc}) of a plain document is byte for byte the source.
func FuzzDocument(f *testing.F) {
	for _, d := range []bson.D{richDoc(), mirrorDoc(), {{Key: "_id", Value: 1}}, {{Key: "_id", Value: "x"}, {Key: "a", Value: bson.A{bson.A{}, bson.D{}}}}} {
		raw, _ := bson.Marshal(d)
		f.Add([]byte(raw))
	}
	load := func(src string) *transform.Job {
		set, err := transform.Load(writeFiles(f, map[string]string{"job.js": src}), transform.Options{Pool: 1})
		if err != nil {
			f.Fatal(err)
		}
		return set.Job("job")
	}
	identity := load(`module.exports = {};`)
	spread := load(`module.exports = { transform(doc) { return {...doc}; } };`)
	mirror := load(`module.exports = { mirror: "m", transform(doc) { return {...doc}; } };`)
	mirrorSame := load(`module.exports = { mirror: "m", transform(doc) { return doc; } };`)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		doc := bson.Raw(data)
		if !testutil.WellFormedBSON(data) {
			return
		}
		check := func(res transform.Result, err error) transform.Result {
			if err != nil {
				var e *errs.Error
				if !errors.As(err, &e) {
					t.Fatalf("error %v (%T)", err, err)
				}
				// A malformed value met while JavaScript reads the
				// document is the transform's TypeError.
				readMalformed := e.Code == errs.TransformFailed && strings.Contains(e.Msg, "malformed BSON")
				if e.Code != errs.NotADocument && e.Code != errs.IDMismatch && !readMalformed {
					t.Fatalf("error %v (%T)", err, err)
				}
			}
			return res
		}
		a, errA := identity.Apply(ctx, doc, transform.OpInsert, nil)
		check(a, errA)
		b, errB := spread.Apply(ctx, doc, transform.OpInsert, nil)
		check(b, errB)
		m, errM := mirror.Apply(ctx, doc, transform.OpInsert, nil)
		check(m, errM)
		s, errS := mirrorSame.Apply(ctx, doc, transform.OpInsert, nil)
		check(s, errS)
		if !plainDoc(bsoncore.Document(doc), true) {
			return
		}
		if errs.CodeOf(errA) != errs.CodeOf(errB) {
			t.Fatalf("direct: %v; through JavaScript: %v", errA, errB)
		}
		if errA == nil && !reflect.DeepEqual(a.Doc, b.Doc) {
			t.Fatalf("direct %#v\nthrough JavaScript %#v", a.Doc, b.Doc)
		}
		// JavaScript puts keys that are array indexes ("0", "7") first in
		// an object it builds, so only the pass-through keeps their order.
		if errM == nil && !indexKeys(doc) && !bytes.Equal(m.Raw, doc) {
			t.Fatalf("mirror copy changed the document:\n got %v\nwant %v", m.Raw, doc)
		}
		if errS == nil && !bytes.Equal(s.Raw, doc) {
			t.Fatalf("mirror changed the document:\n got %v\nwant %v", s.Raw, doc)
		}
	})
}

func indexKeys(d bson.Raw) bool {
	els, _ := d.Elements()
	for _, el := range els {
		k := el.Key()
		if k != "" && strings.Trim(k, "0123456789") == "" && (k == "0" || k[0] != '0') {
			return true
		}
	}
	return false
}
