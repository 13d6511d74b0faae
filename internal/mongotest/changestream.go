package mongotest

import (
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// event is one entry of the change history (the double's oplog). It is
// kept small: the benchmarks keep millions of them.
type event struct {
	seq  int64
	ts   bson.Timestamp
	wall bson.DateTime
	op   string // insert update replace delete drop rename dropDatabase create createIndexes dropIndexes
	*evNS
	*evExtra
	id  any
	doc []byte // inserted/replacement document, or the post-image of an update
	// postImages: the collection had changeStreamPreAndPostImages enabled.
	postImages bool
	// expanded events (create, createIndexes, dropIndexes) are only seen
	// by streams opened with showExpandedEvents (mongod 6.0+).
	expanded bool
}

// opNoop is a periodic no-op (oplog op "n", {msg: "periodic noop"}): in
// the history for its cluster time only, never shown to a stream.
const opNoop = "noop"

var noopNS = &evNS{}

// evNS is a namespace shared by the events of one collection.
type evNS struct {
	db, coll string
	uuid     bson.Binary
}

// evExtra holds what only some events carry.
type evExtra struct {
	toDB, toColl string
	upd          bson.D // updateDescription
	// pre is the document before an update, replace or delete, kept when
	// the collection has changeStreamPreAndPostImages enabled.
	pre  []byte
	desc bson.D // operationDescription of an expanded event
	// before is a modify event's stateBeforeChange.
	before bson.D
	// dropTarget is the UUID of the collection a rename replaced.
	dropTarget *bson.Binary
}

func (s *Server) lockWrite() { s.mu.Lock() }

// unlockWrite releases the write lock and wakes change-stream getMores
// waiting for new events.
func (s *Server) unlockWrite() {
	if s.dirty {
		close(s.notify)
		s.notify = make(chan struct{})
		s.dirty = false
	}
	s.mu.Unlock()
}

// appendEvent records a change (caller holds the write lock) and makes its
// cluster time the command's operationTime.
func (s *Server) appendEvent(x *cmdCtx, ev *event) {
	s.seq++
	ev.seq = s.seq
	ev.ts = s.tick()
	ev.wall = s.now()
	if ev.doc != nil && ev.op == "update" {
		if c := s.getColl(ev.db, ev.coll); c != nil {
			ev.postImages = c.postImages
		}
	}
	s.oplog = append(s.oplog, ev)
	s.countWrite(ev)
	s.dirty = true
	if x != nil {
		x.opTime = ev.ts
	}
	s.trimHistory()
}

func (s *Server) trimHistory() {
	k := len(s.oplog) - s.historySize
	if k <= 0 {
		return
	}
	s.lostTs = s.oplog[k-1].ts
	s.lostSeq = s.oplog[k-1].seq
	for i := 0; i < k; i++ {
		s.oplog[i] = nil
	}
	s.oplog = s.oplog[k:]
	if cap(s.oplog) > 4*len(s.oplog)+1024 {
		s.oplog = append(make([]*event, 0, len(s.oplog)*2), s.oplog...)
	}
}

// eventAt returns the retained event with the given seq, or nil.
func (s *Server) eventAt(seq int64) *event {
	i := seq - s.lostSeq - 1
	if i < 0 || i >= int64(len(s.oplog)) {
		return nil
	}
	return s.oplog[i]
}

// Resume tokens: {_data: "82" + %08X(ts.T) + %08X(ts.I) + %016X(seq) + %02X(kind)}.
// Like real tokens (resume_token.cpp) they start with the KeyString
// timestamp tag 0x82 and sort by cluster time; clients treat them as opaque.
const (
	tokHighWater  = 0xC0 // everything up to and including seq has been seen
	tokEvent      = 0x80 // the event seq
	tokInvalidate = 0x81 // the invalidate that follows event seq
	// tokFragment+i is fragment i (from 0) of event seq, split by
	// $changeStreamSplitLargeEvent.
	tokFragment  = 0x90
	maxFragments = 16
)

func makeToken(ts bson.Timestamp, seq int64, kind byte) bson.D {
	return bson.D{{Key: "_data", Value: fmt.Sprintf("82%08X%08X%016X%02X", ts.T, ts.I, uint64(seq), kind)}}
}

type token struct {
	ts   bson.Timestamp
	seq  int64
	kind byte
}

func parseToken(v any) (token, error) {
	d, ok := v.(bson.D)
	if !ok {
		return token{}, cmdErrf(40647, "Location40647", "Bad resume token: _data of missing or of wrong type. Expected string, got %s", typeName(v))
	}
	dv, ok := docGet(d, "_data")
	str, isStr := dv.(string)
	if !ok || !isStr {
		return token{}, cmdErrf(40647, "Location40647", "Bad resume token: _data of missing or of wrong type. Expected string, got %s", typeName(dv))
	}
	b, err := hex.DecodeString(str)
	if err != nil {
		return token{}, cmdErrf(9, "FailedToParse", "resume token string was not a valid hex string")
	}
	if len(b) != 18 || b[0] != 0x82 {
		return token{}, &cmdError{code: 280, name: "ChangeStreamFatalError", msg: "cannot resume stream; the resume token was not found. " + formatValue(d), labels: []string{"NonResumableChangeStreamError"}}
	}
	be32 := func(p []byte) uint32 { return uint32(p[0])<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3]) }
	var seq uint64
	for _, c := range b[9:17] {
		seq = seq<<8 | uint64(c)
	}
	return token{ts: bson.Timestamp{T: be32(b[1:5]), I: be32(b[5:9])}, seq: int64(seq), kind: b[17]}, nil
}

