package stream

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/jobdef"
)

// A change event over 16 MB (an update of a large document with its
// post-image, its pre-image and its updateDescription) cannot be returned
// by the server as one document: the getMore fails with BSONObjectTooLarge
// (10334), and a stream reopened at the same place fails again. MongoDB
// 7.0 and 6.0.9 have $changeStreamSplitLargeEvent, the last stage of a
// pipeline, which returns such an event as fragments: each a document with
// its own resume token as _id, splitEvent {fragment: i, of: n} and some of
// the event's top-level fields, in order ($changeStreamSplitLargeEvent in
// MongoDB's manual; change_stream_split_event_helpers.cpp in mongodb/mongo).
// The Reader puts the fragments of an event together again, so the follow
// loop sees one event as from any other stream.
//
// A fragment's resume token resumes the stream after that fragment, but
// only while the server splits the event again the same way: an update's
// post-image (fullDocument: updateLookup) is read when the event is, so a
// document that shrank since makes the event whole again, and the resume
// fails with 280 ChangeStreamFatalError (jstests/change_streams/
// split_large_event.js). So no fragment's token is ever a position: a
// put-together event carries as its _id the resume token before it (that
// of the event before it, or of the batch before it), so the follow loop
// records, and reopens at, a point from which the whole event is read
// again (delivery is at least once). The driver's own resume after a
// network error does resume from a fragment's token, and the fragments
// after it may then be of another split than those before (a post-image
// read again, of another size, moves fields between fragments: put
// together, a field could be missing, and an update without its
// fullDocument reads as a document deleted since). So a split event whose
// fragments come on two cursors is never put together: the Reader reports
// ErrSplitResume, as it does a 280 the resumed stream fails with, and the
// follow loop reopens before the event instead of taking it for a lost
// history.
//
// Older servers do not know the stage (40324 Unrecognized pipeline stage
// name; 224 where the feature compatibility version keeps it out):
// UnknownStage tells, and the follow loop opens without it. There, an
// event over 16 MB is read by a Lean stream (see Lean).

// ErrSplitResume is the cause of a stream error met while the driver's
// resume token was a fragment's: the event was split differently on the
// resumed stream (or not at all). Reopening before the event reads it
// whole again.
var ErrSplitResume = errors.New("the change stream resumed inside a split change event")

// splitResumeError is a stream error met after a fragment: it says what
// the server said, and is ErrSplitResume (never the server's code, so that
// it is not taken for a lost history).
type splitResumeError struct{ err error }

func (e *splitResumeError) Error() string {
	return "the change stream resumed inside a split change event and failed: " + e.err.Error()
}
func (e *splitResumeError) Unwrap() error { return ErrSplitResume }

// SplitStage is the stage that splits events over 16 MB; it must be the
// last of a change stream's pipeline.
var SplitStage = bson.D{{Key: "$changeStreamSplitLargeEvent", Value: bson.D{}}}

// UnknownStage says whether err is the server refusing
// $changeStreamSplitLargeEvent: 40324 (a server before 7.0 and 6.0.9) or
// 224 QueryFeatureNotAllowed (a feature compatibility version before it).
func UnknownStage(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(40324) || se.HasErrorCode(224))
}

// TooLarge says whether err is the server unable to return a change event
// for its size: 10334 BSONObjectTooLarge, or 7182500 (a single field of
// the event too large for a fragment of $changeStreamSplitLargeEvent).
func TooLarge(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(10334) || se.HasErrorCode(7182500))
}

// LeanSizeField is the field a Lean stream adds to each event: the size in
// bytes of the document the event carried (its fullDocument) before the
// stream left it out, or null; the follow loop bounds its batches by it.
const LeanSizeField = "fullDocumentSize"

