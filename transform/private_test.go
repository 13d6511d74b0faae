package transform_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// private are the sidecar's own collections as meilistream run names them.
var private = map[string]string{
	"meilistream":        "meilistream's state collection (MEILISTREAM_STATE_COLLECTION)",
	"meilistream_errors": "meilistream's errors collection (MEILISTREAM_STATE_COLLECTION with _errors)",
}

func TestAReadOfTheSidecarsOwnCollectionsFailsTheDocument(t *testing.T) {
	lease := marshal(t, bson.D{{Key: "_id", Value: bson.D{{Key: "lease", Value: "job"}}}, {Key: "holder", Value: "pod-1"}, {Key: "nonce", Value: "n"}})
	cases := []struct {
		name, call, names string
	}{
		{"findOne of the state collection", `findOne({}, {collection: "meilistream"})`, "app.meilistream"},
		{"findId of the errors collection", `findId(1, {collection: "meilistream_errors"})`, "app.meilistream_errors"},
		{"find with the database given", `find({}, {database: "app", collection: "meilistream", limit: 1})`, "app.meilistream"},
		{"a $lookup of a pipe", `pipe([{$lookup: {from: "meilistream", localField: "a", foreignField: "_id", as: "x"}}])`, "app.meilistream"},
		{"a $unionWith by name", `pipe([{$unionWith: "meilistream_errors"}])`, "app.meilistream_errors"},
		{"a $unionWith in a $facet's $lookup sub-pipeline", `pipe([{$facet: {f: [{$lookup: {from: "users", pipeline: [{$unionWith: {coll: "meilistream", pipeline: []}}], as: "u"}}]}}])`, "app.meilistream"},
		{"a $graphLookup", `pipe([{$graphLookup: {from: "meilistream", startWith: "$a", connectFromField: "a", connectToField: "_id", as: "g"}}])`, "app.meilistream"},
		{"a $lookup naming {db, coll}", `pipe([{$lookup: {from: {db: "app", coll: "meilistream"}, pipeline: [], as: "x"}}])`, "app.meilistream"},
		{"from a pipe on another collection", `pipe([{$lookup: {from: "meilistream", pipeline: [], as: "x"}}], {collection: "users"})`, "app.meilistream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &fakeReader{docs: []bson.Raw{lease}}
			// The script catches what is thrown: the document fails anyway.
			j := loadJob(t, `module.exports = function (doc) { var got = null; try { got = `+c.call+`; } catch (e) {} return {t: doc.title, got: got}; }`,
				transform.Options{Database: "app", Reader: r, Private: private})
			res, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}}), transform.OpInsert, nil)
			if errs.CodeOf(err) != errs.TransformFailed || !strings.Contains(err.Error(), c.names) || !strings.Contains(err.Error(), "no transform may read") {
				t.Fatalf("got %v, err %v; want TRANSFORM_FAILED naming %s", res.Doc, err, c.names)
			}
			if len(r.calls) != 0 {
				t.Errorf("MongoDB was read: %+v", r.calls)
			}
		})
	}
	// The same names in another database are other collections, and other
	// collections of the job's database are read as before.
	for _, call := range []string{`findOne({}, {database: "other", collection: "meilistream"})`, `findOne({}, {collection: "meilistream_archive"})`,
		`pipe([{$lookup: {from: "users", localField: "a", foreignField: "_id", as: "x"}}])`} {
		r := &fakeReader{}
		j := loadJob(t, `module.exports = function (doc) { `+call+`; return {t: doc.title}; }`, transform.Options{Database: "app", Reader: r, Private: private})
		if _, err := j.Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}}), transform.OpInsert, nil); err != nil || len(r.calls) != 1 {
			t.Errorf("%s: err %v, %d reads; want it read", call, err, len(r.calls))
		}
	}
}

func TestAJobDeclaringAReadOfTheSidecarsOwnCollectionsIsRefused(t *testing.T) {
	for name, c := range map[string]struct{ src, names string }{
		"a lookup from the state collection": {`module.exports = { lookups: { lease: { from: "meilistream", localField: "a", foreignField: "_id" } } };`, `lookup "lease": from "meilistream"`},
		"a relate on the errors collection":  {`module.exports = { relate: [{namespace: "app.meilistream_errors", srcField: "doc", matchField: "_id"}] };`, `namespace "meilistream_errors"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := transform.Load(writeFiles(t, map[string]string{"job.js": c.src}), transform.Options{Pool: 1, Database: "app", Private: private})
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != errs.ConfigInvalid || e.Job != "job" || !strings.Contains(err.Error(), c.names) || !strings.Contains(err.Error(), "no job may read") {
				t.Fatalf("load: %v; want CONFIG_INVALID naming %s", err, c.names)
			}
		})
	}
}
