package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// bigBlob is about 10 MB: an update setting it on a document holding
// another makes a change event of about 20 MB (post-image and
// updatedFields).
func bigBlob(c string) string { return c + strings.Repeat("z", 10<<20) }

// runLogged runs job on e with a logger whose output the test reads.
func (e *env) runLogged(t *testing.T, logs *testutil.SyncBuffer) (*running, func()) {
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	return r, func() {
		t.Helper()
		e.equal(job)
	}
}

// Updates of a large document whose change events are over 16 MB are
// followed like any other, on a server with $changeStreamSplitLargeEvent
// (split and put together) and on one without (read lean, the documents
// by _id), and the changes after them too; nothing loops.
func TestChangeEventsOver16MBAreFollowed(t *testing.T) {
	for _, version := range []string{"7.0.0", "6.0.8"} {
		t.Run(version, func(t *testing.T) {
			e := newEnvOn(t, mongotest.Options{Version: version})
			e.ok(e.coll.InsertOne(e.ctx, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "small"}, {Key: "blob", Value: bigBlob("a")}}))
			e.insert(2, 5, nil)
			logs := &testutil.SyncBuffer{}
			r, equal := e.runLogged(t, logs)
			equal()
			for i, title := range []string{"big-1", "big-2"} {
				e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"title": title, "blob": bigBlob(string(rune('b' + i)))}}))
			}
			e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"title": "after"}}))
			equal()
			until(t, "big-2 indexed", func() bool { return e.liveHas(1, "big-2") && e.liveHas(2, "after") })
			if version == "6.0.8" {
				// The lean stretch ends at the next idle batch after it.
				testutil.Until(t, 15*time.Second, "the full stream back", func() bool {
					return strings.Contains(logs.String(), "reading the stream with them again")
				}, nil)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			lean := strings.Contains(logs.String(), "reading the stream on without them")
			if lean != (version == "6.0.8") {
				t.Fatalf("read lean: %v on %s\n%s", lean, version, logs.String())
			}
			if version == "6.0.8" && !strings.Contains(logs.String(), "reading the stream with them again") {
				t.Fatalf("the full stream never came back:\n%s", logs.String())
			}
			// One lean stretch per large event at most: the stretch may
			// end between the two updates when the second comes after
			// an idle batch, but no event is met twice.
			met := map[string]bool{}
			for _, line := range strings.Split(logs.String(), "\n") {
				if !strings.Contains(line, "a change event is too large") {
					continue
				}
				_, token, _ := strings.Cut(line, "_data: ")
				if met[token] {
					t.Fatalf("the same event met twice:\n%s", logs.String())
				}
				met[token] = true
			}
			if len(met) > 2 {
				t.Fatalf("%d times too large for 2 large updates:\n%s", len(met), logs.String())
			}
		})
	}
}

// A change event that not even a lean stream can read stops the job with
// FAILED saying what to do, instead of reopening the stream at the same
// place for ever or skipping the event.
func TestAnEventNoStreamCanReadFailsTheJobClearly(t *testing.T) {
	for _, tc := range []struct{ version, says string }{
		{"6.0.8", "upgrade MongoDB to 6.0.9 or later"},
		{"7.0.0", "make such updates smaller"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			e := newEnvOn(t, mongotest.Options{Version: tc.version})
			e.insert(0, 3, nil)
			job := e.job(itemsJS)
			r := e.run(job, e.acquire())
			e.equal(job)
			// Every getMore now meets an event too large.
			e.mongo.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
				{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 10334}}}})
			defer e.mongo.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}}}})
			e.insert(10, 11, nil)
			err := r.wait(t)
			if errs.CodeOf(err) != errs.Failed || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "16 MB") {
				t.Fatalf("Run: %v; want FAILED saying %q", err, tc.says)
			}
			var se interface{ HasErrorCode(int) bool }
			if !errors.As(err, &se) || !se.HasErrorCode(10334) {
				t.Fatalf("the error does not carry the server's: %v", err)
			}
		})
	}
}
