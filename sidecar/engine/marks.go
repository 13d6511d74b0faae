package engine

import (
	"context"
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
	"github.com/meilistream/meilistream/sidecar/prepare"
	"github.com/meilistream/meilistream/transform"
)

// A chain is one goroutine's series of reads of the job's collection, each
// between two marks of its own (its nonce and a sequence number) in the
// job's watermark document, which the job's stream follows (snapshot.go
// says why that orders the reads with the stream). The reindex is one
// chain; the documents a related change sends again are read by another
// (fanout.go). The follow loop keeps, for each chain, the _ids the stream
// changed since the chain's last mark, and at a mark takes the chunk read
// before it and drops those rows from it.
type chain struct {
	e    *Engine
	jc   jobConfig
	l    Lease
	log  hclog.Logger
	coll *mongo.Collection // the job's collection, majority read concern
	what string            // "reindex", "fan-out": for messages

	nonce   string
	mu      sync.Mutex
	seq     int
	chunks  map[string]*chunk // registered under their mark, not yet taken
	waiting *atomic.Int32     // marks written and not yet seen by the follow loop (the follower's)

	// changed is the follow loop's: the keys the stream changed since this
	// chain's last mark.
	changed map[string]bool
}

func (e *Engine) newChain(jc jobConfig, l Lease, log hclog.Logger, what string) *chain {
	return &chain{
		e: e, jc: jc, l: l, log: log, what: what,
		coll:    e.source.Collection(jc.job.Collection, options.Collection().SetReadConcern(readconcern.Majority())),
		nonce:   newNonce(),
		chunks:  map[string]*chunk{},
		changed: map[string]bool{},
	}
}

// owns says whether mark is one of this chain's.
func (c *chain) owns(mark string) bool {
	return strings.HasPrefix(mark, c.nonce+":")
}

// session opens the chain's causally consistent session: its marks are
// written with majority write concern and its reads done with majority
// read concern in it, so each read carries the last mark's operation time
// as afterClusterTime and sees every write before that mark.
func (c *chain) session(ctx context.Context) (context.Context, *mongo.Collection, func(), error) {
	sess, err := c.e.source.Client().StartSession(options.Session().SetCausalConsistency(true))
	if err != nil {
		return nil, nil, nil, errs.Wrap(errs.Failed, c.jc.job.Name, err, "start a session for the %s", c.what)
	}
	marks := c.e.source.Collection(c.e.stateName, options.Collection().SetWriteConcern(writeconcern.Majority()))
	return mongo.NewSessionContext(ctx, sess), marks, func() { sess.EndSession(context.WithoutCancel(ctx)) }, nil
}

// mark registers ch (nil for an opening mark) under a new mark and writes
// the mark.
func (c *chain) mark(ctx context.Context, marks *mongo.Collection, ch *chunk) error {
	c.mu.Lock()
	m := c.nonce + ":" + strconv.Itoa(c.seq)
	c.seq++
	c.chunks[m] = ch
	c.mu.Unlock()
	c.waiting.Add(1)
	filter := bson.D{{Key: "_id", Value: watermarkKey(c.jc.job.Name)}}
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
			return errs.Wrap(errs.Failed, c.jc.job.Name, err, "write a %s watermark in %s", c.what, c.e.stateName)
		}
		c.log.Warn("writing a watermark failed; retrying", "of", c.what, "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(c.jc.Config, attempt)); err != nil {
			return err
		}
	}
}

// take returns the chunk registered under mark, whether mark is one of
// this chain's (a mark of an earlier run, or another holder's, is not).
func (c *chain) take(mark string) (ch *chunk, ours bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ours = c.chunks[mark]
	if ours {
		delete(c.chunks, mark)
		c.waiting.Add(-1)
	}
	return ch, ours
}

// readChunk reads up to n documents matching filter (nil: all) after last,
// in _id order (retried on a transient error: no mark is written in
// between, so a read again is still inside the window).
func (c *chain) readChunk(ctx context.Context, filter bson.D, last bson.RawValue, n int) (*chunk, error) {
	for attempt := 0; ; attempt++ {
		ch, err := c.readAfter(ctx, filter, last, n)
		if err == nil {
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if attempt >= 10 {
			return nil, leaseOr(ctx, c.l, errs.Wrap(errs.Failed, c.jc.job.Name, err, "read the collection (%s)", c.what))
		}
		c.log.Warn("reading the collection failed; reading the chunk again", "of", c.what, "error", err, "attempt", attempt+1)
		if err := sleep(ctx, backoff(c.jc.Config, attempt)); err != nil {
			return nil, err
		}
	}
}

// readAfter is one read of a chunk. MongoDB's comparison operators only
// match values of the same canonical type ("type bracketing", the manual's
// "Comparison/Sort Order"), so {_id: {$gt: last}} reads on within last's
// type; once that is exhausted, the types that sort after it are read with
// {$type: [...]}. Each is a plain range of the _id index (an $or of both
// would make some servers sort the whole collection for every chunk).
func (c *chain) readAfter(ctx context.Context, filter bson.D, last bson.RawValue, n int) (*chunk, error) {
	ch := &chunk{}
	var after bson.D
	if last.Type != 0 {
		after = bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}
	}
	items, final, err := c.find(ctx, and(filter, after), n)
	if err != nil {
		return nil, err
	}
	ch.items = items
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
			ch.items, final = append(ch.items, more...), fin
		}
	}
	ch.final = final
	ch.n = len(ch.items)
	if ch.n > 0 {
		ch.last = ch.items[ch.n-1].ID
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
func (c *chain) find(ctx context.Context, filter bson.D, n int) ([]prepare.Item, bool, error) {
	opts := chunkFind(c.jc.job, n)
	cur, err := c.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, false, err
	}
	items, final := readFirstBatch(ctx, cur, n)
	err = cur.Err()
	_ = cur.Close(context.WithoutCancel(ctx))
	return items, final, err
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
func readFirstBatch(ctx context.Context, cur *mongo.Cursor, n int) (items []prepare.Item, final bool) {
	for len(items) < n && cur.Next(ctx) {
		if items == nil {
			items = make([]prepare.Item, 0, n)
		}
		doc := cur.Current[:len(cur.Current):len(cur.Current)]
		items = append(items, prepare.Item{Doc: doc, ID: doc.Lookup("_id"), Op: transform.OpReindex})
		if cur.RemainingBatchLength() == 0 {
			break
		}
	}
	return items, len(items) < n && cur.ID() == 0
}
