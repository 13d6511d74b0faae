package stream

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/budget"
	"github.com/meilistream/meilistream/jobdef"
)

// ErrHistoryLost is the follow's signal that the recorded position is gone
// from the server's history (codes 286 ChangeStreamHistoryLost and 280
// ChangeStreamFatalError on open or resume; 136 CappedPositionLost when an
// open stream is overtaken by the oplog's truncation).
var ErrHistoryLost = errors.New("change stream history lost")

// ErrClosed: the server closed the cursor without an invalidate event.
var ErrClosed = errors.New("change stream closed by the server")

// IsHistoryLost says whether err is the server saying the stream's
// position is gone from its history.
func IsHistoryLost(err error) bool {
	var se mongo.ServerError
	if errors.As(err, &se) {
		return se.HasErrorCode(286) || se.HasErrorCode(280) || se.HasErrorCode(136)
	}
	return false
}

// Await is the getMore wait of the change stream: how often an idle
// stream reports (its post-batch resume token), not a latency bound.
const Await = 500 * time.Millisecond

// maxItemEvents bounds the events of one Item (a getMore batch is at most
// 16 MB; this keeps the follow loop's turns short).
const maxItemEvents = 1000

// DefaultReadAhead is how many bytes of change events the stream reader
// may have handed the follow loop and the loop not yet taken in: one
// largest getMore reply. A destination slower than the source then holds
// the stream back instead of growing the process.
const DefaultReadAhead = 16 << 20

// Item is what the Reader hands the follow loop: the events of one
// getMore batch (in order), an idle report with the post-batch resume
// token, or the stream's error. One hand-off per batch, not per event: a
// goroutine switch per change was a large part of follow's CPU.
type Item struct {
	Events []bson.Raw // the events of one getMore batch, in order
	Token  bson.Raw   // an idle report: the post-batch resume token
	Err    error      // the stream failed (the Reader then stops)
	bytes  int        // of Events, released to the reader's budget once taken in
	// from is the budget bytes go back to (nil: an item of a Hub, whose
	// Sub counts them itself); after, the post-batch resume token when
	// Events end a getMore batch: a position for the jobs of a shared
	// stream that the batch had nothing for.
	from  *budget.Bytes
	after bson.Raw
	// ends holds, for each event, the token where it ends in the stream:
	// its _id, but for one put together from fragments, whose _id is the
	// position before it (split.go), its last fragment's. A Hub tells by
	// them what a job already had.
	ends []bson.Raw
}

// Filter is the $match of a job's change stream. The stream is
// opened on the job's database, so one resume token orders the job's
// collection and the job's own watermark documents in the state collection
// (the interleaved reindex reads between two of them) and its wait
// document (read your writes). A database stream is
// not invalidated by a drop or rename of one collection: those events are
// matched for the job's collection (by name, and as a rename's target) and
// the follow loop ends the job on them, as a collection stream's invalidate
// would.
func Filter(job *jobdef.Job, state string) bson.D { return filter(job, "", state) }

// Cluster says whether job's stream must be cluster-wide: when the job's
// collection, or a collection it looks up or relates to, is in another
// database than the state collection's (stateDB). The watermark, wait and
// collection events must come through one stream, in one order, for the
// reindex's reads between watermarks (the engine's package doc); a
// database stream sees one database, and the state collection stays in
// the main one. A job reading the main database alone keeps a database
// stream.
func Cluster(job *jobdef.Job, stateDB string) bool {
	for _, db := range job.Databases() {
		if db != "" && db != stateDB {
			return true
		}
	}
	return false
}

// ClusterFilter is Filter for a cluster-wide stream (Cluster): every
// clause names its database too (ns.db, and to.db for a rename's target),
// stateDB the state collection's. A cluster-wide stream is never
// invalidated: a dropDatabase event of the job's database, or of the state
// collection's, ends the job as a database stream's invalidate does.
func ClusterFilter(job *jobdef.Job, stateDB, state string) bson.D {
	return filter(job, stateDB, state)
}