// leanStage is the $project of a Lean stream: every field of an event the
// follow loop reads but the documents, of which it keeps only the fields
// the job's lookups and relates key on (of the document and of its
// pre-image) and a watermark's mark, and the document's size.
func leanStage(job *jobdef.Job) bson.D {
	paths := []string{"fullDocument.mark"}
	for _, d := range job.Dependencies() {
		if d.Key != "_id" {
			paths = append(paths, "fullDocument."+d.Key, "fullDocumentBeforeChange."+d.Key)
		}
	}
	proj := bson.D{}
	for _, f := range []string{"operationType", "clusterTime", "wallTime", "ns", "to", "documentKey", "updateDescription"} {
		proj = append(proj, bson.E{Key: f, Value: 1})
	}
	for _, p := range disjoint(paths) {
		proj = append(proj, bson.E{Key: p, Value: 1})
	}
	proj = append(proj, bson.E{Key: LeanSizeField, Value: bson.D{{Key: "$bsonSize", Value: "$fullDocument"}}})
	return bson.D{{Key: "$project", Value: proj}}
}

// disjoint drops repeated paths and those under another (a projection of
// both "a" and "a.b" is a path collision, 31250).
func disjoint(paths []string) []string {
	sort.Strings(paths)
	var out []string
	for _, p := range paths {
		if n := len(out); n > 0 && (p == out[n-1] || strings.HasPrefix(p, out[n-1]+".")) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// assembly is a split event whose fragments are coming.
type assembly struct {
	of, next int32 // the fragment count, and the number of the next one expected
	cursor   int64 // the cursor of its first fragment
	buf      []byte
	idx      int32
}

// fragment takes one document of the stream, read from cursor: a whole
// event (returned as it is), or a fragment of a split event: nil until the
// last one, which returns the event put together, with the resume token
// before it as its _id.
func (r *Reader) fragment(ev bson.Raw, cursor int64) (bson.Raw, error) {
	sv, err := ev.LookupErr("splitEvent")
	if err != nil {
		if r.split != nil {
			return nil, fmt.Errorf("change stream: an event came before fragment %d of %d of a split event", r.split.next, r.split.of)
		}
		if tok, ok := ev.Lookup("_id").DocumentOK(); ok {
			r.before = tok
		}
		r.fragmented = false
		return ev, nil
	}
	r.fragmented = true
	frag, ok1 := sv.Document().Lookup("fragment").Int32OK()
	of, ok2 := sv.Document().Lookup("of").Int32OK()
	if !ok1 || !ok2 || frag < 1 || frag > of {
		return nil, fmt.Errorf("change stream: a fragment of a split event with splitEvent %s", sv)
	}
	a := r.split
	switch {
	case a != nil && cursor != a.cursor:
		r.split = nil
		return nil, &splitResumeError{fmt.Errorf("fragment %d of %d came on another cursor than fragment 1 (the driver resumed the stream)", frag, of)}
	case a == nil && frag == 1:
		a = &assembly{of: of, next: 1, cursor: cursor}
		a.idx, a.buf = bsoncore.AppendDocumentStart(make([]byte, 0, len(ev)*int(of)))
		r.split = a
	case a == nil:
		return nil, fmt.Errorf("change stream: fragment %d of %d of a split event came without the ones before it", frag, of)
	case frag != a.next || of != a.of:
		return nil, fmt.Errorf("change stream: fragment %d of %d came when fragment %d of %d was expected", frag, of, a.next, a.of)
	}
	elems, err := ev.Elements()
	if err != nil {
		return nil, fmt.Errorf("change stream: a fragment of a split event: %w", err)
	}
	for _, e := range elems {
		if k := e.Key(); k != "_id" && k != "splitEvent" {
			a.buf = append(a.buf, e...)
		}
	}
	a.next++
	if frag < of {
		return nil, nil
	}
	r.split = nil
	// The resume token before the event; on a stream opened at the
	// present whose first event is split there is none, and the last
	// fragment's is the only one (a resume then needs the same split).
	before := r.before
	if before == nil {
		before, _ = ev.Lookup("_id").DocumentOK()
	}
	a.buf = bsoncore.AppendDocumentElement(a.buf, "_id", bsoncore.Document(before))
	doc, err := bsoncore.AppendDocumentEnd(a.buf, a.idx)
	if err != nil {
		return nil, fmt.Errorf("change stream: a split event: %w", err)
	}
	return bson.Raw(doc), nil
}
