package engine

import (
	"context"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// maxLookupKeys bounds the values of one lookup query's $in.
const maxLookupKeys = 10000

// lookups resolves job's lookups for items (nil when the job declares
// none): for each lookup one query over the batch's keys
// ({foreignField: {$in: keys}}, projected, in _id order), whose results
// are matched to each document as $lookup matches them. A transient error
// is tried again with backoff, a few times.
func (e *Engine) lookups(ctx context.Context, jc jobConfig, items []item) ([]transform.LookupResults, error) {
	job := jc.job
	if len(job.Lookups) == 0 {
		return nil, nil
	}
	out := make([]transform.LookupResults, len(items))
	for i := range out {
		if items[i].doc != nil {
			out[i] = make(transform.LookupResults, len(job.Lookups))
		}
	}
	for li, l := range job.Lookups {
		var foreign []bson.Raw
		for attempt := 0; ; attempt++ {
			var err error
			foreign, err = e.lookupForeign(ctx, l, items)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if attempt >= 10 {
				return nil, errs.Wrap(errs.Failed, job.Name, err, "resolve lookup %s (read %s)", l.Name, l.From)
			}
			e.log.Warn("resolving a lookup failed; trying again", "job", job.Name, "lookup", l.Name, "error", err, "attempt", attempt+1)
			if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
				return nil, err
			}
		}
		order := make(map[*byte]int, len(foreign))
		for i, f := range foreign {
			if len(f) > 0 {
				order[&f[0]] = i
			}
		}
		ix := l.IndexForeign(foreign)
		for i := range items {
			if items[i].doc != nil {
				out[i][li] = l.MatchIndexed(items[i].doc, ix, order)
			}
		}
	}
	return out, nil
}

// lookupForeign reads the documents of l.From that match any key of
// items, in _id order.
func (e *Engine) lookupForeign(ctx context.Context, l transform.Lookup, items []item) ([]bson.Raw, error) {
	seen := map[string]bool{}
	var keys []bson.RawValue
	for i := range items {
		if items[i].doc == nil {
			continue
		}
		for _, k := range l.Keys(items[i].doc) {
			if k.Type == bson.TypeArray {
				continue // its elements are keys too
			}
			if id := transform.IDKey(k); !seen[id] {
				seen[id] = true
				keys = append(keys, k)
			}
		}
	}
	var out []bson.Raw
	coll := e.source.Collection(l.From)
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	if p := l.Projection(); p != nil {
		opts.SetProjection(p)
	}
	for lo := 0; lo < len(keys); lo += maxLookupKeys {
		cur, err := coll.Find(ctx, l.Query(keys[lo:min(lo+maxLookupKeys, len(keys))]), opts)
		if err != nil {
			return nil, err
		}
		for cur.Next(ctx) {
			// A slice of the reply, which the driver never writes again
			// (readFirstBatch).
			out = append(out, cur.Current[:len(cur.Current):len(cur.Current)])
		}
		err = cur.Err()
		_ = cur.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
	}
	if len(keys) > maxLookupKeys {
		// Several queries: back to one _id order.
		sortByID(out)
	}
	return out, nil
}

// sortByID orders documents by _id as MongoDB does across types (IDKey's
// order is not MongoDB's, but a stable one: enough to make the matches of
// a lookup read in several queries come out in one order).
func sortByID(docs []bson.Raw) {
	sort.SliceStable(docs, func(a, b int) bool {
		return transform.IDKey(docs[a].Lookup("_id")) < transform.IDKey(docs[b].Lookup("_id"))
	})
}