// filter is Filter with stateDB "" (a database stream: no clause names a
// database), ClusterFilter otherwise.
func filter(job *jobdef.Job, stateDB, state string) bson.D {
	in := func(db string, d bson.D) bson.D { return d }
	jobDB := job.Database
	if stateDB != "" {
		if jobDB == "" {
			jobDB = stateDB
		}
		in = func(db string, d bson.D) bson.D {
			key := "ns.db"
			if len(d) > 0 && strings.HasPrefix(d[0].Key, "to.") {
				key = "to.db"
			}
			return append(bson.D{{Key: key, Value: db}}, d...)
		}
	}
	or := bson.A{
		in(jobDB, collClause(job)), // with fields: updates touching one of them (fields.go)
		in(jobDB, bson.D{{Key: "to.coll", Value: job.Collection}}),
		in(stateDB, bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.watermark", Value: job.Name}}),
		// A waiter's mark (jobstate.MarkWait): read your writes.
		in(stateDB, bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.wait", Value: job.Name}}),
		// A request's arrival (jobstate.RequestRetry and the others): the
		// holder takes it at once instead of asking for one every second.
		in(stateDB, bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.retry", Value: job.Name}, {Key: "operationType", Value: "insert"}}),
	}
	if stateDB == "" {
		or = append(or, bson.D{{Key: "operationType", Value: bson.D{{Key: "$in", Value: bson.A{"dropDatabase", "invalidate"}}}}})
	} else {
		dbs := bson.A{jobDB}
		if stateDB != jobDB {
			dbs = append(dbs, stateDB)
		}
		or = append(or, bson.D{{Key: "operationType", Value: "dropDatabase"}, {Key: "ns.db", Value: bson.D{{Key: "$in", Value: dbs}}}})
	}
	// The collections the job's lookups and relates read: a change there
	// sends its dependents again.
	byDB := map[string]bson.A{}
	var dbs []string
	for _, d := range job.Dependencies() {
		db := d.Database
		if stateDB == "" {
			db = ""
		} else if db == "" {
			db = stateDB
		}
		if _, ok := byDB[db]; !ok {
			dbs = append(dbs, db)
		}
		if !slices.Contains(byDB[db], any(d.Collection)) {
			byDB[db] = append(byDB[db], d.Collection)
		}
	}
	sort.Strings(dbs)
	for _, db := range dbs {
		colls := byDB[db]
		sort.Slice(colls, func(a, b int) bool { return colls[a].(string) < colls[b].(string) })
		or = append(or, in(db, bson.D{{Key: "ns.coll", Value: bson.D{{Key: "$in", Value: colls}}}}),
			in(db, bson.D{{Key: "to.coll", Value: bson.D{{Key: "$in", Value: colls}}}}))
	}
	return bson.D{{Key: "$match", Value: bson.D{{Key: "$or", Value: or}}}}
}

// needsPreImages says whether a dependency of job keys on a field other
// than _id: then a change that moves or removes that field must send the
// documents that depended on its old value too, which only the document
// before the change holds.
func needsPreImages(job *jobdef.Job) bool {
	for _, d := range job.Dependencies() {
		if d.Key != "_id" {
			return true
		}
	}
	return false
}

// OpenOption changes how Open opens a stream.
type OpenOption func(*openOptions)

type openOptions struct{ split, lean bool }

// SplitLargeEvents ends the pipeline with $changeStreamSplitLargeEvent
// (MongoDB 7.0 and 6.0.9 on; UnknownStage tells a server without it): an
// event over 16 MB comes as fragments, which the Reader puts together.
func SplitLargeEvents() OpenOption { return func(o *openOptions) { o.split = true } }

// Lean opens a stream that carries no document: of an event's
// fullDocument (and fullDocumentBeforeChange) it keeps only the fields the
// job's lookups and relates key on and a watermark's mark, and it adds
// LeanSizeField, the size of the document it left out. Its events are
// never larger than the update that made them, so a server without
// $changeStreamSplitLargeEvent can return those a full stream cannot; the
// follow loop reads the documents of the job's collection itself, by _id,
// which gives what fullDocument: updateLookup gives (the document as it is
// when read, or none).
func Lean() OpenOption { return func(o *openOptions) { o.lean = true } }

// Open opens job's change stream on db after token, or at the present when
// token is empty; db is the state collection's database (the main one),
// state names the state collection (its watermark documents). A job
// reading another database gets a cluster-wide stream (Cluster).
func Open(ctx context.Context, db *mongo.Database, job *jobdef.Job, state string, token bson.Raw, with ...OpenOption) (*mongo.ChangeStream, error) {
	var o openOptions
	for _, f := range with {
		f(&o)
	}
	opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(Await)
	if needsPreImages(job) {
		// Where the related collection keeps them
		// (changeStreamPreAndPostImages, MongoDB 6.0+); elsewhere events
		// come without, and only the new value's dependents are sent.
		opts.SetFullDocumentBeforeChange(options.WhenAvailable)
	}
	if len(token) > 0 {
		opts.SetResumeAfter(token)
	}
	cluster := Cluster(job, db.Name())
	var pipeline mongo.Pipeline
	if cluster {
		pipeline = mongo.Pipeline(ClusterPipeline(job, db.Name(), state))
	} else {
		pipeline = mongo.Pipeline(Pipeline(job, state))
	}
	if o.lean {
		pipeline = append(pipeline, leanStage(job))
	}
	if o.split {
		pipeline = append(pipeline, SplitStage) // last, as the server requires
	}
	if cluster {
		// aggregate: 1 on admin with allChangesForCluster: the driver's
		// Client.Watch. It needs find and changeStream on every database
		// ({db: "", collection: ""}), where a database stream needs them
		// on its database only.
		return db.Client().Watch(ctx, pipeline, opts)
	}
	return db.Watch(ctx, pipeline, opts)
}

// Pace is the least time between two getMores of a busy stream:
// FlushInterval/4, at most 25ms. A getMore returns as soon as anything is
// there, so a stream of a few thousand changes a second read without a
// pause costs one round trip (and its goroutine switches and syscalls) per
// change or two; pausing after a batch lets the next one gather more. An
// idle stream's getMore still waits on the server (maxAwaitTime), so a lone
// write is not delayed; a busy one by at most the pace, which keeps a busy
// stream's write-to-searchable within flushInterval + 50 ms.
func Pace(flush time.Duration) time.Duration {
	return min(flush/4, 25*time.Millisecond)
}

// Reader owns one change stream (a mongo.ChangeStream is not safe for
// concurrent use): its goroutine reads it and hands the follow loop one
// Item per getMore batch, with at most readAhead bytes of events handed over
// and not yet taken in. Close stops the goroutine and closes the stream.
type Reader struct {
	items  chan Item
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	budget *budget.Bytes
	// hurry, when set, skips the pace after a Batch: a reindex waits for
	// its watermark to come through the stream.
	hurry func() bool
	// split is the split event whose fragments are coming; before is the
	// resume token before it (of the last whole event, or an idle
	// batch's); fragmented: the last document read was a fragment, so the
	// driver would resume from a fragment's token (see split.go).
	split      *assembly
	before     bson.Raw
	fragmented bool
	// deliver, when set, takes the items instead of the channel (a Sub
	// catching up queues them itself); caught, when set, is told of each
	// idle report once handed over, and ends the reader by returning true
	// (the Sub merged into its Hub's shared stream).
	deliver func(Item)
	caught  func(tok bson.Raw) bool
	// finish, closed by Finish, ends the reader after its getMore in
	// flight.
	finish     chan struct{}
	finishOnce sync.Once
}

// Finish ends the reader once the getMore in flight returned (at most
// Await later), without interrupting it: a getMore cut short by closing
// its connection can leave its cursor open on the server after the
// killCursors that follows. The items read meanwhile still come; done is
// closed when the stream is.
func (r *Reader) Finish() { r.finishOnce.Do(func() { close(r.finish) }) }

// Start starts reading cs: at most readAhead bytes of events handed over
// and not yet Taken, and a pause of pace after a batch unless hurry says
// a reader waits for what comes next.
func Start(ctx context.Context, cs *mongo.ChangeStream, pace time.Duration, readAhead int, hurry func() bool) *Reader {
	return start(ctx, cs, pace, readAhead, hurry, nil, nil)
}

func start(ctx context.Context, cs *mongo.ChangeStream, pace time.Duration, readAhead int, hurry func() bool, deliver func(Item), caught func(bson.Raw) bool) *Reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &Reader{
		items:   make(chan Item, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
		budget:  budget.New(readAhead),
		hurry:   hurry,
		before:  append(bson.Raw(nil), cs.ResumeToken()...),
		deliver: deliver,
		caught:  caught,
		finish:  make(chan struct{}),
	}
	if len(r.before) == 0 {
		r.before = nil
	}
	go func() {
		defer close(r.done)
		r.read(rctx, cs, pace)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = cs.Close(cctx)
		cancel()
	}()
	return r
}

// Items is where the batches come.
func (r *Reader) Items() <-chan Item { return r.items }

// Taken gives an item's bytes back to the reader's budget once the follow
// loop has taken its events in (they then count against the pending
// batch's bound).
func (r *Reader) Taken(it Item) { r.budget.Release(it.bytes) }

// Close stops the reader and waits until the stream is closed. Idempotent.
func (r *Reader) Close() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

func (r *Reader) read(ctx context.Context, cs *mongo.ChangeStream, pace time.Duration) {
	send := func(it Item) bool {
		if r.deliver != nil {
			if ctx.Err() != nil {
				r.budget.Release(it.bytes)
				return false
			}
			r.deliver(it)
			return true
		}
		select {
		case r.items <- it:
			return true
		case <-ctx.Done():
			r.budget.Release(it.bytes)
			return false
		}
	}
	for {
		select {
		case <-r.finish:
			return
		default:
		}
		started := time.Now()
		if cs.TryNext(ctx) {
			// The rest of the batch the driver holds, without another
			// getMore. Not copied: each event is a slice of the reply the
			// driver read it into, which it never writes to again (as a
			// reindex's chunk reads rely on too;
			// TestStreamEventsStayValidAcrossGetMores pins it for change
			// streams).
			n := min(cs.RemainingBatchLength()+1, maxItemEvents)
			evs := make([]bson.Raw, 0, n)
			ends := make([]bson.Raw, 0, n)
			size := 0
			for {
				ev := cs.Current[:len(cs.Current):len(cs.Current)]
				ev, err := r.fragment(ev, cs.ID())
				if err != nil {
					send(Item{Err: err})
					return
				}
				if ev != nil {
					end, _ := cs.Current.Lookup("_id").DocumentOK()
					evs = append(evs, ev)
					ends = append(ends, end)
					size += len(ev)
				}
				if len(evs) == maxItemEvents || cs.RemainingBatchLength() == 0 || !cs.TryNext(ctx) {
					break
				}
			}
			if len(evs) > 0 {
				if r.budget.Acquire(ctx, size) != nil {
					return
				}
				it := Item{Events: evs, bytes: size, from: r.budget, ends: ends}
				if cs.RemainingBatchLength() == 0 && r.split == nil && !r.fragmented {
					// A fragment's token is never a position (split.go).
					it.after = append(bson.Raw(nil), cs.ResumeToken()...)
				}
				if !send(it) {
					return
				}
			}
			if d := time.Until(started.Add(pace)); d > 0 && cs.RemainingBatchLength() == 0 && (r.hurry == nil || !r.hurry()) {
				if sleep(ctx, d) != nil {
					return
				}
			}
			continue
		}
		if err := cs.Err(); err != nil {
			if ctx.Err() == nil {
				if r.fragmented && IsHistoryLost(err) {
					err = &splitResumeError{err}
				}
				send(Item{Err: err})
			}
			return
		}
		if cs.ID() == 0 {
			send(Item{Err: ErrClosed})
			return
		}
		if r.split != nil {
			// An empty batch inside a split event: its token is a
			// fragment's, not a position.
			continue
		}
		r.before, r.fragmented = append(bson.Raw(nil), cs.ResumeToken()...), false
		if !send(Item{Token: r.before}) {
			return
		}
		if r.caught != nil && r.caught(r.before) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// TokenTime is the cluster time a resume token stands at: real tokens and
// the test server's alike begin with the KeyString timestamp tag 0x82 and
// the timestamp's seconds and increment, big-endian (mongod's
// resume_token.cpp). false for a token of another shape.
func TokenTime(tok bson.Raw) (bson.Timestamp, bool) {
	s, ok := tok.Lookup("_data").StringValueOK()
	if !ok || len(s) < 18 || s[:2] != "82" {
		return bson.Timestamp{}, false
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(s[2:18])); err != nil {
		return bson.Timestamp{}, false
	}
	return bson.Timestamp{T: binary.BigEndian.Uint32(b[:4]), I: binary.BigEndian.Uint32(b[4:])}, true
}