func historyLost() error {
	return &cmdError{code: 286, name: "ChangeStreamHistoryLost",
		msg:    "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
		labels: []string{"NonResumableChangeStreamError"}}
}

type changeStream struct {
	db, coll     string // coll "" for a database stream
	cluster      bool
	fullDocument string
	beforeChange string
	pos          int64 // last seq scanned
	posTs        bson.Timestamp
	stages       []stage
	ns           string
	showExpanded bool
	// minTs skips events before startAtOperationTime when it lies ahead
	// of the newest event.
	minTs bson.Timestamp
	// invalidateNext: the stream resumed right after its invalidating
	// event, so the invalidate comes first.
	invalidateNext *event
	// foreignToken: the stream resumed from the token of an event it does
	// not show (another namespace's). mongod's
	// DocumentSourceChangeStreamEnsureResumeTokenPresent expects the
	// token's event first and fails with 280 at the first event of the
	// stream's own that comes instead.
	foreignToken any
	// split: the pipeline ends with $changeStreamSplitLargeEvent.
	split bool
	// skipSeq/skipFrags: resumed from a fragment's token, the first
	// skipFrags fragments of event skipSeq were already seen.
	skipSeq   int64
	skipFrags int
	// queue holds what was rendered and not yet returned: the fragments
	// of a split event beyond the batch that returned the first ones (the
	// split stage's queue, document_source_change_stream_split_large_event.cpp),
	// or an event that did not fit its batch (mongod stashes it for the
	// next getMore). invalidating: the invalidate is in the queue; the
	// cursor ends once it is returned.
	queue        []queued
	invalidating bool
}

// queued is a rendered document and its resume token.
type queued struct {
	raw []byte
	tok bson.D
}

// highWater is the stream's high-water-mark token: everything up to pos
// was seen. When startAtOperationTime lies ahead, the token carries that
// time (as mongod's, which never lies before the stream's start), so a
// resume from it still skips the writes before the start.
func (cs *changeStream) highWater() bson.D {
	ts := cs.posTs
	if ts.Before(cs.minTs) {
		ts = cs.minTs
	}
	return makeToken(ts, cs.pos, tokHighWater)
}

func (cs *changeStream) inScope(ev *event) bool {
	switch {
	case ev.op == opNoop:
		return false
	case cs.cluster:
		// mongod leaves out the internal databases and, as a database
		// stream does, every system.* collection (SERVER-34086,
		// SERVER-35401).
		return ev.db != "admin" && ev.db != "config" && ev.db != "local" && !strings.HasPrefix(ev.coll, "system.") || cs.renamedOnto(ev)
	case cs.coll == "":
		return ev.db == cs.db && !strings.HasPrefix(ev.coll, "system.") || cs.renamedOnto(ev)
	default:
		return ev.db == cs.db && ev.coll == cs.coll || cs.renamedOnto(ev)
	}
}

// renamedOnto: ev renames a collection onto a watched namespace. mongod's
// stream filter matches {"o.renameCollection": {$exists: true}, "o.to":
// nsRegex} ("Relevant collection was overwritten",
// change_stream_filter_helpers.cpp buildOperationFilter), and a
// single-collection stream is invalidated by it (buildInvalidationFilter).
func (cs *changeStream) renamedOnto(ev *event) bool {
	if cs.cluster && ev.op == "rename" {
		return ev.toDB != "admin" && ev.toDB != "config" && ev.toDB != "local" && !strings.HasPrefix(ev.toColl, "system.")
	}
	if ev.op != "rename" || ev.toDB != cs.db {
		return false
	}
	if cs.coll == "" {
		return !strings.HasPrefix(ev.toColl, "system.")
	}
	return ev.toColl == cs.coll
}

// invalidates reports whether ev ends the stream (reference note §4.5):
// drop/rename of the watched collection, dropDatabase of the watched
// database; cluster streams are never invalidated.
func (cs *changeStream) invalidates(ev *event) bool {
	switch {
	case cs.cluster:
		return false
	case cs.coll == "":
		return ev.op == "dropDatabase" && ev.db == cs.db
	default:
		return (ev.op == "drop" || ev.op == "rename") && ev.db == cs.db && ev.coll == cs.coll || cs.renamedOnto(ev)
	}
}

