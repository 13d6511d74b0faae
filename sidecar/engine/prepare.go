package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// Item is one source document to transform into a write.
type Item struct {
	Doc bson.Raw      // the full document; nil: delete
	ID  bson.RawValue // its _id
	Key string        // jobdef.IDKey(ID), when the caller computed it
	Op  transform.Operation
	// Again is why a document is read again from the collection: OpRetry
	// (retry, or the engine's own retry of a call out of time) or OpRepair
	// (verify --repair); empty for the stream and a reindex. The
	// transform sees such a document as ctx.operation "reindex" (it was
	// read from the collection, not from an event); logs name Again.
	Again string
	Upd   bson.Raw // updateDescription, or nil
	// LookupErr: its lookups matched more than a document may hold
	// (lookupResolver); the document is not transformed.
	LookupErr error
	// Fill: a lean stream left the document out; the engine reads it by
	// _id before the transform.
	Fill bool
	// coalesced and judge: see unchanged.go.
	coalesced []bson.Raw
	judge     *Unchanged
}

// DocError is a per-document failure found while transforming.
type DocError struct {
	ID    bson.RawValue
	Op    transform.Operation
	Again string // the Item's
	Err   error
}

// Why a document is read again (Item.Again), as logs and messages name it.
const (
	OpRetry  = "retry"
	OpRepair = "repair"
)

// OpLabel is what logs name the operation of the failed document: the
// stream's event, reindex, or why it was read again.
func (d DocError) OpLabel() string {
	if d.Again != "" {
		return d.Again
	}
	return string(d.Op)
}

// docBytes is a guess at a search document's JSON size, for the bytes a
// flight of documents not yet read counts.
const docBytes = 768

// IDString renders a source _id for logs and messages as relaxed Extended
// JSON (what mongosh shows and a query takes: "f1", 5,
// {"$oid":"65f1..."}).
func IDString(id bson.RawValue) string {
	if id.Type == 0 {
		return "<none>"
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: id}}, false, false)
	if err != nil {
		return id.String()
	}
	s := strings.TrimPrefix(string(b), `{"v":`)
	return strings.TrimSuffix(s, "}")
}

// Transform turns items into writes, in parallel on the job's transform
// runtimes, keeping their order. A document the transform keeps out becomes a delete
// when deleteSkipped (follow, in place), else it is dropped from the writes.
// Per-document errors are returned apart (their writes are deletes when
// deleteSkipped: the document is left out of the destination).
func Transform(ctx context.Context, job *transform.Job, items []Item, lookups []jobdef.LookupResults, deleteSkipped bool) (writes []sink.Write, skipped int, bad []DocError, err error) {
	n := len(items)
	res := make([]sink.Write, n)
	kind := make([]byte, n) // 0 write, 1 skipped, 2 error
	errsAt := make([]error, n)
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var (
		wg       sync.WaitGroup
		fatalMu  sync.Mutex
		fatalErr error
	)
	chunk := (n + workers - 1) / max(workers, 1)
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min((w+1)*chunk, n)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The worker's search documents are written one after the
			// other into one buffer (sized to the job's documents so far,
			// grown as needed: what was written before stays where it
			// is), by one series of calls.
			var buf []byte
			if job.Kind == jobdef.Search {
				buf = make([]byte, 0, job.JSONCapacity(hi-lo))
			}
			in := make([]transform.Input, 0, hi-lo)
			at := make([]int, 0, hi-lo)
			for i := lo; i < hi; i++ {
				it := &items[i]
				switch {
				case it.Doc == nil:
					res[i] = sink.Write{SourceID: it.ID, Delete: true}
				case it.LookupErr != nil:
					kind[i], errsAt[i] = 2, it.LookupErr
					res[i] = sink.Write{SourceID: it.ID, Delete: true}
				default:
					var lk jobdef.LookupResults
					if lookups != nil {
						lk = lookups[i]
					}
					in = append(in, transform.Input{Doc: it.Doc, Op: it.Op, UpdateDesc: it.Upd, Lookups: lk})
					at = append(at, i)
				}
			}
			out := make([]transform.Outcome, len(in))
			job.ApplyEach(ctx, buf, in, out)
			for k, o := range out {
				i := at[k]
				it := &items[i]
				r, err := o.Result, o.Err
				switch {
				case err == nil && it.judge.unchanged(it, r):
					kind[i] = 3
				case err == nil && r.Skip:
					kind[i] = 1
					res[i] = sink.Write{SourceID: it.ID, Delete: true}
				case err == nil:
					if job.Kind == jobdef.Mirror {
						res[i] = sink.Write{SourceID: it.ID, Doc: r.Raw}
					} else {
						res[i] = sink.Write{SourceID: it.ID, Doc: json.RawMessage(r.JSON)}
					}
				case ctx.Err() != nil || errs.CodeOf(err) == errs.Failed:
					fatalMu.Lock()
					if fatalErr == nil {
						fatalErr = err
					}
					fatalMu.Unlock()
					return
				default:
					kind[i] = 2
					errsAt[i] = err
					res[i] = sink.Write{SourceID: it.ID, Delete: true}
				}
			}
		}()
	}
	wg.Wait()
	if fatalErr != nil {
		if ctx.Err() != nil {
			return nil, 0, nil, context.Cause(ctx)
		}
		return nil, 0, nil, fmt.Errorf("transform: %w", fatalErr)
	}
	writes = res[:0]
	for i := range res {
		switch kind[i] {
		case 1:
			skipped++
		case 2:
			bad = append(bad, DocError{ID: items[i].ID, Op: items[i].Op, Again: items[i].Again, Err: errsAt[i]})
		case 3:
			continue // unchanged: nothing to send
		}
		if kind[i] != 0 && !deleteSkipped {
			continue
		}
		writes = append(writes, res[i])
	}
	return writes, skipped, bad, nil
}
