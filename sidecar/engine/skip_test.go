package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/sidecar/httpapi"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/status"
)

// received is how many documents Meilisearch received in additions to
// index uid (and its staged index), whatever became of them.
func (e *env) received(uid string) int64 {
	e.t.Helper()
	var n int64
	q := &meilisearch.TasksQuery{Types: []meilisearch.TaskType{meilisearch.TaskTypeDocumentAdditionOrUpdate}, Limit: 1000}
	for {
		res, err := e.mc.GetTasks(e.ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, t := range res.Results {
			if strings.HasPrefix(t.IndexUID, uid) {
				n += t.Details.ReceivedDocuments
			}
		}
		if res.Next <= 0 || len(res.Results) == 0 {
			return n
		}
		q.From = res.Next
	}
}

// views increments the views counter of documents [from, to), which no
// transform of these tests reads.
func (e *env) views(from, to int) {
	e.t.Helper()
	if _, err := e.coll.UpdateMany(e.ctx, bson.M{"_id": bson.M{"$gte": from, "$lt": to}}, bson.M{"$inc": bson.M{"views": 1}}); err != nil {
		e.t.Fatal(err)
	}
}

// quiet waits until the stream has caught up with the collection's last
// change (marker: an insert of a hidden document, which the transform
// keeps out) and everything before it is durable.
func (e *env) quiet(r *running, id int) {
	e.t.Helper()
	changes := r.stats.Snapshot().Changes
	e.insert(id, id+1, bson.M{"hidden": true})
	until(e.t, "the marker change read and durable", func() bool {
		s := r.stats.Snapshot()
		return s.Changes > changes && s.LagSeconds == 0
	})
}

func TestUpdatesOfFieldsTheTransformDoesNotReadAreNotSent(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 200, nil)
	job := e.job(itemsJS)
	reg := prometheus.NewRegistry()
	e.metrics = httpapi.NewMetrics(reg)
	r := e.run(job, e.acquire())
	e.settled(job)
	before := e.received("items")

	// 200 updates of a counter: none sent, all counted.
	e.views(0, 200)
	e.quiet(r, 100000)
	if got := e.received("items"); got != before {
		t.Fatalf("Meilisearch received %d documents for counter updates", got-before)
	}
	if s := r.stats.Snapshot(); s.SkippedUnchanged != 200 {
		t.Fatalf("skipped unchanged %d, want 200", s.SkippedUnchanged)
	}
	if v := metric(t, reg, "meilistream_documents_skipped_unchanged_total", "items"); v != 200 {
		t.Fatalf("metric %v, want 200", v)
	}

	// An update of a read field is sent, and so is one setting a field a
	// transform asked for though the document lacked it ($unset then).
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 5}, bson.M{"$set": bson.M{"title": "new", "views": 100}}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 6}, bson.M{"$set": bson.M{"hidden": true}}))
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 7}, bson.M{"$unset": bson.M{"n": ""}}))
	e.equal(job)
	if got := e.received("items"); got != before+2 { // 6 is a delete
		t.Fatalf("Meilisearch received %d documents for two updates of read fields", got-before)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func TestEveryUpdateIsSentWhenSkipUnchangedIsOffOrTheTransformAsksTheClock(t *testing.T) {
	for name, src := range map[string]string{
		"skipUnchanged false": strings.Replace(itemsJS, `index: "items",`, `index: "items", skipUnchanged: false,`, 1),
		"Date.now()":          strings.Replace(itemsJS, `n: doc.n }`, `n: doc.n, seen: Date.now() > 0 }`, 1),
		"Math.random()":       strings.Replace(itemsJS, `n: doc.n }`, `n: doc.n, r: Math.random() < 2 }`, 1),
		"ctx.operation":       strings.Replace(strings.Replace(itemsJS, `transform(doc)`, `transform(doc, ctx)`, 1), `n: doc.n }`, `n: doc.n, op: ctx.operation !== "" }`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.insert(0, 50, nil)
			job := e.job(src)
			if !strings.Contains(src, "skipUnchanged") && !job.SkipUnchanged {
				t.Fatal("skipUnchanged is not on by default")
			}
			r := e.run(job, e.acquire())
			e.settled(job)
			before := e.received("items")
			e.views(0, 50)
			e.quiet(r, 100000)
			until(t, "the 50 updates sent", func() bool { return e.received("items") == before+50 })
			if s := r.stats.Snapshot(); s.SkippedUnchanged != 0 {
				t.Fatalf("skipped unchanged %d", s.SkippedUnchanged)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A document whose last version the destination refused is not in it: an
// update of a field the transform does not read sends it again.
func TestADocumentTheDestinationRefusedIsSentAgainByAnyUpdate(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	e.settled(job)
	deep := bson.M{}
	for i := 0; i < meili.MaxDocumentDepth+2; i++ {
		deep = bson.M{"d": deep}
	}
	e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": 500, "title": "deep", "n": deep}))
	attempts := func() int32 {
		var rec struct {
			Attempts int32 `bson:"attempts"`
		}
		_ = e.errs.FindOne(e.ctx, bson.M{"sourceId": 500}).Decode(&rec)
		return rec.Attempts
	}
	until(t, "the deep document refused", func() bool { return attempts() == 1 })
	e.views(500, 501)
	until(t, "the deep document sent again", func() bool { return attempts() == 2 })
	if s := r.stats.Snapshot(); s.SkippedUnchanged != 0 {
		t.Fatalf("skipped unchanged %d", s.SkippedUnchanged)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// While a reindex runs, a chunk drops the rows the stream changed in its
// window: an update not sent would leave its document out of the new
// index. Counter updates made all through a swap reindex all land.
func TestNothingIsSparedWhileAReindexRuns(t *testing.T) {
	e := newEnv(t, 1_000_000)
	e.cfg.PageSize = 50
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	e.insert(0, 2000, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	rounds := 0
	for ; rounds < 40 && r.stats.Snapshot().Phase == status.PhaseReindexing; rounds++ {
		lo := rounds * 50 % 2000
		e.views(lo, lo+100)
	}
	if r.stats.Snapshot().Phase == status.PhaseReindexing {
		t.Logf("%d rounds of updates while reindexing", rounds)
	} else if rounds < 5 {
		t.Fatalf("the reindex ended after %d rounds of updates; make it longer", rounds)
	}
	e.settled(job)
	// The commit records the position before it counts the reindex.
	until(t, "the reindex counted", func() bool { return r.stats.Snapshot().Reindexes == 1 })
	e.views(0, 2000)
	e.quiet(r, 100000)
	if s := r.stats.Snapshot(); s.SkippedUnchanged < 2000 {
		t.Fatalf("after the reindex, %d updates spared, want at least 2000", s.SkippedUnchanged)
	}
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// The queue the Meilisearch sink keeps is shown in the job's figures.
func TestTheSinksQueueIsShown(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	reg := prometheus.NewRegistry()
	e.metrics = httpapi.NewMetrics(reg)
	r := e.run(job, e.acquire())
	e.settled(job)
	e.meili.PauseTasks()
	e.insert(10, 20, nil)
	until(t, "a task enqueued shown", func() bool {
		q := r.stats.Snapshot().Queue
		return q != nil && q.Tasks >= 1 && q.Bytes > 0 && metric(t, reg, "meilistream_meili_enqueued_tasks", "items") >= 1
	})
	e.meili.ResumeTasks()
	e.equal(job)
	until(t, "the queue empty again", func() bool {
		q := r.stats.Snapshot().Queue
		return q != nil && q.Tasks == 0 && q.Bytes == 0
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// updatesAfterPosition is how many updates of the collection an
// unfiltered change stream (the database's) resumed from the job's recorded position sees
// (-1 before a position is recorded).
func (e *env) updatesAfterPosition() int {
	e.t.Helper()
	var d struct {
		Token bson.Raw `bson:"token"`
	}
	if err := e.state.FindOne(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: "items"}}}}).Decode(&d); err != nil || len(d.Token) == 0 {
		return -1
	}
	// The job's stream is the database's: its position may be an event
	// of the state collection.
	cs, err := e.db.Watch(e.ctx, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(d.Token).SetMaxAwaitTime(10*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cs.Close(e.ctx)
	n := 0
	for i := 0; i < 3; i++ { // the open's first batch, then getMores
		for cs.TryNext(e.ctx) {
			op, _ := cs.Current.Lookup("operationType").StringValueOK()
			if coll, _ := cs.Current.Lookup("ns", "coll").StringValueOK(); op == "update" && coll == "items" {
				n++
			}
		}
	}
	return n
}

// With fields, the server drops the updates that touch none of them: the
// follow loop never sees them, yet its position moves past them (the
// post-batch resume tokens of its empty getMores), and a restart resumes
// from there. Documents are trimmed to the fields wherever the job reads
// them: the reindex, the stream.
func TestFieldsFilterUpdatesAtTheServerAndThePositionStillMovesOn(t *testing.T) {
	e := newEnv(t, 0)
	e.insert(0, 100, bson.M{"secret": "s"})
	// {...doc}: the transform would copy every field it is given.
	job := e.job(`module.exports = { collection: "items", index: "items", fields: ["title", "n"],
		transform(doc) { return {...doc}; } };`)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	for _, d := range e.meili.Documents("items") {
		if _, ok := d["secret"]; ok {
			t.Fatalf("a reindexed document holds a field outside fields: %v", d)
		}
	}
	changes := r.stats.Snapshot().Changes
	e.views(0, 100)
	e.ok(e.coll.UpdateMany(e.ctx, bson.M{}, bson.M{"$set": bson.M{"secret": "t"}}))
	until(t, "the position past the dropped updates", func() bool { return e.updatesAfterPosition() == 0 })
	if s := r.stats.Snapshot(); s.Changes != changes {
		t.Fatalf("%d dropped updates crossed the network", s.Changes-changes)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Resumed from the moved position: more dropped updates, and one of a
	// declared field, which is all the stream shows.
	e.views(0, 100)
	e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 5}, bson.M{"$set": bson.M{"title": "new", "secret": "u"}}))
	r = e.run(job, l)
	e.equal(job)
	until(t, "the title update read", func() bool { return r.stats.Snapshot().Changes == 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Changes != 1 || s.Reindexes != 0 {
		t.Fatalf("after the restart: %+v", s)
	}
	if !e.liveHas(5, "new") {
		t.Fatal("the update of a declared field is not in the index")
	}
}

// With lookups: a counter update is spared; an update moving an item to
// another author (the lookup's localField, which the transform never reads
// itself) is sent, and so are the dependents of a related change; with
// fields, the localFields are kept in the trimmed documents and their
// updates pass the server's filter.
func TestLookupsLocalFieldsCountAsReadAndStayInTheTrimmedDocuments(t *testing.T) {
	for name, src := range map[string]string{
		"skipUnchanged": joinedJS,
		"with fields":   strings.Replace(joinedJS, `index: "items",`, `index: "items", fields: ["title"],`, 1),
		"as a field":    strings.Replace(strings.Replace(joinedJS, `project: { name: 1 } },`, `project: { name: 1 }, as: "writer" },`, 1), `author: ctx.lookups.author ? ctx.lookups.author.name : null,`, `author: doc.writer ? doc.writer.name : null,`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.seedJoined(50)
			job := e.job(src)
			r := e.run(job, e.acquire())
			e.settled(job)
			e.views(0, 50)
			e.quiet(r, 100000)
			if s := r.stats.Snapshot(); s.SkippedUnchanged != 50 && name != "with fields" {
				t.Fatalf("%d counter updates spared, want 50", s.SkippedUnchanged)
			}
			e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 7}, bson.M{"$set": bson.M{"authorId": 4}}))
			e.ok(e.db.Collection("users").UpdateOne(e.ctx, bson.M{"_id": 2}, bson.M{"$set": bson.M{"name": "Ada"}}))
			e.equal(job)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
