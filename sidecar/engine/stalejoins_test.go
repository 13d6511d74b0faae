package engine_test

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/status"
)

// emailJoinJS joins each item's author by email, a key other than _id:
// finding the items that matched an old email needs the user's pre-image.
const emailJoinJS = `module.exports = {
  collection: "items",
  index: "items",
  lookups: { author: { from: "users", localField: "authorEmail", foreignField: "email" } },
  transform(doc, ctx) { return { title: doc.title, author: ctx.lookups.author ? ctx.lookups.author.name : null }; },
};
`

// authorOf is the author the index holds for item id ("<absent>" when
// the index lacks the item).
func (e *env) authorOf(id int) any {
	for _, d := range e.meili.Documents("items") {
		if fmt.Sprint(d["id"]) == fmt.Sprint(id) {
			return d["author"]
		}
	}
	return "<absent>"
}

func (e *env) waitAuthor(id int, want any) {
	e.t.Helper()
	testutil.Until(e.t, 15*time.Second, fmt.Sprintf("item %d with author %v", id, want), func() bool { return e.authorOf(id) == want },
		func() string { return fmt.Sprintf("author %v", e.authorOf(id)) })
}

// A related change without a pre-image sends only the new value's
// dependents: the items that matched the user's old email keep the old
// join, as the docs say, "until their own next change or a reindex". Their
// next change is sent though it touches nothing the transform read, in
// this run and after a restart; a reindex rewrites every join, and from
// then on such a change is spared again.
func TestADependentLeftWithAnOldJoinIsSentOnItsNextChange(t *testing.T) {
	e := newEnv(t, 0)
	users := e.db.Collection("users")
	e.ok(users.InsertOne(e.ctx, bson.M{"_id": 1, "email": "ada@example.com", "name": "Ada"}))
	for i := 1; i <= 4; i++ {
		e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": i, "title": "t", "authorEmail": "ada@example.com", "views": 0}))
	}
	job := e.job(emailJoinJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	skipped := func(r *running) int64 { return r.stats.Snapshot().SkippedUnchanged }
	// The judge spares a change of a field the transform does not read.
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 4}, bson.M{"$set": bson.M{"views": 1}}))
	until(t, "the views update spared", func() bool { return skipped(r) == 1 })

	// The user's email changes; the stream has no pre-image, so the items
	// that held the old email are not found, and keep "Ada".
	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"email": "lovelace@example.com"}}))
	until(t, "the related change read", func() bool { return r.stats.Snapshot().FanOuts >= 1 })
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"views": 1}}))
	e.waitAuthor(1, nil)
	if got := e.authorOf(2); got != "Ada" {
		t.Fatalf("item 2, not changed since, has author %v; want the old join kept (Ada)", got)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Another run knows it from the job's state.
	r = e.run(job, l)
	until(t, "following", func() bool { return r.stats.Snapshot().Phase == status.PhaseFollowing })
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"views": 1}}))
	e.waitAuthor(2, nil)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := skipped(r); s != 0 {
		t.Fatalf("%d updates spared after the restart; want the item with an old join sent", s)
	}

	// A reindex rewrites every join: the index is transform(collection)
	// again, and a change touching nothing read is spared again.
	if _, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil); err != nil {
		t.Fatal(err)
	}
	e.equal(job)
	r = e.run(job, l)
	until(t, "following", func() bool { return r.stats.Snapshot().Phase == status.PhaseFollowing })
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 3}, bson.M{"$set": bson.M{"views": 2}}))
	until(t, "the views update spared after the reindex", func() bool { return skipped(r) == 1 })
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
