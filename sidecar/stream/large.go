package stream

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
)

// Where the server has $changeStreamSplitLargeEvent the stream asks for it
// and the Reader puts the fragments together (split.go). Where it has not
// (before 7.0 and 6.0.9), the getMore that meets an event over 16 MB fails
// with BSONObjectTooLarge, and reopening the same stream at the same place
// fails again. The follow loop then reads that stretch of the stream lean
// (Lean): the same events without their documents, which it reads itself
// by _id when it flushes, as fullDocument: updateLookup would have (the
// document as it is when read, or none: a delete follows). The stretch
// lasts until an event later than the server's time when the getMore
// failed (every event up to the large one is older), or until the stream
// is caught up; then the full stream reopens after the last event read. A
// lean stream that fails alike (an update description alone over 16 MB,
// beyond what any server can return) stops the job with FAILED saying so:
// never a silent skip.

// Large is how a job's stream is read around change events over 16 MB:
// whether the server lacks $changeStreamSplitLargeEvent, and the lean
// stretch being read. The zero Large reads the full stream with the stage.
// It belongs to the follow loop's goroutine.
type Large struct {
	noSplit bool           // the server has no $changeStreamSplitLargeEvent
	lean    bool           // the stream is read without documents
	until   bson.Timestamp // the server's time when the full stream failed
	past    bool           // an event after until was read: the stretch may end
	read    int            // events the lean stretch read
}

// Options are the options to open the stream with now.
func (l *Large) Options() []OpenOption {
	var with []OpenOption
	if !l.noSplit {
		with = append(with, SplitLargeEvents())
	}
	if l.lean {
		with = append(with, Lean())
	}
	return with
}

// Unsplit says whether err, an error opening the stream with Options, is
// the server refusing $changeStreamSplitLargeEvent (before 7.0 and 6.0.9):
// the stream is then opened without it from now on (open it again), and an
// event over 16 MB read by a lean stretch.
func (l *Large) Unsplit(err error) bool {
	if err == nil || l.noSplit || !UnknownStage(err) {
		return false
	}
	l.noSplit = true
	return true
}

// Split says whether the server splits events over 16 MB.
func (l *Large) Split() bool { return !l.noSplit }

// TooLarge acts on err, a stream error saying an event was too large
// (TooLarge): the lean stretch begins (nil: reopen the stream), or, when
// the stream was already lean, the job must stop: FAILED, saying why. db
// is asked for the server's time.
func (l *Large) TooLarge(ctx context.Context, db *mongo.Database, job string, err error) error {
	if l.lean {
		if l.noSplit {
			return errs.Wrap(errs.Failed, job, err,
				"read a change event over 16 MB after the recorded position: even without its documents it is larger than MongoDB can return to a change stream, and this server has no $changeStreamSplitLargeEvent; upgrade MongoDB to 6.0.9 or later (7.0+), where meilistream reads such events in fragments")
		}
		return errs.Wrap(errs.Failed, job, err,
			"read a change event over 16 MB after the recorded position: one of its fields (its update description) is larger than a fragment of $changeStreamSplitLargeEvent can hold, even without its documents; the job cannot go past it: make such updates smaller, then reindex the job from the present")
	}
	l.lean, l.until, l.read = true, operationTime(ctx, db), 0
	return nil
}

// Lean says whether the stream is read without documents now: an event's
// document is read by _id when its batch is flushed, and counted at the
// size the event gives (LeanSizeField).
func (l *Large) Lean() bool { return l.lean }

// Read notes a batch of n events taken in.
func (l *Large) Read(n int) {
	if l.lean {
		l.read += n
	}
}

// Saw notes an event taken in: one later than the server's time when the
// full stream failed lets the stretch end.
func (l *Large) Saw(ev bson.Raw) {
	if !l.lean || l.until.T == 0 {
		return
	}
	t, i, ok := ev.Lookup("clusterTime").TimestampOK()
	if ok && (t > l.until.T || t == l.until.T && i > l.until.I) {
		l.past = true
	}
}

// End ends the lean stretch once an event past it was read, or (idle)
// once the stream is caught up after reading at least one event; true
// when it did: reopen the full stream after the last event read. A
// stretch that read nothing does not end on an idle batch (an empty first
// batch says little, and the event the full stream failed on is still
// ahead); its next getMore meets that event, or an error that is not one.
func (l *Large) End(idle bool) bool {
	if !l.lean || !l.past && !(idle && l.read > 0) {
		return false
	}
	l.lean, l.past, l.until, l.read = false, false, bson.Timestamp{}, 0
	return true
}

// operationTime is the server's latest cluster time (a ping's
// operationTime), zero when it cannot tell.
func operationTime(ctx context.Context, db *mongo.Database) bson.Timestamp {
	raw, err := db.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Raw()
	if err != nil {
		return bson.Timestamp{}
	}
	t, i, ok := raw.Lookup("operationTime").TimestampOK()
	if !ok {
		return bson.Timestamp{}
	}
	return bson.Timestamp{T: t, I: i}
}