func (s *Server) openChangeStream(x *cmdCtx, specV any, user bson.A, batchSize int) (bson.D, error) {
	spec, ok := specV.(bson.D)
	if !ok {
		return nil, cmdErrf(50808, "Location50808", "$changeStream stage expects a document as argument")
	}
	cs := &changeStream{db: x.db, fullDocument: "default", beforeChange: "off"}
	var resumeAfter, startAfter, startAt any
	for _, e := range spec {
		switch e.Key {
		case "fullDocument":
			v, _ := e.Value.(string)
			switch v {
			case "default", "updateLookup", "whenAvailable", "required":
				cs.fullDocument = v
			default:
				return nil, cmdErrf(2, "BadValue", "unrecognized value for fullDocument: '%s'", formatValue(e.Value))
			}
		case "fullDocumentBeforeChange":
			v, _ := e.Value.(string)
			switch v {
			case "off", "whenAvailable", "required":
				cs.beforeChange = v
			default:
				return nil, cmdErrf(2, "BadValue", "unrecognized value for fullDocumentBeforeChange: '%s'", formatValue(e.Value))
			}
		case "resumeAfter":
			resumeAfter = e.Value
		case "startAfter":
			startAfter = e.Value
		case "startAtOperationTime":
			startAt = e.Value
		case "allChangesForCluster":
			cs.cluster = truthy(e.Value)
		case "showExpandedEvents":
			cs.showExpanded = truthy(e.Value)
		case "allowToRunOnConfigDB", "allowToRunOnSystemNS", "showSystemEvents", "showMigrationEvents":
		default:
			return nil, cmdErrf(40415, "Location40415", "BSON field '$changeStream.%s' is an unknown field.", e.Key)
		}
	}
	name, isColl := x.cmd[0].Value.(string)
	switch {
	case cs.cluster:
		if x.db != "admin" || isColl {
			return nil, cmdErrf(40415, "Location40415", "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name")
		}
		cs.ns = "admin.$cmd.aggregate"
	case x.db == "admin" || x.db == "local" || x.db == "config":
		return nil, cmdErrf(73, "InvalidNamespace", "$changeStream may not be opened on the internal %s database", x.db)
	case isColl:
		if strings.HasPrefix(name, "system.") {
			return nil, cmdErrf(73, "InvalidNamespace", "$changeStream may not be opened on the internal %s.%s collection", x.db, name)
		}
		cs.coll = name
		cs.ns = nsString(x.db, name)
	default:
		cs.ns = x.db + ".$cmd.aggregate"
	}
	if resumeAfter != nil && startAfter != nil {
		return nil, cmdErrf(50865, "Location50865", "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage")
	}
	if startAt != nil && (resumeAfter != nil || startAfter != nil) {
		return nil, cmdErrf(40674, "Location40674", "Only one type of resume option is allowed, but multiple were found")
	}
	for i, st := range user {
		sd, ok := st.(bson.D)
		if !ok || len(sd) != 1 {
			return nil, cmdErrf(40323, "Location40323", "A pipeline stage specification object must contain exactly one field.")
		}
		switch sd[0].Key {
		case "$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith":
		case "$changeStreamSplitLargeEvent":
			// New in 7.0 and 6.0.9; last, with an empty spec, as mongod
			// requires (document_source_change_stream_split_large_event.cpp):
			// events over 16 MB are split into fragments (see splitEvent).
			if !s.splitsLargeEvents() {
				return nil, cmdErrf(40324, "Location40324", "Unrecognized pipeline stage name: '%s'", sd[0].Key)
			}
			if spec, ok := sd[0].Value.(bson.D); !ok || len(spec) != 0 {
				return nil, cmdErrf(7182800, "Location7182800", "$changeStreamSplitLargeEvent spec should be an empty object")
			}
			if i != len(user)-1 {
				return nil, cmdErrf(7182802, "Location7182802", "$changeStreamSplitLargeEvent must be the last stage in the pipeline")
			}
			user = user[:i]
			cs.split = true
		default:
			// A name mongod does not know is refused as in any pipeline
			// (40324); a known stage is not allowed after $changeStream.
			if !knownStages[sd[0].Key] {
				return nil, cmdErrf(40324, "Location40324", "Unrecognized pipeline stage name: '%s'", sd[0].Key)
			}
			return nil, cmdErrf(20, "IllegalOperation", "Stage %s is not permitted in a $changeStream pipeline", sd[0].Key)
		}
	}
	stages, err := compilePipeline(user, x.ec)
	if err != nil {
		return nil, err
	}
	cs.stages = stages

	s.mu.RLock()
	err = func() error {
		switch {
		case resumeAfter != nil || startAfter != nil:
			tv := resumeAfter
			if tv == nil {
				tv = startAfter
			}
			tok, err := parseToken(tv)
			if err != nil {
				return err
			}
			if tok.kind == tokInvalidate && resumeAfter != nil {
				return cmdErrf(260, "InvalidResumeToken", "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification.")
			}
			if tok.seq < s.lostSeq {
				return historyLost()
			}
			// A token this server never issued (another server's, or one
			// whose event is not the one at its position) cannot be
			// resumed from: 280, as mongod answers when the token's event
			// is not found
			// (document_source_change_stream_ensure_resume_token_present.cpp).
			notFound := &cmdError{code: 280, name: "ChangeStreamFatalError", msg: "cannot resume stream; the resume token was not found. " + formatValue(tv), labels: []string{"NonResumableChangeStreamError"}}
			if tok.seq > s.seq {
				return notFound
			}
			if ev := s.eventAt(tok.seq); ev != nil {
				// A high-water mark may carry a later time (highWater).
				if ev.ts != tok.ts && (tok.kind != tokHighWater || tok.ts.Before(ev.ts)) {
					return notFound
				}
				if tok.kind == tokEvent && cs.invalidates(ev) {
					cs.invalidateNext = ev
				}
				if tok.kind == tokEvent && !cs.inScope(ev) {
					cs.foreignToken = tv
				}
			}
			cs.pos, cs.posTs = tok.seq, tok.ts
			if tok.kind >= tokFragment && tok.kind < tokFragment+maxFragments {
				// Resuming inside a split event: it is read again, from
				// the fragment after the token's.
				if !cs.split {
					return &cmdError{code: 280, name: "ChangeStreamFatalError", msg: "Attempting to resume a change stream using a resume token of a split event fragment, but the pipeline does not contain $changeStreamSplitLargeEvent", labels: []string{"NonResumableChangeStreamError"}}
				}
				cs.pos = tok.seq - 1
				cs.skipSeq, cs.skipFrags = tok.seq, int(tok.kind-tokFragment)+1
			}
			if tok.kind == tokHighWater {
				// Nothing before the token's time: a no-op for ordinary
				// marks (later events have later times), the start time
				// of a stream that began ahead of the newest write.
				cs.minTs = tok.ts
			}
		case startAt != nil:
			ts, ok := startAt.(bson.Timestamp)
			if !ok {
				return cmdErrf(14, "TypeMismatch", "BSON field '$changeStream.startAtOperationTime' is the wrong type '%s', expected type 'timestamp'", typeName(startAt))
			}
			// Inclusive: events with clusterTime >= ts (change-streams spec).
			if s.lostSeq > 0 && !s.lostTs.Before(ts) {
				return historyLost()
			}
			cs.pos, cs.posTs = s.lostSeq, s.lostTs
			cs.minTs = ts
			for _, ev := range s.oplog {
				if !ev.ts.Before(ts) {
					break
				}
				cs.pos, cs.posTs = ev.seq, ev.ts
			}
		default:
			cs.pos, cs.posTs = s.seq, s.lastTs
		}
		return nil
	}()
	if err != nil {
		s.mu.RUnlock()
		return nil, err
	}
	n := batchSize
	if n < 0 {
		n = 101
	}
	var batch bson.A
	var pbrt bson.D
	var invalidated bool
	if n == 0 {
		batch, pbrt = bson.A{}, cs.highWater()
	} else {
		batch, pbrt, invalidated, err = s.collectEvents(cs, n)
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	var id int64
	if !invalidated {
		id = s.registerCursor(&cursor{ns: cs.ns, stream: cs})
	}
	return bson.D{{Key: "cursor", Value: bson.D{
		{Key: "firstBatch", Value: batch},
		{Key: "postBatchResumeToken", Value: pbrt},
		{Key: "id", Value: id},
		{Key: "ns", Value: cs.ns},
	}}}, nil
}

// collectEvents gathers up to max events after cs.pos (caller holds s.mu).
// It returns the batch, the postBatchResumeToken, and whether the stream
// was invalidated.
//
// A batch takes documents while it stays within maxBatchBytes, the first
// one always (FindCommon::haveSpaceForNext); a document that does not fit
// waits in the stream's queue for the next getMore, as do the fragments
// of a split event beyond the first that fit. The postBatchResumeToken is
// the token of the last document returned while anything waits, else the
// high-water mark of everything scanned (a resume token of the last
// event when it was the last one scanned).
func (s *Server) collectEvents(cs *changeStream, max int) (bson.A, bson.D, bool, error) {
	batch := bson.A{}
	size := 0
	var lastTok, pbrt bson.D
	// drain moves what waits into the batch while it fits; true when the
	// batch is full.
	drain := func() bool {
		for len(cs.queue) > 0 {
			q := cs.queue[0]
			if max > 0 && len(batch) >= max || len(batch) > 0 && size+len(q.raw) > maxBatchBytes {
				return true
			}
			batch = append(batch, rawDoc(q.raw))
			size += len(q.raw)
			lastTok, pbrt = q.tok, q.tok
			cs.queue[0] = queued{}
			cs.queue = cs.queue[1:]
		}
		cs.queue = nil
		return false
	}
	done := func(invalidated bool) (bson.A, bson.D, bool, error) {
		switch {
		case len(cs.queue) > 0:
			pbrt = lastTok
		case invalidated:
		case pbrt == nil:
			pbrt = cs.highWater()
		}
		return batch, pbrt, invalidated, nil
	}
	if drain() {
		return done(false)
	}
	if cs.invalidating {
		return done(true)
	}
	invalidate := func(ev *event) error {
		tok := makeToken(ev.ts, ev.seq, tokInvalidate)
		doc := bson.D{{Key: "_id", Value: tok}, {Key: "operationType", Value: "invalidate"}, {Key: "clusterTime", Value: ev.ts}, {Key: "wallTime", Value: ev.wall}}
		out, err := s.render(cs, doc, tok, -1)
		if err != nil {
			return err
		}
		cs.queue = append(cs.queue, out...)
		cs.invalidating = true
		return nil
	}
	if cs.pos < s.lostSeq {
		// An open stream whose next entry was trimmed: mongod's oplog
		// CollectionScan cannot restore its position and the getMore fails
		// with CappedPositionLost (136), no label (collection_scan.cpp;
		// error_codes.yml gives 136 no category). Only opening or
		// resuming from such a point is 286 (openChangeStream).
		return nil, nil, false, &cmdError{code: 136, name: "CappedPositionLost",
			msg: fmt.Sprintf("Executor error during getMore :: caused by :: CollectionScan died due to position in capped collection being deleted. Last seen record id: RecordId(%d)", cs.pos)}
	}
	if ev := cs.invalidateNext; ev != nil {
		cs.invalidateNext = nil
		if err := invalidate(ev); err != nil {
			return nil, nil, false, err
		}
		return done(!drain())
	}
	for i := cs.pos - s.lostSeq; i < int64(len(s.oplog)); i++ {
		if max > 0 && len(batch) >= max || size >= maxBatchBytes {
			break
		}
		ev := s.oplog[i]
		cs.pos, cs.posTs = ev.seq, ev.ts
		pbrt = nil
		if !cs.inScope(ev) || (ev.expanded && !cs.showExpanded) || ev.ts.Before(cs.minTs) {
			continue
		}
		if cs.foreignToken != nil {
			return nil, nil, false, &cmdError{code: 280, name: "ChangeStreamFatalError", msg: "cannot resume stream; the resume token was not found. " + formatValue(cs.foreignToken), labels: []string{"NonResumableChangeStreamError"}}
		}
		doc, err := s.eventDoc(cs, ev)
		if err != nil {
			return nil, nil, false, err
		}
		out, err := s.render(cs, doc, makeToken(ev.ts, ev.seq, tokEvent), ev.seq)
		if err != nil {
			return nil, nil, false, err
		}
		cs.queue = append(cs.queue, out...)
		if cs.invalidates(ev) {
			if err := invalidate(ev); err != nil {
				return nil, nil, false, err
			}
			return done(!drain())
		}
		if drain() {
			break
		}
	}
	return done(false)
}

// render runs the stream's stages on one event and returns what the
// stream shows of it: nothing, the event, or the fragments of a split
// event (those after the resume point when the stream resumed inside it).
// Without $changeStreamSplitLargeEvent an event larger than mongod's
// internal limit fails with 10334 BSONObjectTooLarge, as Document::toBson
// does; with it, an event over kBSONObjMaxChangeEventSize (16 MB + 8 KB)
// is split. Resuming from a fragment of an event that the stream no
// longer splits, or splits into fewer fragments, is 280
// (DocumentSourceChangeStreamSplitLargeEvent::_handleResumeAfterSplit and
// doGetNext; jstests/change_streams/split_large_event.js).
func (s *Server) render(cs *changeStream, doc bson.D, tok bson.D, seq int64) ([]queued, error) {
	resuming := seq > 0 && seq == cs.skipSeq
	if resuming {
		cs.skipSeq = 0
	}
	fatal := func(msg string) error {
		return &cmdError{code: 280, name: "ChangeStreamFatalError", msg: msg, labels: []string{"NonResumableChangeStreamError"}}
	}
	out, err := runStages(cs.stages, []bson.D{doc})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if resuming {
			return nil, fatal("cannot resume stream; the resume token was not found. " + formatValue(tok))
		}
		return nil, nil
	}
	id, _ := docGet(out[0], "_id")
	if compareValues(id, tok) != 0 {
		return nil, fatal("Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. Modifying the _id field of an event makes it impossible to resume the stream from that point. Only transformations that retain the unmodified _id field are allowed.")
	}
	raw := encodeDoc(out[0])
	if cs.split && len(raw) > maxChangeEventSize {
		frags, toks, err := splitEvent(out[0], tok, maxChangeEventSize-len(encodeDoc(tok)))
		if err != nil {
			return nil, err
		}
		first := 0
		if resuming {
			first = cs.skipFrags // the token's fragment and those before it
			if first > len(frags) {
				return nil, fatal("Attempted to resume from a split event, but the resumed stream produced a different split. Ensure that the pipeline used to resume is the same as the original")
			}
		}
		q := make([]queued, 0, len(frags)-first)
		for i := first; i < len(frags); i++ {
			q = append(q, queued{raw: frags[i], tok: toks[i]})
		}
		return q, nil
	}
	if resuming {
		return nil, fatal("Attempted to resume from a split event fragment, but the event in the resumed stream was not large enough to be split")
	}
	if len(raw) > maxInternalBSON {
		return nil, cmdErrf(10334, "BSONObjectTooLarge", "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and %d(16MB) First element: _id: %s", len(raw), len(raw), maxInternalBSON, formatValue(tok))
	}
	return []queued{{raw: raw, tok: tok}}, nil
}

