package engine

import (
	"context"
	"errors"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// maxLookupKeys bounds the values of one lookup query's $in.
const maxLookupKeys = 10000

// What a lookup may read. A related document matched by many (a tag on a
// million articles, read the other way round: an article's million
// comments) must not take the process's memory: a batch's read stops at
// maxLookupBatchBytes and is done again for each half of the batch, down
// to one document; a document whose lookups match more than
// maxLookupDocBytes (MongoDB's own bound on a $lookup's result, a 16 MiB
// document) is a per-document error, recorded and retried like any other.
var (
	maxLookupBatchBytes = 64 << 20
	maxLookupDocBytes   = 16 << 20
)

// lookups resolves job's lookups for items (nil when the job declares
// none): for each lookup one query over the batch's keys
// ({foreignField: {$in: keys}}, projected, in _id order), whose results
// are matched to each document as $lookup matches them. A transient error
// is tried again with backoff, a few times. An item whose lookups match
// more than a document may hold gets its lookupErr set.
func (e *Engine) lookups(ctx context.Context, jc jobConfig, items []item) ([]transform.LookupResults, error) {
	job := jc.job
	if len(job.Lookups) == 0 {
		return nil, nil
	}
	out := make([]transform.LookupResults, len(items))
	var idx []int
	for i := range items {
		items[i].lookupErr = nil
		if items[i].doc != nil {
			out[i] = make(transform.LookupResults, len(job.Lookups))
			idx = append(idx, i)
		}
	}
	for li, l := range job.Lookups {
		if err := e.resolveLookup(ctx, jc, li, l, items, idx, out); err != nil {
			return nil, err
		}
	}
	for _, i := range idx {
		if items[i].lookupErr != nil {
			out[i] = nil
			continue
		}
		n := 0
		for _, matches := range out[i] {
			for _, m := range matches {
				n += len(m)
			}
		}
		if n > maxLookupDocBytes {
			items[i].lookupErr = errs.New(errs.NotADocument, job.Name,
				"its lookups matched %d bytes of documents, more than the %d a document's lookups may hold (as MongoDB's $lookup, whose result must fit in a 16 MiB document): project fewer fields, or look up from the other side",
				n, maxLookupDocBytes)
			out[i] = nil
		}
	}
	return out, nil
}

// resolveLookup resolves lookup li (l) for the items at idx into out,
// halving idx while the matches of the whole would be more than
// maxLookupBatchBytes.
func (e *Engine) resolveLookup(ctx context.Context, jc jobConfig, li int, l transform.Lookup, items []item, idx []int, out []transform.LookupResults) error {
	if len(idx) == 0 {
		return nil
	}
	var foreign []bson.Raw
	for attempt := 0; ; attempt++ {
		var err error
		foreign, err = e.lookupForeign(ctx, l, items, idx)
		if err == nil {
			break
		}
		if errors.Is(err, errLookupTooLarge) {
			if len(idx) == 1 {
				items[idx[0]].lookupErr = errs.New(errs.NotADocument, jc.job.Name,
					"lookup %s matched more than %d bytes of %s's documents, more than a document's lookups may hold: project fewer fields, or look up from the other side",
					l.Name, maxLookupBatchBytes, l.From)
				return nil
			}
			half := len(idx) / 2
			if err := e.resolveLookup(ctx, jc, li, l, items, idx[:half], out); err != nil {
				return err
			}
			return e.resolveLookup(ctx, jc, li, l, items, idx[half:], out)
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if attempt >= 10 {
			return errs.Wrap(errs.Failed, jc.job.Name, err, "resolve lookup %s (read %s)", l.Name, l.From)
		}
		e.log.Warn("resolving a lookup failed; trying again", "job", jc.job.Name, "lookup", l.Name, "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(jc.Config, attempt)); err != nil {
			return err
		}
	}
	order := make(map[*byte]int, len(foreign))
	for i, f := range foreign {
		if len(f) > 0 {
			order[&f[0]] = i
		}
	}
	ix := l.IndexForeign(foreign)
	for _, i := range idx {
		if items[i].lookupErr == nil {
			out[i][li] = l.MatchIndexed(items[i].doc, ix, order)
		}
	}
	return nil
}

// errLookupTooLarge: a lookup's read passed maxLookupBatchBytes.
var errLookupTooLarge = errors.New("lookup read too large")

// lookupForeign reads the documents of l.From that match any key of the
// items at idx, in _id order; errLookupTooLarge when they pass
// maxLookupBatchBytes.
func (e *Engine) lookupForeign(ctx context.Context, l transform.Lookup, items []item, idx []int) ([]bson.Raw, error) {
	seen := map[string]bool{}
	var keys []bson.RawValue
	for _, i := range idx {
		if items[i].doc == nil || items[i].lookupErr != nil {
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
	size := 0
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
			size += len(cur.Current)
			if size > maxLookupBatchBytes {
				_ = cur.Close(context.WithoutCancel(ctx))
				return nil, errLookupTooLarge
			}
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
