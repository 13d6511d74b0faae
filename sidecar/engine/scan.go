package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/sidecar/stream"
	"github.com/meilistream/meilistream/transform"
)

// Scan mode: a source without change streams (a standalone mongod) is read
// by an update key instead. The scanner is a stream.Feed: its reads of the
// collection become change events of one ordered series, which the follow
// loop takes in exactly as it takes a change stream's, so the pipe, the
// coalescing, the dead letters, the requests through the holder, the
// interleaved reindex (its marks) and the positions are the stream mode's
// own. docs/scan-mode.md says why that is correct; in short:
//
//   - Each pass reads {key: {$gte: cursor - overlap}} sorted by (key, _id)
//     in pages; the cursor is the greatest (key, _id) read, and an event's
//     resume token is the cursor after it, so the position the pipe records
//     once a batch is durable is a cursor everything before which is in the
//     destination.
//   - Everything the scanner reads (pages, a sweep's absent ids) is handed
//     over in the order it was read, one goroutine reading: the latest read
//     of a document is the last write of it.
//   - A chain's mark (a reindex chunk's, a fan-out's) is registered in
//     process (Source.Marks) and handed over before the events of any read
//     that began after it: exactly what the stream does with a mark
//     written in MongoDB, so the watermark rule holds as it is.
//   - Deletes, which no read by key can see, come from the sweep: the
//     destination's ids (sink.Keys, the walk verify and the in-place sweep
//     take) checked against the collection page by page, each page's
//     absent ids handed over as deletes at the point they were read.

// scanEventBatch bounds the events of one hand-over.
const scanEventBatch = 1000

// scanSeenMax bounds the documents of the overlap window remembered so
// that a pass reading them again sends only those that changed; past it
// the window is forgotten and read documents are sent again.
const scanSeenMax = 100000

// scanCursor is a scan's place: the (key, _id) of the greatest document
// read; a zero Key means none yet (the scan reads the key's type from its
// least value).
type scanCursor struct {
	Key, ID bson.RawValue
}

func (c scanCursor) none() bool { return c.Key.Type == 0 }

// scanTokenField is the field of a scan-mode position's token, which a
// change stream's resume token never has (its own is _data).
const scanTokenField = "scan"

// token is the cursor as a position's token: {scan: {key, id}}, with
// the related collections' cursors as rel: [{coll, key, id}] (an array:
// a collection's name may hold a dot, which a field name may not).
func (c scanCursor) token(related ...*place) bson.Raw {
	d := bson.D{{Key: scanTokenField, Value: c.doc()}}
	if len(related) > 0 {
		rel := bson.A{}
		for _, r := range related {
			if !r.cursor.none() {
				rel = append(rel, append(bson.D{{Key: "coll", Value: r.tokenName}}, r.cursor.doc()...))
			}
		}
		d = append(d, bson.E{Key: "rel", Value: rel})
	}
	b, _ := bson.Marshal(d)
	return b
}

func (c scanCursor) doc() bson.D {
	if c.none() {
		return bson.D{}
	}
	return bson.D{{Key: "key", Value: c.Key}, {Key: "id", Value: c.ID}}
}

// relatedCursorOf is the cursor of related collection name in a
// position's token; none when it has none.
func relatedCursorOf(tok bson.Raw, name string) scanCursor {
	arr, ok := tok.Lookup("rel").ArrayOK()
	if !ok {
		return scanCursor{}
	}
	vals, _ := arr.Values()
	for _, v := range vals {
		d, ok := v.DocumentOK()
		if !ok {
			continue
		}
		if c, _ := d.Lookup("coll").StringValueOK(); c == name {
			if k, err := d.LookupErr("key"); err == nil {
				return scanCursor{Key: cloneValue(k), ID: cloneValue(d.Lookup("id"))}
			}
		}
	}
	return scanCursor{}
}

// place is where a scan of one collection stands: the job's own, or
// one it looks up (main false: read whole, its events those of a related
// collection).
type place struct {
	name string // the collection
	db   string // its database
	// tokenName names it in a position's token: the collection in the
	// main database, db.coll in another (a token recorded before jobs
	// could read other databases names the collection alone).
	tokenName string
	coll      *mongo.Collection // majority read concern, as the chains read
	// key is the field the collection is scanned by: the job's key, or
	// for a related collection its scanKeys entry.
	key    string
	main   bool
	cursor scanCursor
	kind   keyKind
	seen   map[string]seenDoc
}