// eventDoc renders an event for a stream, fields in mongod's order
// (change_stream_event_transform.cpp).
func (s *Server) eventDoc(cs *changeStream, ev *event) (bson.D, error) {
	tok := makeToken(ev.ts, ev.seq, tokEvent)
	d := make(bson.D, 0, 9)
	if ev.op == "rename" {
		d = append(d, bson.E{Key: "to", Value: bson.D{{Key: "db", Value: ev.toDB}, {Key: "coll", Value: ev.toColl}}})
	}
	d = append(d,
		bson.E{Key: "_id", Value: tok},
		bson.E{Key: "operationType", Value: ev.op},
		bson.E{Key: "clusterTime", Value: ev.ts},
	)
	if cs.showExpanded && ev.uuid.Data != nil {
		d = append(d, bson.E{Key: "collectionUUID", Value: ev.uuid})
	}
	d = append(d, bson.E{Key: "wallTime", Value: ev.wall})
	ns := bson.D{{Key: "db", Value: ev.db}}
	if ev.op != "dropDatabase" {
		ns = append(ns, bson.E{Key: "coll", Value: ev.coll})
	}
	// A stream with a pipeline of its own gets decoded documents, so that
	// its stages can see into fullDocument ($match on "fullDocument.x",
	// $expr on "$fullDocument.x", $project of "fullDocument.x"); without
	// one the stored bytes are passed through as they are.
	doc := func(raw []byte) any {
		if len(cs.stages) > 0 {
			return mustDecode(raw)
		}
		return rawDoc(raw)
	}
	switch ev.op {
	case "insert", "replace":
		d = append(d, bson.E{Key: "fullDocument", Value: doc(ev.doc)})
	case "update":
		switch cs.fullDocument {
		case "updateLookup":
			// Looked up when the event is read, so it is the current
			// document (or null if it is gone), as with mongod.
			var cur any
			if c := s.getColl(ev.db, ev.coll); c != nil {
				if n := c.docs.get(ev.id); n != nil {
					cur = doc(n.raw)
				}
			}
			d = append(d, bson.E{Key: "fullDocument", Value: cur})
		case "whenAvailable", "required":
			if ev.postImages {
				d = append(d, bson.E{Key: "fullDocument", Value: doc(ev.doc)})
			} else if cs.fullDocument == "required" {
				return nil, cmdErrf(47, "NoMatchingDocument", "Change stream was configured to require a post-image for all update, delete and replace events, but the post-image was not found for event: %s", formatValue(tok))
			} else {
				d = append(d, bson.E{Key: "fullDocument", Value: nil})
			}
		}
	}
	d = append(d, bson.E{Key: "ns", Value: ns})
	switch ev.op {
	case "insert", "update", "replace", "delete":
		d = append(d, bson.E{Key: "documentKey", Value: bson.D{{Key: "_id", Value: ev.id}}})
		if cs.beforeChange != "off" && ev.op != "insert" {
			switch {
			case ev.evExtra != nil && ev.pre != nil:
				d = append(d, bson.E{Key: "fullDocumentBeforeChange", Value: doc(ev.pre)})
			case cs.beforeChange == "required":
				return nil, cmdErrf(47, "NoMatchingDocument", "Change stream was configured to require a pre-image for all update, delete and replace events, but the pre-image was not found for event: %s", formatValue(tok))
			default:
				d = append(d, bson.E{Key: "fullDocumentBeforeChange", Value: nil})
			}
		}
	}
	if cs.showExpanded {
		switch {
		case ev.evExtra != nil && ev.desc != nil:
			d = append(d, bson.E{Key: "operationDescription", Value: ev.desc})
		case ev.op == "rename":
			desc := bson.D{{Key: "to", Value: bson.D{{Key: "db", Value: ev.toDB}, {Key: "coll", Value: ev.toColl}}}}
			if ev.dropTarget != nil {
				desc = append(desc, bson.E{Key: "dropTarget", Value: *ev.dropTarget})
			}
			d = append(d, bson.E{Key: "operationDescription", Value: desc})
		}
		if ev.evExtra != nil && ev.before != nil {
			d = append(d, bson.E{Key: "stateBeforeChange", Value: ev.before})
		}
	}
	if ev.op == "update" {
		upd := ev.upd
		if cs.showExpanded {
			if dp := disambiguatedPaths(ev.upd, ev.doc); dp != nil {
				upd = append(append(bson.D{}, upd...), bson.E{Key: "disambiguatedPaths", Value: dp})
			}
		}
		d = append(d, bson.E{Key: "updateDescription", Value: upd})
	}
	return d, nil
}

