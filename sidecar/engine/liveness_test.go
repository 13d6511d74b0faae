package engine_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/httpapi"
)

// twoLookupsJS looks up two fields of each item in one collection: a
// change of a user gives two dependency values at once.
const twoLookupsJS = `module.exports = {
  collection: "items",
  index: "items",
  lookups: {
    author: { from: "users", localField: "authorId", foreignField: "_id" },
    editor: { from: "users", localField: "editorId", foreignField: "_id" },
  },
  transform(doc, ctx) {
    return {
      title: doc.title,
      author: ctx.lookups.author ? ctx.lookups.author.name : null,
      editor: ctx.lookups.editor ? ctx.lookups.editor.name : null,
    };
  },
};
`

// A related change that adds several dependency values at once (two
// lookups on one collection), arriving while nothing else is pending, is
// flushed after flushInterval: it never waits for batchSize changes.
func TestARelatedChangeAddingTwoValuesAtOnceIsFlushed(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.BatchSize = 1000
	users := e.db.Collection("users")
	for i := 1; i <= 3; i++ {
		e.ok(users.InsertOne(e.ctx, bson.M{"_id": i, "name": fmt.Sprintf("user %d", i)}))
	}
	docs := make([]any, 30)
	for i := range docs {
		docs[i] = bson.M{"_id": i, "title": fmt.Sprintf("item %d", i), "authorId": 1 + i%3, "editorId": 1 + (i+1)%3}
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	job := e.job(twoLookupsJS)
	r := e.run(job, e.acquire())
	e.settled(job)

	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"name": "Ada"}}))
	e.equal(job)
	// And a second time, once the first fan-out is done: the flush is
	// armed again, not only on the job's first related change.
	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"name": "Grace"}}))
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.FanOuts < 2 {
		t.Fatalf("fan-outs %d: want the two related changes' dependents sent again", s.FanOuts)
	}
}

// lines is a log sink a test reads back.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
	t  *testing.T
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Log(string(p))
	return len(p), nil
}