// scanCursorOf reads a position's token as a scan cursor; false for a
// change stream's resume token.
func scanCursorOf(tok bson.Raw) (scanCursor, bool) {
	if len(tok) == 0 {
		return scanCursor{}, false
	}
	v, err := tok.LookupErr(scanTokenField)
	if err != nil {
		return scanCursor{}, false
	}
	d, ok := v.DocumentOK()
	if !ok {
		return scanCursor{}, false
	}
	var c scanCursor
	if k, err := d.LookupErr("key"); err == nil {
		c.Key = cloneValue(k)
		c.ID = cloneValue(d.Lookup("id"))
	}
	return c, true
}

// isScanToken says whether tok is a scan cursor (a position a scan-mode
// run recorded).
func isScanToken(tok bson.Raw) bool { _, ok := scanCursorOf(tok); return ok }

func cloneValue(v bson.RawValue) bson.RawValue {
	return bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)}
}

// keyKind is the type of the key the scan follows: the BSON type bracket
// a $gte on the cursor matches.
type keyKind int

const (
	keyUnknown keyKind = iota // no document holds a date or number key yet
	keyDate
	keyNumber
)

// kindOf is v's kind; a NaN is none: it sorts below every number, yet no
// comparison with it holds ({$gt: NaN} matches nothing), so a cursor on a
// NaN could never move on.
func kindOf(v bson.RawValue) keyKind {
	switch v.Type {
	case bson.TypeDateTime:
		return keyDate
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128:
		if isNaN(v) {
			return keyUnknown
		}
		return keyNumber
	}
	return keyUnknown
}

func (k keyKind) String() string {
	switch k {
	case keyDate:
		return "date"
	case keyNumber:
		return "number"
	}
	return "date or number"
}

// every is the condition on the key of every document of the kind the
// scan can follow: for numbers, those from -Infinity on, which leaves out
// NaN (kindOf).
func (k keyKind) every() bson.D {
	if k == keyNumber {
		return bson.D{{Key: "$gte", Value: math.Inf(-1)}}
	}
	return bson.D{{Key: "$type", Value: "date"}}
}

// scanner is a scan-mode job's reader. Its state outlives one feed (a
// reopen after an error, a pause) so the scan goes on where it was; only
// one feed runs at a time.
type scanner struct {
	job   *transform.Job
	db    string
	dst   sink.Sink
	log   hclog.Logger
	stats *status.JobStats
	e     *Engine

	pageN                int
	interval, sweepEvery time.Duration
	overlapMs            int64
	overlapUnits         float64
	// top is the key's top-level field when the job's fields leave it out:
	// read for the cursor, then cut from what the transform sees.
	top string

	place // the job's own collection
	// related are the collections the job looks up, each scanned by the
	// job's key too, so a change there sends its dependents again.
	related   []*place
	lastSweep time.Time
	// counted: the documents the scan cannot read were counted once
	// (after the first pass; then at each sweep); saidOther: the log said so.
	counted, saidOther bool

	mu    sync.Mutex
	marks []string
	poke  chan struct{}
}

// seenDoc is a document of the overlap window as last handed over.
type seenDoc struct {
	key bson.RawValue
	sum uint64
}

