package engine_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/testutil"
)

// nanIDs are _ids with a NaN first: it sorts below every other number,
// yet {_id: {$gt: NaN}} matches none of them, so a walk reading on with
// $gt after a page ending at the NaN would skip to the strings.
func nanIDs() []any { return []any{math.NaN(), int32(1), int64(2), 2.5, "s"} }

// A reindex in chunks of one reads every _id after a NaN.
func TestReindexReadsTheNumbersAfterANaNID(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 2 // chunks of one: the NaN ends one
	var docs []any
	for _, id := range nanIDs() {
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "title", Value: "t"}})
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	job := e.job(itemsJS)
	l := e.acquire()
	sum, err := e.engine().Reindex(e.ctx, job, e.sink(job, l), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Indexed != int64(len(docs)) {
		t.Errorf("indexed %d documents, want %d", sum.Indexed, len(docs))
	}
	e.equal(job)
}

// A related change sends again every dependent, in pages of one, when
// one of them has a NaN _id.
func TestAFanOutReachesTheDependentsAfterANaNID(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 2 // fan-out pages of one: the NaN ends one
	users := e.db.Collection("users")
	e.ok(users.InsertOne(e.ctx, bson.M{"_id": 1, "name": "Ada"}))
	job := e.job(`module.exports = {
  collection: "items",
  index: "items",
  lookups: { author: { from: "users", localField: "authorId", foreignField: "_id" } },
  transform(doc, ctx) { return { title: doc.title, author: ctx.lookups.author ? ctx.lookups.author.name : null }; },
};`)
	r := e.run(job, e.acquire())
	e.settled(job)
	// Inserted while following, so that only the fan-out reads them in
	// pages.
	var docs []any
	for _, id := range nanIDs() {
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "title", Value: "t"}, {Key: "authorId", Value: 1}})
	}
	if _, err := e.coll.InsertMany(e.ctx, docs); err != nil {
		t.Fatal(err)
	}
	e.equal(job)
	e.ok(users.UpdateOne(e.ctx, bson.M{"_id": 1}, bson.M{"$set": bson.M{"name": "Ada Lovelace"}}))
	renamed := func() int { n, _ := e.indexHolds("Ada Lovelace"); return n }
	testutil.Until(t, 15*time.Second, "every dependent sent again", func() bool { return renamed() == len(docs) },
		func() string { return fmt.Sprintf("%d of %d dependents hold the new name", renamed(), len(docs)) })
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
