package engine

import (
	"context"
	"errors"
	"sort"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

// maxLookupKeys bounds the values of one lookup query's $in.
const maxLookupKeys = 10000

// Bounds are what a lookup may read. A related document matched by many
// (a tag on a million articles, read the other way round: an article's
// million comments) must not take the process's memory: a batch's read
// stops at Batch bytes and is done again for each half of the batch, down
// to one document; a document whose lookups match more than Doc bytes is a
// per-document error, recorded and retried like any other. Zero fields
// take the defaults.
type Bounds struct {
	Batch int // bytes of matches one read of a batch may hold (DefaultBatchBytes)
	Doc   int // bytes of matches one document's lookups may hold (DefaultDocBytes)
}

// DefaultBatchBytes bounds a batch's read; DefaultDocBytes is MongoDB's
// own bound on a $lookup's result, a 16 MiB document.
const (
	DefaultBatchBytes = 64 << 20
	DefaultDocBytes   = 16 << 20
)

func (b Bounds) withDefaults() Bounds {
	if b.Batch <= 0 {
		b.Batch = DefaultBatchBytes
	}
	if b.Doc <= 0 {
		b.Doc = DefaultDocBytes
	}
	return b
}

// lookupResolver resolves a job's declared lookups for a batch of its documents
// at once: for each lookup one query over the batch's keys
// ({foreignField: {$in: keys}}, projected, in _id order), whose results
// are matched to each document as $lookup matches them.
type lookupResolver struct {
	Source *mongo.Database // the main database; a lookup reads From in its own Database
	Bounds Bounds
	Log    hclog.Logger
	// Wait sleeps before attempt (counted from 0) of a read that failed;
	// a transient error is tried again a few times.
	Wait func(ctx context.Context, attempt int) error
}

// Resolve resolves job's lookups for docs (a nil document, a delete, gets
// none). failed[i] is set for a document whose lookups match more than a
// document may hold (NOT_A_DOCUMENT: the document fails alone, its results
// are nil). Both are nil when the job declares no lookups. err is a read
// that kept failing (FAILED) or the end of ctx.
func (r *lookupResolver) Resolve(ctx context.Context, job *transform.Job, docs []bson.Raw) (out []jobdef.LookupResults, failed []error, err error) {
	if len(job.Lookups) == 0 {
		return nil, nil, nil
	}
	b := &batch{docs: docs, failed: make([]error, len(docs)), bounds: r.Bounds.withDefaults()}
	out = make([]jobdef.LookupResults, len(docs))
	var idx []int
	for i := range docs {
		if docs[i] != nil {
			out[i] = make(jobdef.LookupResults, len(job.Lookups))
			idx = append(idx, i)
		}
	}
	for li, l := range job.Lookups {
		if err := r.resolveLookup(ctx, job, li, l, b, idx, out); err != nil {
			return nil, nil, err
		}
	}
	for _, i := range idx {
		if b.failed[i] != nil {
			out[i] = nil
			continue
		}
		n := 0
		for _, matches := range out[i] {
			for _, m := range matches {
				n += len(m)
			}
		}
		if n > b.bounds.Doc {
			b.failed[i] = errs.New(errs.NotADocument, job.Name,
				"its lookups matched %d bytes of documents, more than the %d a document's lookups may hold (as MongoDB's $lookup, whose result must fit in a 16 MiB document): project fewer fields, or look up from the other side",
				n, b.bounds.Doc)
			out[i] = nil
		}
	}
	return out, b.failed, nil
}

// batch is the documents being resolved, those already failed, and the
// bounds of their reads.
type batch struct {
	docs   []bson.Raw
	failed []error
	bounds Bounds
}

// resolveLookup resolves lookup li (l) for the documents at idx into out,
// halving idx while the matches of the whole would be more than
// b.bounds.Batch.
func (r *lookupResolver) resolveLookup(ctx context.Context, job *transform.Job, li int, l jobdef.Lookup, b *batch, idx []int, out []jobdef.LookupResults) error {
	if len(idx) == 0 {
		return nil
	}
	var foreign []bson.Raw
	for attempt := 0; ; attempt++ {
		var err error
		foreign, err = r.lookupForeign(ctx, l, b, idx)
		if err == nil {
			break
		}
		if errors.Is(err, errLookupTooLarge) {
			if len(idx) == 1 {
				b.failed[idx[0]] = errs.New(errs.NotADocument, job.Name,
					"lookup %s matched more than %d bytes of %s's documents, more than a document's lookups may hold: project fewer fields, or look up from the other side",
					l.Name, b.bounds.Batch, l.From)
				return nil
			}
			half := len(idx) / 2
			if err := r.resolveLookup(ctx, job, li, l, b, idx[:half], out); err != nil {
				return err
			}
			return r.resolveLookup(ctx, job, li, l, b, idx[half:], out)
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if attempt >= 10 {
			return errs.Wrap(errs.Failed, job.Name, err, "resolve lookup %s (read %s)", l.Name, l.From)
		}
		r.Log.Warn("resolving a lookup failed; trying again", "job", job.Name, "lookup", l.Name, "error", err, "attempt", attempt+1)
		if err := r.Wait(ctx, attempt); err != nil {
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
		if b.failed[i] == nil {
			out[i][li] = l.MatchIndexed(b.docs[i], ix, order)
		}
	}
	return nil
}

// errLookupTooLarge: a lookup's read passed the batch's bound.
var errLookupTooLarge = errors.New("lookup read too large")

// lookupForeign reads the documents of l.From that match any key of the
// documents at idx, in _id order; errLookupTooLarge when they pass the
// batch's bound.
func (r *lookupResolver) lookupForeign(ctx context.Context, l jobdef.Lookup, b *batch, idx []int) ([]bson.Raw, error) {
	seen := map[string]bool{}
	var keys []bson.RawValue
	for _, i := range idx {
		if b.docs[i] == nil || b.failed[i] != nil {
			continue
		}
		for _, k := range l.Keys(b.docs[i]) {
			if k.Type == bson.TypeArray {
				continue // its elements are keys too
			}
			if id := jobdef.IDKey(k); !seen[id] {
				seen[id] = true
				keys = append(keys, k)
			}
		}
	}
	var out []bson.Raw
	size := 0
	coll := dbNamed(r.Source, l.Database).Collection(l.From)
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
			if size > b.bounds.Batch {
				_ = cur.Close(context.WithoutCancel(ctx))
				return nil, errLookupTooLarge
			}
			// A slice of the reply: the driver reads each reply into a
			// buffer of its own and never writes to it again.
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
		return jobdef.IDKey(docs[a].Lookup("_id")) < jobdef.IDKey(docs[b].Lookup("_id"))
	})
}
