package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
)

// joinedJS joins each item's author (by id, projected) and its tags (an
// array of ids).
const joinedJS = `module.exports = {
  collection: "items",
  index: "items",
  lookups: {
    author: { from: "users", localField: "authorId", foreignField: "_id", project: { name: 1 } },
    tags:   { from: "tags", localField: "tagIds", foreignField: "_id", many: true },
  },
  transform(doc, ctx) {
    return {
      title: doc.title,
      author: ctx.lookups.author ? ctx.lookups.author.name : null,
      tags: ctx.lookups.tags.map(t => t.label),
    };
  },
};
`

func (e *env) seedJoined(items int) {
	e.t.Helper()
	users := e.db.Collection("users")
	tags := e.db.Collection("tags")
	for i := 1; i <= 5; i++ {
		e.ok(users.InsertOne(e.ctx, bson.M{"_id": i, "name": fmt.Sprintf("user %d", i), "email": fmt.Sprintf("u%d@example.com", i)}))
		e.ok(tags.InsertOne(e.ctx, bson.M{"_id": i, "label": fmt.Sprintf("tag %d", i)}))
	}
	if items == 0 {
		return
	}
	docs := make([]any, items)
	for i := range docs {
		docs[i] = bson.M{"_id": i, "title": fmt.Sprintf("item %d", i), "authorId": 1 + i%5, "tagIds": bson.A{1 + i%5, 1 + (i+1)%5}}
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		e.t.Fatal(err)
	}
}

// A related change reaches every document that depends on it: a user
// renamed or deleted, a tag relabelled; a document's own change resolves
// its lookups again.
func TestLookupsJoinAndRelatedChangesReachEveryDependent(t *testing.T) {
	e := newEnv(t, 0)
	e.seedJoined(300)
	job := e.job(joinedJS)
	r := e.run(job, e.acquire())
	e.settled(job)

	users, tags := e.db.Collection("users"), e.db.Collection("tags")
	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"name": "Ada"}}))
	e.equal(job)
	e.ok(users.DeleteOne(e.ctx, bson.M{"_id": 2}))
	e.equal(job)
	e.ok(tags.UpdateOne(e.ctx, bson.M{"_id": 3}, bson.M{"$set": bson.M{"label": "three"}}))
	e.equal(job)
	// A field the lookup does not project changes nothing, but is sent
	// again all the same (the engine does not know what changed).
	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 4}, bson.M{"$set": bson.M{"email": "new@example.com"}}))
	// A new user, and an item moved to them.
	e.ok(users.InsertOne(e.ctx, bson.M{"_id": 6, "name": "Grace"}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 10}, bson.M{"$set": bson.M{"authorId": 6}}))
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.FanOuts == 0 || s.Resent < 300 {
		t.Fatalf("fan-outs %d, documents sent again %d: want the related changes' dependents sent again", s.FanOuts, s.Resent)
	}
}

// A related change made while a swap reindex runs reaches the new index.
func TestARelatedChangeDuringAReindexReachesTheNewIndex(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 50
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	e.seedJoined(2000)
	job := e.job(joinedJS)
	r := e.run(job, e.acquire())
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	e.ok(e.db.Collection("users").UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"name": "renamed during the reindex"}}))
	e.ok(e.db.Collection("tags").DeleteOne(e.ctx, bson.M{"_id": 2}))
	if s := r.stats.Snapshot(); s.Phase != status.PhaseReindexing {
		t.Fatalf("the reindex ended before the related changes; make it longer (phase %q)", s.Phase)
	}
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// liveKillSink kills the process on its live destination's sends, as
// killSink does on a reindex's.
type liveKillSink struct {
	sink.Sink
	k *killer
}

func (s liveKillSink) Send(ctx context.Context, b sink.Batch) (sink.Receipt, error) {
	if s.k.hit(len(b.Writes)) {
		return nil, errKilled
	}
	return s.Sink.Send(ctx, b)
}

func (s liveKillSink) Wait(ctx context.Context, r sink.Receipt) ([]sink.DocFailure, error) {
	if s.k.hit(0) {
		return nil, errKilled
	}
	return s.Sink.Wait(ctx, r)
}

// A process killed in the middle of the fan-out of a related change (two
// thousand dependents, ten pages) has recorded no position past that change: the
// next run reads it again, sends every dependent, and the index is the
// transform of the joined collections exactly.
func TestKilledInTheMiddleOfAFanOutSendsEveryDependentOnRestart(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize, e.cfg.BatchSize = 200, 200
	e.seedJoined(0)
	docs := make([]any, 2100)
	for i := range docs {
		author := 1
		if i >= 2000 {
			author = 2 // not sent again by the rename: their own changes go on meanwhile
		}
		docs[i] = bson.M{"_id": i, "title": fmt.Sprintf("item %d", i), "authorId": author, "tagIds": bson.A{}}
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	job := e.job(joinedJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// The rename sends all two thousand again; the process dies after
	// about half of them were sent.
	eng := e.engine()
	ctx, cancel := context.WithCancel(e.ctx)
	k := &killer{killAt: 1000, kill: cancel}
	done := make(chan error, 1)
	st := status.NewJobStats()
	go func() { done <- eng.Run(ctx, job, liveKillSink{e.sink(job, l), k}, l, st, nil) }()
	until(t, "following", func() bool { return st.Snapshot().Phase == status.PhaseFollowing })
	e.ok(e.db.Collection("users").UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"name": "Ada Lovelace"}}))
	// Changes of their own to documents the rename does not touch, while
	// the fan-out runs: once durable they would record positions past the
	// rename, were the fan-out not holding positions back.
	for i := 2000; i < 2100 && !k.isDead(); i++ {
		e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": i}, bson.M{"$set": bson.M{"title": fmt.Sprintf("changed %d", i)}}))
	}
	select {
	case err := <-done:
		if !k.dead {
			t.Fatalf("the run ended before the kill: %v", err)
		}
		if err == nil || !errors.Is(err, errs.ErrLeaseLost) && ctx.Err() == nil {
			t.Logf("killed run ended with %v", err)
		}
	case <-time.After(hangBound):
		t.Fatal("the killed run did not end")
	}
	if d, _ := e.indexHolds("Ada Lovelace"); d == 2000 {
		t.Fatal("every dependent was sent before the kill: the test needs the kill in the middle")
	}

	r = e.run(job, l)
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func (k *killer) isDead() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dead
}