// newScanner makes job's scanner from its recorded cursor.
func (e *Engine) newScanner(jc jobConfig, dst sink.Sink, stats *status.JobStats, fromTok bson.Raw, log hclog.Logger) *scanner {
	from, _ := scanCursorOf(fromTok)
	job := jc.job
	ms, units, _ := jobdef.ScanOverlapOf(job.ScanOverlap)
	s := &scanner{
		job: job, db: e.source.Name(), dst: dst, log: log, stats: stats, e: e,
		place: place{name: job.Collection, db: dbNamed(e.source, job.Database).Name(), key: job.Key, main: true, cursor: from, kind: kindOf(from.Key), seen: map[string]seenDoc{},
			coll: jobColl(e.source, &job.Job, options.Collection().SetReadConcern(readconcern.Majority()))},
		pageN: PartSize(jc.PageSize), interval: job.ScanInterval, sweepEvery: job.SweepInterval,
		overlapMs: ms, overlapUnits: units,
		lastSweep: time.Now(), poke: make(chan struct{}, 1),
	}
	if s.interval <= 0 {
		s.interval = jobdef.DefaultScanInterval
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = jobdef.DefaultSweepInterval
	}
	if fields := job.StreamFields(); fields != nil {
		top, _, _ := strings.Cut(job.Key, ".")
		if !containsString(fields, top) {
			s.top = top
		}
	}
	seen := map[string]bool{}
	for _, d := range resolvedDeps(&job.Job, e.source.Name()) {
		ns := jobdef.Namespace(d.Database, d.Collection)
		if seen[ns] || (d.Collection == job.Collection && d.Database == s.place.db) {
			continue // its own documents' scan brings those changes
		}
		seen[ns] = true
		db := dbNamed(e.source, d.Database)
		r := &place{name: d.Collection, db: db.Name(), tokenName: d.Collection, seen: map[string]seenDoc{},
			key:  job.ScanKeyOf(d.Database, d.Collection, e.source.Name()),
			coll: db.Collection(d.Collection, options.Collection().SetReadConcern(readconcern.Majority()))}
		if db.Name() != e.source.Name() {
			r.tokenName = ns
		}
		r.cursor = relatedCursorOf(fromTok, r.tokenName)
		r.kind = kindOf(r.cursor.Key)
		s.related = append(s.related, r)
	}
	stats.Update(func(sn *status.JobSnapshot) {
		sn.Scan = &status.ScanState{Key: job.Key, IntervalSeconds: s.interval.Seconds(), SweepIntervalSeconds: s.sweepEvery.Seconds()}
		sn.Scan.SetCursor(cursorText(from), cursorTime(from))
	})
	return s
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// token is the position's token now: the cursors of every collection.
func (s *scanner) token() bson.Raw { return s.cursor.token(s.related...) }

// start sets the cursors a scan begins without: the job's own when it
// reindexes now (init), a related collection's always (its changes before
// now are in what the job's documents are joined with when sent).
func (s *scanner) start(ctx context.Context, reindex bool) error {
	if reindex {
		if err := s.init(ctx, &s.place); err != nil {
			return err
		}
	}
	for _, r := range s.related {
		if err := s.init(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// reset puts the cursors back to tok's (a feed reopened after an error),
// forgetting the windows' documents.
func (s *scanner) reset(tok bson.Raw) {
	if c, ok := scanCursorOf(tok); ok {
		s.cursor = c
	}
	clear(s.seen)
	for _, r := range s.related {
		if c := relatedCursorOf(tok, r.tokenName); !c.none() {
			r.cursor = c
		}
		clear(r.seen)
	}
}

// mark registers a chain's mark, handed over before any read that begins
// after this call (the chain has registered the chunk under it already).
func (s *scanner) mark(m string) {
	s.mu.Lock()
	s.marks = append(s.marks, m)
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// takeMarks returns the marks registered since the last call, as events
// of the job's watermark document.
func (s *scanner) takeMarks(state, job string) []bson.Raw {
	s.mu.Lock()
	marks := s.marks
	s.marks = nil
	s.mu.Unlock()
	if len(marks) == 0 {
		return nil
	}
	// A chunk handed over at its mark may land after a document of the
	// window read before it: the window's documents are sent again when
	// next read rather than judged unchanged against what may no longer be
	// the destination's last write of them.
	clear(s.seen)
	for _, r := range s.related {
		clear(r.seen)
	}
	tok := s.token()
	out := make([]bson.Raw, len(marks))
	for i, m := range marks {
		out[i], _ = bson.Marshal(bson.D{
			{Key: "_id", Value: tok},
			{Key: "operationType", Value: "update"},
			{Key: "ns", Value: bson.D{{Key: "db", Value: s.db}, {Key: "coll", Value: state}}},
			{Key: "documentKey", Value: bson.D{{Key: "_id", Value: watermarkKey(job)}}},
			{Key: "updateDescription", Value: bson.D{{Key: "updatedFields", Value: bson.D{{Key: "mark", Value: m}}}}},
		})
	}
	return out
}

// init sets the cursor of a job that has none and reindexes now: the
// greatest key the collection holds, so the scan goes on from there while
// the reindex reads everything up to it. Read before the reindex begins, so
// a document written meanwhile has a greater key and is scanned.
func (s *scanner) init(ctx context.Context, p *place) error {
	if !p.cursor.none() {
		return nil
	}
	for _, k := range []keyKind{keyDate, keyNumber} {
		var doc bson.Raw
		err := p.coll.FindOne(ctx, bson.D{{Key: p.key, Value: k.every()}},
			options.FindOne().SetSort(p.sortDesc()).SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: p.key, Value: 1}})).Decode(&doc)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return errs.Wrap(errs.Failed, s.job.Name, err, "scan: read the greatest %s of %s", p.key, p.name)
		}
		key, err := doc.LookupErr(strings.Split(p.key, ".")...)
		if err != nil || kindOf(key) != k {
			continue
		}
		p.cursor = scanCursor{Key: cloneValue(key), ID: cloneValue(doc.Lookup("_id"))}
		p.kind = k
		return nil
	}
	return nil
}

func (p *place) sortAsc() bson.D {
	return bson.D{{Key: p.key, Value: 1}, {Key: "_id", Value: 1}}
}

func (p *place) sortDesc() bson.D {
	return bson.D{{Key: p.key, Value: -1}, {Key: "_id", Value: -1}}
}

// feed is the scanner's stream.Feed: a pass, then the pause till the next,
// in which the sweep's pages and the chains' marks are handed over.
func (s *scanner) feed(state string) stream.Feed {
	return func(ctx context.Context, send func([]bson.Raw, bson.Raw) error) error {
		s.e.checkScanIndex(ctx, s)
		var sw *sweepWalk
		defer func() {
			if sw != nil {
				sw.stop()
			}
		}()
		for {
			for _, p := range append([]*place{&s.place}, s.related...) {
				if err := s.pass(ctx, state, p, send); err != nil {
					return err
				}
			}
			if err := send(nil, s.token()); err != nil {
				return err
			}
			s.stats.Update(func(sn *status.JobSnapshot) {
				if sn.Scan != nil {
					sn.Scan.Passes++
				}
			})
			if !s.counted {
				// Said from the first pass on, not a sweepInterval later.
				s.counted = true
				s.countUnscanned(ctx)
			}
			next := time.NewTimer(s.interval)
			for waiting := true; waiting; {
				if sw == nil && time.Since(s.lastSweep) >= s.sweepEvery {
					var err error
					if sw, err = s.startSweep(ctx); err != nil {
						next.Stop()
						return err
					}
				}
				var pages <-chan []bson.RawValue
				var done <-chan error
				if sw != nil {
					pages, done = sw.pages, sw.done
				}
				select {
				case <-ctx.Done():
					next.Stop()
					return ctx.Err()
				case <-s.poke:
					if evs := s.takeMarks(state, s.job.Name); len(evs) > 0 {
						if err := send(evs, nil); err != nil {
							return err
						}
					}
				case ids := <-pages:
					if err := s.sweepPage(ctx, state, ids, send); err != nil {
						next.Stop()
						return err
					}
				case err := <-done:
					sw = nil
					s.lastSweep = time.Now()
					s.swept(err)
				case <-next.C:
					waiting = false
				}
			}
		}
	}
}

// pass reads every document from the cursor less the overlap on, in pages
// by (key, _id), handing each page over with the marks registered before
// it was read.
func (s *scanner) pass(ctx context.Context, state string, p *place, send func([]bson.Raw, bson.Raw) error) error {
	filter := s.startFilter(ctx, p)
	if filter == nil {
		return s.passMarks(state, send) // no document holds the key yet
	}
	for {
		docs, err := s.find(ctx, p, filter)
		if err != nil {
			return err
		}
		evs := s.takeMarks(state, s.job.Name)
		var last scanCursor
		for _, d := range docs {
			key, err := d.LookupErr(strings.Split(p.key, ".")...)
			if err != nil || kindOf(key) != p.kind {
				continue // the filter's type bracket holds only the kind
			}
			last = scanCursor{Key: key, ID: d.Lookup("_id")}
			if cmpCursor(last, p.cursor) > 0 {
				p.cursor = scanCursor{Key: cloneValue(key), ID: cloneValue(last.ID)}
			}
			if !s.changed(p, d, key) {
				continue
			}
			evs = append(evs, s.docEvent(p, d, key))
			if len(evs) >= scanEventBatch {
				if err := send(evs, nil); err != nil {
					return err
				}
				evs = nil
			}
		}
		if len(evs) > 0 {
			if err := send(evs, nil); err != nil {
				return err
			}
		}
		if len(docs) < s.pageN || last.none() {
			return nil
		}
		filter = s.afterFilter(p, last)
	}
}

func (s *scanner) passMarks(state string, send func([]bson.Raw, bson.Raw) error) error {
	if evs := s.takeMarks(state, s.job.Name); len(evs) > 0 {
		return send(evs, nil)
	}
	return nil
}

// startFilter is a pass's first page: from the cursor less the overlap
// (inclusive), or, without an overlap, after the cursor; nil while no
// document holds a date or number key (then each pass looks again).
func (s *scanner) startFilter(ctx context.Context, p *place) bson.D {
	if p.cursor.none() {
		if p.kind == keyUnknown {
			if err := s.init(ctx, p); err != nil || p.cursor.none() {
				return nil
			}
			// The first keys: from the least of them, since every one is
			// newer than the reindex that found none.
			p.cursor = scanCursor{}
		}
		return bson.D{{Key: p.key, Value: p.kind.every()}}
	}
	from, ok := s.minusOverlap(p.cursor.Key)
	if !ok {
		return s.afterFilter(p, p.cursor)
	}
	s.prune(p, from)
	return bson.D{{Key: p.key, Value: bson.D{{Key: "$gte", Value: from}}}}
}

// afterFilter is the page after c in (key, _id) order: on a key every
// document shares, the _id moves the scan on page by page. A $gt on _id
// matches only _ids of c's own type bracket, so those of the types that
// sort after it (a string _id after a number) are asked for by type.
func (s *scanner) afterFilter(p *place, c scanCursor) bson.D {
	sameKey := bson.D{{Key: p.key, Value: c.Key}}
	if later := laterTypes(c.ID.Type); len(later) > 0 {
		sameKey = append(sameKey, bson.E{Key: "$or", Value: bson.A{
			sameBracketAfter(c.ID),
			bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: later}}}},
		}})
	} else {
		sameKey = append(sameKey, sameBracketAfter(c.ID)...)
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: p.key, Value: bson.D{{Key: "$gt", Value: c.Key}}}},
		sameKey,
	}}}
}

