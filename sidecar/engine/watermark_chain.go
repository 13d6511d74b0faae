package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// Source is where the chains of a job read and mark, and what they report
// a failure with.
type Source struct {
	DB    *mongo.Database // the main database, the state collection's (the job's collection is in its own: jobColl)
	State string          // the state collection, whose watermark documents the job's stream follows
	Job   *transform.Job
	Log   hclog.Logger
	// Wait sleeps before attempt (counted from 0) of a read or a mark
	// that failed; a transient error is tried again a few times.
	Wait func(ctx context.Context, attempt int) error
	// Blame is the error a read that kept failing reports: err, or the
	// loss of the job's lease when that is what cut it short.
	Blame func(ctx context.Context, err error) error
	// Waiting counts the marks of every chain of the job written and not
	// yet taken by the follow loop (the stream reader hurries while it is
	// above zero).
	Waiting *atomic.Int32
	// Marks, when set, takes the chains' marks in process instead of
	// their being written in the state collection: a scan-mode job has no
	// stream to bring them back, and its scanner hands each over before
	// the events of any read begun after it (scan.go).
	Marks func(mark string)
}

// A Chain is one goroutine's series of reads of the job's collection, each
// between two marks of its own (its nonce and a sequence number) in the
// job's watermark document, which the job's stream follows (the package
// doc says why that orders the reads with the stream). A reindex is one
// chain; the documents a related change sends again are read by another
// (Fanout). The follow loop keeps, for each chain, the _ids the stream
// changed since the chain's last mark (Changed), and at a mark takes the
// chunk read before it and drops those rows from it.
type Chain struct {
	src  Source
	coll *mongo.Collection // the job's collection, majority read concern
	what string            // "reindex", "fan-out": for messages
	// idsOnly reads the _ids alone (a covered read of the _id index): a
	// shared reindex's walk (reindex_shared.go).
	idsOnly bool

	nonce  string
	mu     sync.Mutex
	seq    int
	chunks map[string]*Chunk // registered under their mark, not yet taken

	// Changed is the follow loop's: the keys (jobdef.IDKey) the stream
	// changed since this chain's last mark.
	Changed map[string]bool
}

// Chunk is one read between two marks, registered under the mark written
// after it.
type Chunk struct {
	Items []Item          // the documents read, in _id order
	Last  bson.RawValue   // the last _id read (the checkpoint after it)
	N     int             // documents read: the window's share
	Gone  []bson.RawValue // a reindex's sweep, a retry's page: ids absent from the collection
	Final bool            // nothing follows: the reindex commits (or the fan-out's task ends) after it
	Task  *Task           // a fan-out's page: the task it belongs to
}

func newChain(src Source, what string) *Chain {
	return &Chain{
		src: src, what: what,
		coll:    jobColl(src.DB, &src.Job.Job, options.Collection().SetReadConcern(readconcern.Majority())),
		nonce:   newNonce(),
		chunks:  map[string]*Chunk{},
		Changed: map[string]bool{},
	}
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Owns says whether mark is one of this chain's.
func (c *Chain) Owns(mark string) bool {
	return strings.HasPrefix(mark, c.nonce+":")
}

// session opens the chain's causally consistent session: its marks are
// written with majority write concern and its reads done with majority
// read concern in it, so each read carries the last mark's operation time
// as afterClusterTime and sees every write before that mark.
func (c *Chain) session(ctx context.Context) (context.Context, *mongo.Collection, func(), error) {
	sess, err := c.src.DB.Client().StartSession(options.Session().SetCausalConsistency(true))
	if err != nil {
		return nil, nil, nil, errs.Wrap(errs.Failed, c.src.Job.Name, err, "start a session for the %s", c.what)
	}
	marks := c.src.DB.Collection(c.src.State, options.Collection().SetWriteConcern(writeconcern.Majority()))
	return mongo.NewSessionContext(ctx, sess), marks, func() { sess.EndSession(context.WithoutCancel(ctx)) }, nil
}

// mark registers ch (nil for an opening mark) under a new mark and writes
// the mark.
func (c *Chain) mark(ctx context.Context, marks *mongo.Collection, ch *Chunk) error {
	c.mu.Lock()
	m := c.nonce + ":" + strconv.Itoa(c.seq)
	c.seq++
	c.chunks[m] = ch
	c.mu.Unlock()
	c.src.Waiting.Add(1)
	if c.src.Marks != nil {
		c.src.Marks(m)
		return nil
	}
	filter := bson.D{{Key: "_id", Value: watermarkKey(c.src.Job.Name)}}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "mark", Value: m}}}}
	for attempt := 0; ; attempt++ {
		_, err := marks.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if attempt >= 10 {
			return errs.Wrap(errs.Failed, c.src.Job.Name, err, "write a %s watermark in %s", c.what, c.src.State)
		}
		c.src.Log.Warn("writing a watermark failed; retrying", "of", c.what, "error", err, "attempt", attempt+1)
		if err := c.src.Wait(ctx, attempt); err != nil {
			return err
		}
	}
}

