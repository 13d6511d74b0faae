// Package synccheck compares a Meilisearch index with what a job should
// have made of its collection: the index must hold exactly
// transform(collection), minus the documents recorded in the errors
// collection (left out). It works against
// the test servers and real ones alike (it only uses the drivers), so the
// engine's tests and the testscript scenarios share it.
package synccheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/clip"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// Docs maps a document's primary key (its JSON text, e.g. `"a1"` or `5`) to
// the document decoded from JSON with numbers as json.Number.
type Docs map[string]map[string]any

// Expected runs job's transform (operation "reindex") over every document of
// coll (trimmed to the job's fields, when it declares them, as the job
// reads them) and returns what the index should hold. Documents whose _id is in
// exclude (source _ids, e.g. from LeftOut) and documents the transform
// refuses are not expected; neither are those it keeps out.
func Expected(ctx context.Context, coll *mongo.Collection, job *transform.Job, exclude []bson.RawValue) (Docs, error) {
	skip := map[string]bool{}
	for _, id := range exclude {
		skip[string(append([]byte{byte(id.Type)}, id.Value...))] = true
	}
	pk := job.PrimaryKey
	if pk == "" {
		pk = jobdef.DefaultPrimaryKey
	}
	// A job declaring its fields sees its documents trimmed to them (and
	// _id) wherever it reads them.
	opts := options.Find()
	if fields := job.StreamFields(); fields != nil {
		p := bson.D{{Key: "_id", Value: 1}}
		for _, f := range fields {
			p = append(p, bson.E{Key: f, Value: 1})
		}
		opts.SetProjection(p)
	}
	cur, err := coll.Find(ctx, bson.D{}, opts)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	out := Docs{}
	for cur.Next(ctx) {
		id := cur.Current.Lookup("_id")
		if skip[string(append([]byte{byte(id.Type)}, id.Value...))] {
			continue
		}
		lk, err := Lookups(ctx, coll.Database(), job, cur.Current)
		if err != nil {
			return nil, err
		}
		r, _, err := job.ApplyWith(ctx, nil, cur.Current, transform.OpReindex, nil, lk)
		if err != nil || r.Skip {
			continue
		}
		d, key, err := decode(r.JSON, pk)
		if err != nil {
			return nil, err
		}
		out[key] = d
	}
	return out, cur.Err()
}

// Lookups resolves job's lookups for doc on its own, one query per lookup
// for this document (the server matches, in its order), apart from how the
// engine resolves them for a whole batch: a check of the engine's results.
func Lookups(ctx context.Context, db *mongo.Database, job *transform.Job, doc bson.Raw) (jobdef.LookupResults, error) {
	if len(job.Lookups) == 0 {
		return nil, nil
	}
	out := make(jobdef.LookupResults, len(job.Lookups))
	for i, l := range job.Lookups {
		opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
		if p := l.Projection(); p != nil {
			opts.SetProjection(p)
		}
		var keys []bson.RawValue
		for _, k := range l.Keys(doc) {
			if k.Type != bson.TypeArray {
				keys = append(keys, k)
			}
		}
		in := db
		if l.Database != "" && l.Database != db.Name() {
			in = db.Client().Database(l.Database)
		}
		cur, err := in.Collection(l.From).Find(ctx, l.Query(keys), opts)
		if err != nil {
			return nil, fmt.Errorf("resolve lookup %s: %w", l.Name, err)
		}
		for cur.Next(ctx) {
			out[i] = append(out[i], append(bson.Raw(nil), cur.Current...))
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("resolve lookup %s: %w", l.Name, err)
		}
	}
	return out, nil
}

// LeftOut returns the source _ids recorded for job in the errors collection.
func LeftOut(ctx context.Context, errorsColl *mongo.Collection, job string) ([]bson.RawValue, error) {
	if errorsColl == nil {
		return nil, nil
	}
	cur, err := errorsColl.Find(ctx, bson.D{{Key: "job", Value: job}})
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	var ids []bson.RawValue
	for cur.Next(ctx) {
		v, err := cur.Current.LookupErr("sourceId")
		if err != nil {
			continue
		}
		ids = append(ids, bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)})
	}
	return ids, cur.Err()
}