// minusOverlap is key less the job's overlap, false when there is none
// (0, or a decimal key).
func (s *scanner) minusOverlap(key bson.RawValue) (any, bool) {
	switch key.Type {
	case bson.TypeDateTime:
		// A key ahead of this clock (one document dated in the future)
		// would move every later pass past the writes of the present:
		// the pass starts at now at the latest, reading the future's
		// documents again (sent only when changed).
		at := min(key.DateTime(), time.Now().UnixMilli())
		if s.overlapMs <= 0 && at == key.DateTime() {
			return nil, false
		}
		return bson.DateTime(at - max(s.overlapMs, 0)), true
	case bson.TypeInt32:
		if s.overlapUnits <= 0 {
			return nil, false
		}
		return float64(key.Int32()) - s.overlapUnits, true
	case bson.TypeInt64:
		if s.overlapUnits <= 0 {
			return nil, false
		}
		return float64(key.Int64()) - s.overlapUnits, true
	case bson.TypeDouble:
		if s.overlapUnits <= 0 {
			return nil, false
		}
		return key.Double() - s.overlapUnits, true
	}
	return nil, false
}

// find reads one page.
func (s *scanner) find(ctx context.Context, p *place, filter bson.D) ([]bson.Raw, error) {
	opts := options.Find().SetSort(p.sortAsc()).SetLimit(int64(s.pageN)).SetBatchSize(int32(s.pageN))
	if proj := scanProjection(s.job); proj != nil && p.main {
		opts.SetProjection(proj)
	}
	cur, err := findTypes(ctx, p.coll, filter, opts)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, s.job.Name, err, "scan %s by %s", p.name, p.key)
	}
	defer cur.Close(ctx)
	var docs []bson.Raw
	for cur.Next(ctx) {
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, s.job.Name, err, "scan %s by %s", p.name, p.key)
	}
	return docs, nil
}

