package engine_test

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
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