func (l *lines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// A job whose destination stops answering is stalled once its pending
// work has not moved for the watchdog's bound: the stats say so with what
// is pending, the metrics count it, the log says so once; the first
// batch made durable clears it.
func TestWatchdogSaysAJobWhoseWorkDoesNotMoveIsStalled(t *testing.T) {
	defer engine.SetWatchInterval(10 * time.Millisecond)()
	e := newEnv(t, 0)
	e.cfg.WatchdogAnswer = 100 * time.Millisecond
	reg := prometheus.NewRegistry()
	e.metrics = httpapi.NewMetrics(reg)
	logs := &lines{t: t}
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	if s := r.stats.Snapshot(); s.Stall != nil {
		t.Fatalf("caught up and idle: stalled %+v", *s.Stall)
	}

	e.meili.PauseTasks()
	e.insert(100, 110, nil)
	until(t, "the job stalled", func() bool { return r.stats.Snapshot().Stall != nil })
	st := *r.stats.Snapshot().Stall
	if !strings.Contains(st.Pending, "not yet durable") || st.BoundSeconds < 0.3 || st.Since.IsZero() {
		t.Errorf("stall %+v: want the batches in flight, a bound of 10 flushes and the answer time", st)
	}
	stalled := func() float64 { return metric(t, reg, "meilistream_job_stalled", "items") }
	until(t, "job_stalled 1", func() bool { return stalled() == 1 })
	if n := metric(t, reg, "meilistream_stalls_total", "items"); n != 1 {
		t.Errorf("stalls_total %v, want 1", n)
	}

	e.meili.ResumeTasks()
	e.equal(job)
	until(t, "the stall cleared", func() bool { return r.stats.Snapshot().Stall == nil && stalled() == 0 })
	if n := logs.count("job stalled:"); n != 1 {
		t.Errorf("the stall was logged %d times, want once", n)
	}
	if n := logs.count("job no longer stalled"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// slowJS runs 150 ms of wall time on a slow document, whatever the
// machine's speed, against a limit of 50 ms; a stuck one never ends.
const slowJS = `module.exports = {
  collection: "items",
  index: "items",
  transformTimeout: "50ms",
  transform(doc) {
    if (doc.slow) { const t0 = Date.now(); while (Date.now() - t0 < 150) {} }
    if (doc.stuck) { for (;;) {} }
    return { title: doc.title };
  },
};
`

// A document whose transform ran out of time is tried again by the job
// itself, with a longer limit, and ends up indexed with no operator
// action; one that always runs out of time is left in the errors
// collection after the bounded attempts, and said so.
func TestATimedOutDocumentIsTriedAgainAutomatically(t *testing.T) {
	defer engine.SetTimeoutRetryBase(10 * time.Millisecond)()
	e := newEnv(t, 0)
	logs := &lines{t: t}
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: logs})
	e.insert(0, 5, nil)
	job := e.job(slowJS)
	r := e.run(job, e.acquire())
	until(t, "the first documents indexed", func() bool { return e.liveHas(4, "item 4") })

	e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": 100, "title": "slow", "slow": true}))
	e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": 101, "title": "stuck", "stuck": true}))
	e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": 102, "title": "quick"}))
	until(t, "the slow document indexed", func() bool { return e.liveHas(100, "slow") })
	until(t, "the slow document's record cleared", func() bool {
		n, _ := e.errs.CountDocuments(e.ctx, bson.M{"sourceId": 100})
		return n == 0
	})
	until(t, "the stuck document given up", func() bool { return logs.count("ran out of time on every automatic attempt") == 1 })
	// Recorded at the first failure and at each of the automatic attempts,
	// the last saying it was given up (logged just before it is recorded).
	var rec bson.M
	until(t, "the stuck document's record of its last attempt", func() bool {
		rec = nil
		_ = e.errs.FindOne(e.ctx, bson.M{"sourceId": 101}).Decode(&rec)
		return fmt.Sprint(rec["attempts"]) == "4"
	})
	if rec["code"] != "TRANSFORM_FAILED" || !strings.Contains(fmt.Sprint(rec["message"]), "ran out of time on all 4 attempts") {
		t.Errorf("record %v: want TRANSFORM_FAILED saying it ran out of time on all 4 attempts", rec)
	}
	if e.liveHas(101, "stuck") || !e.liveHas(102, "quick") {
		t.Errorf("stuck indexed %v, quick indexed %v", e.liveHas(101, "stuck"), e.liveHas(102, "quick"))
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// The lag counts the changes the stream has not read: while the stream
// cannot read (its getMores and reopens fail), writes made later in
// cluster time show in the lag at once, not only once delivered; it falls
// back to 0 once they are durable.
func TestLagCountsWhatTheStreamHasNotRead(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 5, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	lag := func() float64 { return r.stats.Snapshot().LagSeconds }
	until(t, "lag 0 when caught up", func() bool { return lag() == 0 })

	streams := bson.A{"getMore", "aggregate"}
	e.mongo.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: streams}, {Key: "errorCode", Value: 11600}}}})
	// A getMore already waiting when the fail point was set would still
	// answer: wait until the stream has failed.
	retries := r.stats.Snapshot().Retries
	until(t, "the stream failing", func() bool { return r.stats.Snapshot().Retries > retries })
	// Twenty seconds of cluster time pass (the server's clock moves, not
	// the test's), and changes are made that the stream cannot read.
	e.mongo.AdvanceClock(20 * time.Second)
	// Code 11600 is a shutdown error: the engine's failure on it clears the
	// pool of the client it shares with e.coll, and an insert through that
	// pool can fail with it. A client of the test's own is not cleared.
	e.coll = e.freshItems()
	e.insert(100, 110, nil)
	until(t, "lag over 15s while the stream cannot read", func() bool { return lag() >= 15 })
	if e.liveHas(109, "item 109") {
		t.Fatal("the changes reached the index while the stream could not read them")
	}

	e.mongo.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: streams}}}})
	until(t, "the changes indexed", func() bool { return e.liveHas(109, "item 109") })
	until(t, "lag back to 0", func() bool { return lag() == 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