// scanProjection is the job's projection with the key in it, nil without
// fields.
func scanProjection(job *transform.Job) bson.D {
	p := stream.Projection(&job.Job)
	if p == nil {
		return nil
	}
	top, _, _ := strings.Cut(job.Key, ".")
	for _, e := range p {
		if e.Key == top {
			return p
		}
	}
	return append(p, bson.E{Key: top, Value: 1})
}

// changed says whether d is to be handed over: not a document of the
// overlap window read again as it was last handed over.
func (s *scanner) changed(p *place, d bson.Raw, key bson.RawValue) bool {
	if s.overlapMs <= 0 && s.overlapUnits <= 0 {
		return true
	}
	h := fnv.New64a()
	_, _ = h.Write(d)
	sum := h.Sum64()
	k := keyOf(d.Lookup("_id"))
	if old, ok := p.seen[k]; ok && old.sum == sum {
		return false
	}
	if len(p.seen) >= scanSeenMax {
		clear(p.seen)
	}
	p.seen[k] = seenDoc{key: cloneValue(key), sum: sum}
	return true
}

// prune forgets the documents of the window whose key fell below from.
func (s *scanner) prune(p *place, from any) {
	if len(p.seen) == 0 {
		return
	}
	var lo bson.RawValue
	t, b, err := bson.MarshalValue(from)
	if err != nil {
		return
	}
	lo = bson.RawValue{Type: t, Value: b}
	for k, v := range p.seen {
		if cmpKey(v.key, lo) < 0 {
			delete(p.seen, k)
		}
	}
}