func watermarkKey(job string) bson.D { return bson.D{{Key: "watermark", Value: job}} }

// Take returns the chunk registered under mark (nil for an opening mark),
// and whether mark is one of this chain's (a mark of an earlier run, or
// another holder's, is not).
func (c *Chain) Take(mark string) (ch *Chunk, ours bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ours = c.chunks[mark]
	if ours {
		delete(c.chunks, mark)
		c.src.Waiting.Add(-1)
	}
	return ch, ours
}

// readChunk reads up to n documents matching filter (nil: all) after last,
// in _id order (retried on a transient error: no mark is written in
// between, so a read again is still inside the window).
func (c *Chain) readChunk(ctx context.Context, filter bson.D, last bson.RawValue, n int) (*Chunk, error) {
	for attempt := 0; ; attempt++ {
		ch, err := c.readAfter(ctx, filter, last, n)
		if err == nil {
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if attempt >= 10 {
			return nil, c.src.Blame(ctx, errs.Wrap(errs.Failed, c.src.Job.Name, err, "read the collection (%s)", c.what))
		}
		c.src.Log.Warn("reading the collection failed; reading the chunk again", "of", c.what, "error", err, "attempt", attempt+1)
		if err := c.src.Wait(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// readAfter is one read of a chunk: the job's one walk of its collection
// in _id order, which every chain reads through (a reindex, so a mirror's
// backfill and an in-place reindex before its sweep, and a fan-out's
// tasks). MongoDB's comparison operators only match values of the same
// canonical type ("type bracketing", the manual's "Comparison/Sort
// Order"), so the rest of last's type is read first (sameBracketAfter);
// once that is exhausted, the types that sort after it are read with
// {$type: [...]}. Each is a plain range of the _id index (an $or of both
// would make some servers sort the whole collection for every chunk).
func (c *Chain) readAfter(ctx context.Context, filter bson.D, last bson.RawValue, n int) (*Chunk, error) {
	ch := &Chunk{}
	var after bson.D
	if last.Type != 0 {
		after = sameBracketAfter(last)
	}
	items, final, err := c.find(ctx, and(filter, after), n)
	if err != nil {
		return nil, err
	}
	ch.Items = items
	if final && last.Type != 0 && len(items) < n {
		bracket := last.Type
		if len(items) > 0 {
			bracket = items[len(items)-1].ID.Type
		}
		if later := laterTypes(bracket); len(later) > 0 {
			more, fin, err := c.find(ctx, and(filter, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}}), n-len(items))
			if err != nil {
				return nil, err
			}
			ch.Items, final = append(ch.Items, more...), fin
		}
	}
	ch.Final = final
	ch.N = len(ch.Items)
	if ch.N > 0 {
		// A copy: the next read and the checkpoint keep the last _id
		// after the chunk's documents are gone, and a slice of the
		// driver's reply would keep the whole reply (a megabyte a chunk)
		// alive with it.
		ch.Last = cloneValue(ch.Items[ch.N-1].ID)
	}
	return ch, nil
}

// and is the conjunction of two filters (either may be empty).
func and(a, b bson.D) bson.D {
	switch {
	case len(a) == 0:
		if b == nil {
			return bson.D{}
		}
		return b
	case len(b) == 0:
		return a
	}
	return bson.D{{Key: "$and", Value: bson.A{a, b}}}
}

// find reads the first reply of a find of up to n documents in _id order;
// final when the query has nothing more.
func (c *Chain) find(ctx context.Context, filter bson.D, n int) ([]Item, bool, error) {
	opts := chunkFind(c.src.Job, n)
	if c.idsOnly {
		opts.SetProjection(bson.D{{Key: "_id", Value: 1}})
	}
	cur, err := findTypes(ctx, c.coll, filter, opts)
	if err != nil {
		return nil, false, err
	}
	items, final := readFirstBatch(ctx, cur, n)
	err = cur.Err()
	_ = cur.Close(context.WithoutCancel(ctx))
	return items, final, err
}

// chunkFind is the find of a chunk of up to n documents: in _id order, one
// reply, and trimmed to the job's fields when it declares them, as the
// stream trims its events' documents (stream.Projection), so the transform
// sees the same document either way.
func chunkFind(job *transform.Job, n int) *options.FindOptionsBuilder {
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(n)).SetBatchSize(int32(n))
	if p := stream.Projection(&job.Job); p != nil {
		opts.SetProjection(p)
	}
	return opts
}

// readFirstBatch takes the documents of the cursor's first reply: a chunk
// is one reply (up to n documents, at most the 16 MB MongoDB returns at
// once). final is whether the query has nothing after them.
//
// The documents are not copied: each is cur.Current, a slice of the reply
// the driver read it from, which the driver (v2.10.0) never writes to again
// (x/mongo/driver/topology connection.read makes a buffer per reply), so a
// slice of it stays valid while it is held.
// TestReadPartKeepsDocumentsValidAcrossBatches pins this for the driver in
// go.mod.
func readFirstBatch(ctx context.Context, cur *mongo.Cursor, n int) (items []Item, final bool) {
	for len(items) < n && cur.Next(ctx) {
		if items == nil {
			items = make([]Item, 0, n)
		}
		doc := cur.Current[:len(cur.Current):len(cur.Current)]
		items = append(items, Item{Doc: doc, ID: doc.Lookup("_id"), Op: transform.OpReindex})
		if cur.RemainingBatchLength() == 0 {
			break
		}
	}
	return items, len(items) < n && cur.ID() == 0
}

// readIDs reads the documents of ids (retried on a transient error: no
// mark is written in between, so a read again is still inside the
// window); the ids the collection does not hold are the chunk's Gone.
func (c *Chain) readIDs(ctx context.Context, ids []bson.RawValue) (*Chunk, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}
	for attempt := 0; ; attempt++ {
		items, err := c.findAll(ctx, filter)
		if err == nil {
			found := make(map[string]bool, len(items))
			for _, it := range items {
				found[jobdef.IDKey(it.ID)] = true
			}
			ch := &Chunk{Items: items, N: len(items), Final: true}
			for _, id := range ids {
				if !found[jobdef.IDKey(id)] {
					ch.Gone = append(ch.Gone, id)
				}
			}
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if attempt >= 10 {
			return nil, c.src.Blame(ctx, errs.Wrap(errs.Failed, c.src.Job.Name, err, "read the documents to retry"))
		}
		c.src.Log.Warn("reading the documents to retry failed; reading them again", "error", err, "attempt", attempt+1)
		if err := c.src.Wait(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// findAll reads every document matching filter in _id order. The documents
// are slices of the replies (readFirstBatch says why that is safe).
func (c *Chain) findAll(ctx context.Context, filter bson.D) ([]Item, error) {
	// Trimmed to the job's fields, as the stream's documents are.
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	if p := stream.Projection(&c.src.Job.Job); p != nil {
		opts.SetProjection(p)
	}
	cur, err := c.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var items []Item
	for cur.Next(ctx) {
		doc := cur.Current[:len(cur.Current):len(cur.Current)]
		items = append(items, Item{Doc: doc, ID: doc.Lookup("_id"), Op: transform.OpReindex})
	}
	return items, cur.Err()
}