// knownStages are the aggregation stage names mongod 7.0 parses, whether or
// not this server runs them.
var knownStages = map[string]bool{
	"$addFields": true, "$bucket": true, "$bucketAuto": true, "$changeStream": true,
	"$changeStreamSplitLargeEvent": true, "$collStats": true, "$count": true, "$currentOp": true,
	"$densify": true, "$documents": true, "$facet": true, "$fill": true, "$geoNear": true,
	"$graphLookup": true, "$group": true, "$indexStats": true, "$limit": true,
	"$listLocalSessions": true, "$listSampledQueries": true, "$listSearchIndexes": true,
	"$listSessions": true, "$lookup": true, "$match": true, "$merge": true, "$out": true,
	"$planCacheStats": true, "$project": true, "$redact": true, "$replaceRoot": true,
	"$replaceWith": true, "$sample": true, "$search": true, "$searchMeta": true, "$set": true,
	"$setWindowFields": true, "$shardedDataDistribution": true, "$skip": true, "$sort": true,
	"$sortByCount": true, "$unionWith": true, "$unset": true, "$unwind": true, "$vectorSearch": true,
}

// disambiguatedPaths is updateDescription.disambiguatedPaths, which streams
// with showExpandedEvents get (mongod 6.1+): for each updated or removed
// path with a component that is a numeric field name (which a reader would
// take for an array index), the path's components, array indices as
// integers and field names as strings. nil when no path is ambiguous. The
// components' kinds are read from the document after the update.
func disambiguatedPaths(upd bson.D, post []byte) bson.D {
	var paths []string
	if v, ok := docGet(upd, "updatedFields"); ok {
		if d, ok := v.(bson.D); ok {
			for _, e := range d {
				paths = append(paths, e.Key)
			}
		}
	}
	if v, ok := docGet(upd, "removedFields"); ok {
		if a, ok := v.(bson.A); ok {
			for _, e := range a {
				if p, ok := e.(string); ok {
					paths = append(paths, p)
				}
			}
		}
	}
	var doc bson.D
	var out bson.D
	for _, p := range paths {
		parts := strings.Split(p, ".")
		ambiguous := false
		comps := make(bson.A, len(parts))
		if doc == nil && post != nil {
			doc = mustDecode(post)
		}
		var cur any = doc
		for i, part := range parts {
			_, numErr := strconv.Atoi(part)
			switch x := cur.(type) {
			case bson.A:
				n, _ := strconv.Atoi(part)
				comps[i] = int32(n)
				if n >= 0 && n < len(x) {
					cur = x[n]
				} else {
					cur = nil
				}
				continue
			case bson.D:
				cur, _ = docGet(x, part)
			default:
				cur = nil
			}
			comps[i] = part
			if numErr == nil {
				ambiguous = true
			}
		}
		if ambiguous {
			out = append(out, bson.E{Key: p, Value: comps})
		}
	}
	return out
}