// docEvent is d as a replace event: the whole document, its resume token
// the cursor after it, its wall time the key's when a date (the job's lag
// counts from the write), never in the future nor before the last
// interval.
func (s *scanner) docEvent(p *place, d bson.Raw, key bson.RawValue) bson.Raw {
	doc := d
	if s.top != "" && p.main {
		doc = withoutField(d, s.top)
	}
	// Clamped to the last interval before the read: an old key (a late
	// write, the overlap, a first pass from the least key) is no sign of
	// a lag of the job's, whose lag would then read months.
	now := time.Now()
	wall := now
	if key.Type == bson.TypeDateTime {
		if t := key.Time(); t.Before(wall) {
			wall = t
		}
		if floor := now.Add(-s.interval); wall.Before(floor) {
			wall = floor
		}
	}
	ev, _ := bson.Marshal(bson.D{
		{Key: "_id", Value: s.token()},
		{Key: "operationType", Value: "replace"},
		{Key: "ns", Value: bson.D{{Key: "db", Value: p.db}, {Key: "coll", Value: p.name}}},
		{Key: "documentKey", Value: bson.D{{Key: "_id", Value: d.Lookup("_id")}}},
		{Key: "fullDocument", Value: doc},
		{Key: "wallTime", Value: bson.NewDateTimeFromTime(wall)},
	})
	return ev
}