// indexHolds counts the documents of the index whose author is name.
func (e *env) indexHolds(name string) (int, error) {
	n := 0
	for _, d := range e.meili.Documents("items") {
		if d["author"] == name {
			n++
		}
	}
	return n, nil
}

// relate (monstache's [[relate]]): a change to a comment sends its
// article again, found by the comment's articleId.
func TestARelatedNamespaceSendsItsMatchesAgain(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 50, nil)
	job := e.job(`module.exports = {
  collection: "items",
  index: "items",
  relate: [{ namespace: "app.comments", srcField: "itemId", matchField: "_id" }],
  transform(doc) { return { title: doc.title }; },
};`)
	r := e.run(job, e.acquire())
	e.settled(job)
	comments := e.db.Collection("comments")
	e.ok(comments.InsertOne(e.ctx, bson.M{"_id": "c1", "itemId": 7, "text": "first"}))
	until(t, "item 7 sent again", func() bool { return r.stats.Snapshot().Resent == 1 })
	e.ok(comments.UpdateOne(e.ctx, bson.M{"_id": "c1"}, bson.M{"$set": bson.M{"text": "edited"}}))
	e.ok(comments.InsertOne(e.ctx, bson.M{"_id": "c2", "itemId": 8}))
	until(t, "items 7 and 8 sent again", func() bool { return r.stats.Snapshot().Resent == 3 })
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// The stream's changes of dependents made before a related change, and
// sent before it (with the old related document), are not dropped from
// the fan-out's pages: its window opens after the change.
func TestChangesOfDependentsBeforeARelatedChangeDoNotHideItsFanOut(t *testing.T) {
	e := newEnv(t, 0)
	e.seedJoined(50)
	job := e.job(joinedJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	e.ok(e.coll.UpdateMany(e.ctx, bson.M{}, bson.M{"$set": bson.M{"title": "renamed"}}))
	e.equal(job) // sent, with user 2 as he was
	e.ok(e.db.Collection("users").UpdateOne(e.ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"name": "Ada"}}))
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A lookup that matches more than a document may hold fails that document
// alone (recorded, the job goes on), and a batch whose matches together
// pass the read bound is resolved in halves, each document still getting
// all its matches.
func TestALookupMatchingTooMuchFailsItsDocumentAlone(t *testing.T) {
	defer engine.SetLookupBounds(6<<10, 3<<10)()
	e := newEnv(t, 0)
	comments := e.db.Collection("comments")
	pad := strings.Repeat("x", 80)
	var docs []any
	for i := 0; i < 60; i++ { // item 0: 60 comments of ~120 bytes, over 3 KiB
		docs = append(docs, bson.M{"_id": fmt.Sprintf("c0-%02d", i), "itemId": 0, "text": pad})
	}
	for item := 1; item < 80; item++ { // the others: 2 each, 79 × 2 × ~120 bytes, over 6 KiB together
		for i := 0; i < 2; i++ {
			docs = append(docs, bson.M{"_id": fmt.Sprintf("c%d-%d", item, i), "itemId": item, "text": pad})
		}
	}
	if _, err := comments.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	e.insert(0, 80, nil)
	job := e.job(`module.exports = {
  collection: "items",
  index: "items",
  lookups: { comments: { from: "comments", localField: "_id", foreignField: "itemId", many: true } },
  transform(doc, ctx) { return { title: doc.title, comments: ctx.lookups.comments.length }; },
};`)
	r := e.run(job, e.acquire())
	e.settled(job)
	var rec struct {
		Code    string `bson:"code"`
		Message string `bson:"message"`
	}
	if err := e.errs.FindOne(e.ctx, bson.M{"job": "items", "sourceId": 0}).Decode(&rec); err != nil {
		t.Fatalf("no error record for the document whose lookup matched too much: %v", err)
	}
	if rec.Code != string(errs.NotADocument) || !strings.Contains(rec.Message, "lookup") {
		t.Fatalf("record %+v", rec)
	}
	if n, err := e.errs.CountDocuments(e.ctx, bson.M{"job": "items"}); err != nil || n != 1 {
		t.Fatalf("%d error records (%v), want 1", n, err)
	}
	var got struct {
		Comments int `json:"comments"`
	}
	if err := e.mc.Index("items").GetDocument(e.ctx, "79", nil, &got); err != nil || got.Comments != 2 {
		t.Fatalf("item 79: %+v, %v", got, err)
	}
	// A change of a related comment reaches its item through the same
	// bounds.
	e.ok(comments.InsertOne(e.ctx, bson.M{"_id": "c5-2", "itemId": 5, "text": pad}))
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