// streamGetMore blocks until events exist or maxTimeMS (default 1000 ms,
// getmore_cmd.cpp) passes, then replies with nextBatch and
// postBatchResumeToken.
func (s *Server) streamGetMore(x *cmdCtx, cur *cursor, batchSize int) (bson.D, error) {
	wait := time.Second
	if v, ok := x.get("maxTimeMS"); ok {
		if ms, ok := toInt64(v); ok && ms > 0 {
			wait = time.Duration(ms) * time.Millisecond
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	cs := cur.stream
	for {
		s.mu.RLock()
		batch, pbrt, invalidated, err := s.collectEvents(cs, batchSize)
		ch := s.notify
		s.mu.RUnlock()
		if err != nil {
			s.dropCursor(cur.id)
			return nil, err
		}
		if len(batch) > 0 || invalidated {
			return s.streamReply(cur, batch, pbrt, invalidated), nil
		}
		select {
		case <-ch:
			continue
		case <-timer.C:
			return s.streamReply(cur, batch, pbrt, false), nil
		case <-x.c.done:
			return s.streamReply(cur, batch, pbrt, false), nil
		case <-s.closed:
			return s.streamReply(cur, batch, pbrt, false), nil
		}
	}
}

func (s *Server) streamReply(cur *cursor, batch bson.A, pbrt bson.D, invalidated bool) bson.D {
	id := cur.id
	if invalidated {
		s.dropCursor(cur.id)
		id = 0
	}
	return bson.D{{Key: "cursor", Value: bson.D{
		{Key: "nextBatch", Value: batch},
		{Key: "postBatchResumeToken", Value: pbrt},
		{Key: "id", Value: id},
		{Key: "ns", Value: cur.ns},
	}}}
}

// maxChangeEventSize is kBSONObjMaxChangeEventSize
// (document_source_change_stream_split_large_event.h): BSONObjMaxInternalSize
// less 8 KB. $changeStreamSplitLargeEvent splits an event larger than it,
// into fragments of at most it less the size of the event's resume token
// (room for the postBatchResumeToken in the reply).
const maxChangeEventSize = maxInternalBSON - 8*1024

// splitEvent cuts an event into fragments as mongod's
// $changeStreamSplitLargeEvent does (change_stream_split_event_helpers.cpp
// splitChangeEvent): the top-level fields but _id ordered by their size,
// then name (a deterministic greedy packing that puts as many fields as
// fit in the first fragment), each fragment led by its own resume token
// (the event's, with the fragment's number) and splitEvent {fragment, of}.
// A fragment's size counts its _id, its splitEvent and its sort key
// (toBsonWithMetaData: $sortKey, the token again). A field too large for
// any fragment fails with 7182500; the split never recurses into it.
func splitEvent(doc bson.D, tok bson.D, maxFrag int) ([][]byte, []bson.D, error) {
	t, err := parseToken(tok)
	if err != nil {
		return nil, nil, err
	}
	type field struct {
		e    bson.E
		size int
	}
	var fields []field
	for _, f := range doc {
		if f.Key != "_id" {
			fields = append(fields, field{f, len(appendElem(nil, f.Key, f.Value))})
		}
	}
	if len(fields) == 0 {
		return nil, nil, cmdErrf(7182502, "Location7182502", "Cannot split an empty event or an event containing solely '_id' field")
	}
	sort.SliceStable(fields, func(i, j int) bool {
		if fields[i].size != fields[j].size {
			return fields[i].size < fields[j].size
		}
		return fields[i].e.Key < fields[j].e.Key
	})
	fragTok := func(i int) bson.D { return makeToken(t.ts, t.seq, byte(tokFragment+i)) }
	head := func(i int) bson.D {
		return bson.D{{Key: "_id", Value: fragTok(i)}, {Key: "splitEvent", Value: bson.D{{Key: "fragment", Value: int32(i + 1)}, {Key: "of", Value: int32(0)}}}}
	}
	var groups []bson.D
	for k := 0; k < len(fields); {
		i := len(groups)
		size := len(encodeDoc(append(head(i), bson.E{Key: "$sortKey", Value: bson.A{fragTok(i)}})))
		g := head(i)
		for {
			g = append(g, fields[k].e)
			size += fields[k].size
			k++
			if k == len(fields) || size+fields[k].size > maxFrag {
				break
			}
		}
		if size > maxFrag {
			return nil, nil, cmdErrf(7182500, "Location7182500", "Splitting change event failed: fragment size %d is greater than maximum allowed fragment size %d", size, maxFrag)
		}
		groups = append(groups, g)
	}
	if len(groups) > maxFragments {
		return nil, nil, cmdErrf(10334, "BSONObjectTooLarge", "the change event %s needs %d fragments; mongotest makes at most %d", formatValue(tok), len(groups), maxFragments)
	}
	frags := make([][]byte, len(groups))
	toks := make([]bson.D, len(groups))
	for i, g := range groups {
		g[1].Value = bson.D{{Key: "fragment", Value: int32(i + 1)}, {Key: "of", Value: int32(len(groups))}}
		toks[i] = fragTok(i)
		frags[i] = encodeDoc(g)
	}
	return frags, toks, nil
}

// nsWrites is what the writes of one namespace added to the history.
type nsWrites struct{ ops, bytes int64 }

// countWrite counts ev in its namespace's writes: its payload is what
// mongod's oplog entry carries beside its fixed fields, the inserted or
// replacement document, an update's description of what changed (mongod
// logs a diff, not the post-image), a deleted document's _id.
func (s *Server) countWrite(ev *event) {
	if ev.evNS == nil || ev.coll == "" {
		return
	}
	var n int
	switch ev.op {
	case "insert", "replace":
		n = len(ev.doc)
	case "update":
		if ev.evExtra != nil {
			b, _ := bson.Marshal(ev.upd)
			n = len(b)
		}
	case "delete":
		b, _ := bson.Marshal(bson.D{{Key: "_id", Value: ev.id}})
		n = len(b)
	default:
		return
	}
	if s.written == nil {
		s.written = map[string]*nsWrites{}
	}
	w := s.written[ev.db+"."+ev.coll]
	if w == nil {
		w = &nsWrites{}
		s.written[ev.db+"."+ev.coll] = w
	}
	w.ops++
	w.bytes += int64(n)
}

// writeMetrics is serverStatus's mongotest.oplog: per namespace, the
// writes and their payload bytes since the server started.
func (s *Server) writeMetrics() bson.D {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.written))
	for ns := range s.written {
		names = append(names, ns)
	}
	sort.Strings(names)
	out := make(bson.D, 0, len(names))
	for _, ns := range names {
		w := s.written[ns]
		out = append(out, bson.E{Key: ns, Value: bson.D{{Key: "ops", Value: w.ops}, {Key: "bytes", Value: w.bytes}}})
	}
	return out
}