// Actual reads every document of index uid (nil, no error, when the index
// does not exist).
func Actual(ctx context.Context, client meilisearch.ServiceManager, uid, pk string) (Docs, error) {
	if pk == "" {
		pk = jobdef.DefaultPrimaryKey
	}
	out := Docs{}
	idx := client.Index(uid)
	const page = 1000
	for off := int64(0); ; off += page {
		var res meilisearch.DocumentsResult
		if err := idx.GetDocuments(ctx, &meilisearch.DocumentsQuery{Offset: off, Limit: page}, &res); err != nil {
			var me *meilisearch.Error
			if errors.As(err, &me) && me.APIError.Code == "index_not_found" {
				return nil, nil
			}
			return nil, fmt.Errorf("read index %s: %w", uid, err)
		}
		for _, hit := range res.Results {
			b, err := json.Marshal(hit)
			if err != nil {
				return nil, err
			}
			d, key, err := decode(b, pk)
			if err != nil {
				return nil, err
			}
			out[key] = d
		}
		if int64(len(res.Results)) < page {
			return out, nil
		}
	}
}

// Diff describes how actual differs from expected (at most 10 lines and a
// count), or returns "" when they are equal.
func Diff(expected, actual Docs) string {
	var lines []string
	n := 0
	keys := make([]string, 0, len(expected)+len(actual))
	for k := range expected {
		keys = append(keys, k)
	}
	for k := range actual {
		if _, ok := expected[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e, inE := expected[k]
		a, inA := actual[k]
		var line string
		switch {
		case inE && !inA:
			line = "missing " + k
		case !inE && inA:
			line = "unexpected " + k
		case !same(e, a):
			eb, _ := json.Marshal(e)
			ab, _ := json.Marshal(a)
			line = fmt.Sprintf("differs %s: want %s, have %s", k, short(eb), short(ab))
		default:
			continue
		}
		n++
		if len(lines) < 10 {
			lines = append(lines, line)
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d differences (expected %d documents, index has %d):\n  %s", n, len(expected), len(actual), strings.Join(lines, "\n  "))
}

// Check compares index uid with transform(coll) minus the job's recorded
// errors once, returning Diff's description ("" when equal).
func Check(ctx context.Context, coll, errorsColl *mongo.Collection, job *transform.Job, client meilisearch.ServiceManager, uid string) (string, error) {
	left, err := LeftOut(ctx, errorsColl, job.Name)
	if err != nil {
		return "", err
	}
	exp, err := Expected(ctx, coll, job, left)
	if err != nil {
		return "", err
	}
	act, err := Actual(ctx, client, uid, job.PrimaryKey)
	if err != nil {
		return "", err
	}
	return Diff(exp, act), nil
}

// Eventually repeats Check every 50ms until it reports no difference or
// timeout passes; then it returns the last difference as an error.
func Eventually(ctx context.Context, timeout time.Duration, coll, errorsColl *mongo.Collection, job *transform.Job, client meilisearch.ServiceManager, uid string) error {
	deadline := time.Now().Add(timeout)
	for {
		d, err := Check(ctx, coll, errorsColl, job, client, uid)
		if err == nil && d == "" {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("index %s does not hold transform(%s) after %s: %s", uid, coll.Name(), timeout, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// same compares decoded JSON values; numbers are equal when their text is
// or their value is (a server may render 1.50 as 1.5).
func same(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !same(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		fx, err1 := x.Float64()
		fy, err2 := y.Float64()
		return err1 == nil && err2 == nil && fx == fy
	}
	return reflect.DeepEqual(a, b)
}

func decode(b []byte, pk string) (map[string]any, string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		return nil, "", err
	}
	k, err := json.Marshal(d[pk])
	if err != nil {
		return nil, "", err
	}
	return d, string(k), nil
}

// short is a document's JSON for a difference's line: at most 200 bytes,
// never cut inside a UTF-8 character.
func short(b []byte) string { return clip.Text(string(b), 200, "...") }