// withoutField is d without its top-level field name.
func withoutField(d bson.Raw, name string) bson.Raw {
	elems, err := d.Elements()
	if err != nil {
		return d
	}
	out := bson.D{}
	for _, e := range elems {
		if e.Key() != name {
			out = append(out, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	b, err := bson.Marshal(out)
	if err != nil {
		return d
	}
	return b
}

// cmpCursor orders two cursors by (key, _id); none is least.
func cmpCursor(a, b scanCursor) int {
	switch {
	case a.none() && b.none():
		return 0
	case a.none():
		return -1
	case b.none():
		return 1
	}
	if c := cmpKey(a.Key, b.Key); c != 0 {
		return c
	}
	return cmpKey(a.ID, b.ID)
}

// cmpKey compares two values of one kind as MongoDB sorts them: dates by
// time, numbers by value; other types by their bytes (the _id tie-break
// only needs a total order among values the server handed back in order).
func cmpKey(a, b bson.RawValue) int {
	if af, ok := numberOf(a); ok {
		if bf, ok := numberOf(b); ok {
			switch {
			case af < bf:
				return -1
			case af > bf:
				return 1
			}
			return 0
		}
	}
	if a.Type == bson.TypeDateTime && b.Type == bson.TypeDateTime {
		switch x, y := a.DateTime(), b.DateTime(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	if a.Type != b.Type {
		return int(a.Type) - int(b.Type)
	}
	return strings.Compare(string(a.Value), string(b.Value))
}

func numberOf(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}

// cursorText is the cursor for /status and the log: the key and _id in
// relaxed Extended JSON.
func cursorText(c scanCursor) string {
	if c.none() {
		return ""
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "key", Value: c.Key}, {Key: "_id", Value: c.ID}}, false, false)
	if err != nil {
		return ""
	}
	return string(b)
}

// cursorTime is the cursor's key as a time, zero when not a date.
func cursorTime(c scanCursor) time.Time {
	if c.Key.Type == bson.TypeDateTime {
		return c.Key.Time()
	}
	return time.Time{}
}

// sweepWalk lists the destination's ids (sink.Keys) a page at a time for
// the scanner, which checks each page against the collection itself, in
// order with its reads.
type sweepWalk struct {
	pages  chan []bson.RawValue
	done   chan error
	cancel context.CancelFunc
	ended  chan struct{}
}

func (w *sweepWalk) stop() {
	w.cancel()
	<-w.ended
}

// startSweep counts what the scan cannot see and starts the destination's
// walk; nil, without error, when the collection is gone (a sweep then would
// delete everything: the job's invalidation is the stream's business, and
// a scan says so and waits for the collection).
func (s *scanner) startSweep(ctx context.Context) (*sweepWalk, error) {
	names, err := s.coll.Database().ListCollectionNames(ctx, bson.D{{Key: "name", Value: s.job.Collection}})
	if err != nil {
		s.swept(errs.Wrap(errs.Failed, s.job.Name, err, "sweep: list collection %s", s.job.Collection))
		s.lastSweep = time.Now()
		return nil, nil
	}
	if len(names) == 0 {
		s.log.Warn("sweep skipped: the collection does not exist, and deleting every document of the destination is left to you", "collection", s.job.Collection)
		s.lastSweep = time.Now()
		return nil, nil
	}
	s.countUnscanned(ctx)
	wctx, cancel := context.WithCancel(ctx)
	w := &sweepWalk{pages: make(chan []bson.RawValue), done: make(chan error, 1), cancel: cancel, ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		w.done <- s.dst.Keys(wctx, func(ids []bson.RawValue) error {
			cp := make([]bson.RawValue, len(ids))
			for i, id := range ids {
				cp[i] = cloneValue(id)
			}
			select {
			case w.pages <- cp:
				return nil
			case <-wctx.Done():
				return wctx.Err()
			}
		})
	}()
	return w, nil
}

// sweepPage hands over as deletes the ids of one page of the destination
// the collection no longer holds, read now: a document inserted again
// after this read is scanned after it, so its write lands after the delete.
func (s *scanner) sweepPage(ctx context.Context, state string, ids []bson.RawValue, send func([]bson.Raw, bson.Raw) error) error {
	if len(ids) == 0 {
		return nil
	}
	gone, err := absentIDs(ctx, s.coll, ids)
	if err != nil {
		return errs.Wrap(errs.Failed, s.job.Name, err, "sweep: look up the destination's ids in %s", s.job.Collection)
	}
	evs := s.takeMarks(state, s.job.Name)
	tok := s.token()
	for _, id := range gone {
		delete(s.seen, keyOf(id))
		ev, _ := bson.Marshal(bson.D{
			{Key: "_id", Value: tok},
			{Key: "operationType", Value: "delete"},
			{Key: "ns", Value: bson.D{{Key: "db", Value: s.place.db}, {Key: "coll", Value: s.job.Collection}}},
			{Key: "documentKey", Value: bson.D{{Key: "_id", Value: id}}},
			{Key: "wallTime", Value: bson.NewDateTimeFromTime(time.Now())},
		})
		evs = append(evs, ev)
	}
	if len(gone) > 0 {
		n := int64(len(gone))
		s.stats.Update(func(sn *status.JobSnapshot) {
			if sn.Scan != nil {
				sn.Scan.SweptDeletes += n
			}
		})
	}
	if len(evs) == 0 {
		return nil
	}
	return send(evs, nil)
}

// swept notes a finished sweep (err: why it stopped short; the next one
// starts a sweepInterval later).
func (s *scanner) swept(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("sweep for deletes stopped short; the next one runs after sweepInterval", "error", err, "sweep_interval", s.sweepEvery)
	}
	now := time.Now()
	s.stats.Update(func(sn *status.JobSnapshot) {
		if sn.Scan != nil {
			sn.Scan.LastSweep = now
			if err == nil {
				sn.Scan.Sweeps++
			}
		}
	})
}

// countUnscanned counts the documents the scan never reads: without the
// key (or null), or with a key of another type than the scan's; /status
// shows them and the log says so once a run.
func (s *scanner) countUnscanned(ctx context.Context) {
	missing, err := s.coll.CountDocuments(ctx, bson.D{{Key: s.job.Key, Value: nil}})
	if err != nil {
		return
	}
	all, err := s.coll.CountDocuments(ctx, bson.D{})
	if err != nil {
		return
	}
	// Before any document holds a date or a number key, every key held is
	// of a type the scan cannot follow (an ISO date string, say): all of
	// them are counted, or such a collection would go unread unsaid.
	var typed int64
	if s.kind != keyUnknown {
		if typed, err = s.coll.CountDocuments(ctx, bson.D{{Key: s.job.Key, Value: s.kind.every()}}); err != nil {
			return
		}
	}
	other := max(all-missing-typed, 0)
	s.stats.Update(func(sn *status.JobSnapshot) {
		if sn.Scan != nil {
			sn.Scan.WithoutKey, sn.Scan.OtherType = missing, other
		}
	})
	if (missing > 0 || other > 0) && !s.saidOther {
		s.saidOther = true
		s.log.Warn(fmt.Sprintf("%d documents have no %s and %d hold one that is not a %s: the scan never reads them (a reindex does, the sweep deletes them when they go, `meilistream verify` finds them stale)",
			missing, s.job.Key, other, s.kind), "collection", s.job.Collection, "without_key", missing, "other_type", other)
	}
}

// checkScanIndex warns, once per job, collection and key in this process,
// when no index of a collection the scan reads (the job's own, each one it
// looks up) begins with the key: each pass then reads the whole
// collection. The index is the operator's to create.
func (e *Engine) checkScanIndex(ctx context.Context, s *scanner) {
	for _, p := range append([]*place{&s.place}, s.related...) {
		e.checkScanIndexOf(ctx, s, p)
	}
}

func (e *Engine) checkScanIndexOf(ctx context.Context, s *scanner, p *place) {
	ns := jobdef.Namespace(p.db, p.name)
	id := s.job.Name + "\x00" + ns + "\x00" + p.key
	if _, said := e.scanIndexSaid.Load(id); said {
		return
	}
	cur, err := p.coll.Indexes().List(ctx)
	if err != nil {
		return
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		key, ok := cur.Current.Lookup("key").DocumentOK()
		if !ok {
			continue
		}
		if el, err := key.IndexErr(0); err == nil && el.Key() == p.key {
			e.scanIndexSaid.Store(id, true)
			return
		}
	}
	if cur.Err() != nil {
		return
	}
	e.scanIndexSaid.Store(id, true)
	coll := fmt.Sprintf("db.getCollection(%q)", p.name)
	if p.db != e.source.Name() {
		coll = fmt.Sprintf("db.getSiblingDB(%q).getCollection(%q)", p.db, p.name)
	}
	s.log.Warn(fmt.Sprintf("no index of %s begins with %s: every scan pass reads the whole collection; create one (meilistream never does): %s.createIndex({%q: 1, \"_id\": 1})",
		ns, p.key, coll, p.key), "collection", ns, "key", p.key)
}

// absentIDs returns the ids of ids that coll does not hold.
func absentIDs(ctx context.Context, coll *mongo.Collection, ids []bson.RawValue) ([]bson.RawValue, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	have := make(map[string]bool, len(ids))
	for cur.Next(ctx) {
		have[jobdef.IDKey(cur.Current.Lookup("_id"))] = true
	}
	if err := cur.Err(); err != nil {
		return nil, err
	}
	var gone []bson.RawValue
	for _, id := range ids {
		if !have[jobdef.IDKey(id)] {
			gone = append(gone, cloneValue(id))
		}
	}
	return gone, nil
}

// ScanPosition reads a recorded position's token as a scan-mode job's
// cursor: its text (relaxed Extended JSON of the key and _id, "" for none
// yet), its key as a time when a date (zero otherwise), and false for a
// change stream's resume token (`meilistream status` shows either).
func ScanPosition(tok bson.Raw) (cursor string, at time.Time, ok bool) {
	c, ok := scanCursorOf(tok)
	if !ok {
		return "", time.Time{}, false
	}
	return cursorText(c), cursorTime(c), true
}
