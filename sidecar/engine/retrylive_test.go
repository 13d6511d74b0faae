package engine_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/status"
)

func TestRetryWhileFollowingGoesThroughTheJobInOrder(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.cfg.RetryPoll = 20 * time.Millisecond
	e.insert(0, 200, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Records a past failure left (the destination refused them then):
	// 40 documents that go through now, one no longer in the collection,
	// and one that still fails.
	var recs []any
	for _, id := range append(intRange(0, 40), 9999) {
		recs = append(recs, bson.D{{Key: "_id", Value: bson.D{{Key: "job", Value: "items"}, {Key: "id", Value: id}}},
			{Key: "job", Value: "items"}, {Key: "sourceId", Value: id}, {Key: "code", Value: "invalid_document"}, {Key: "message", Value: "refused"}, {Key: "attempts", Value: 1}})
	}
	if _, err := e.errs.InsertMany(e.ctx, recs); err != nil {
		t.Fatal(err)
	}
	e.insert(200, 201, bson.M{"throw": true})
	r = e.run(job, l)
	until(t, "following, three recorded kinds", func() bool {
		n, _ := e.errs.CountDocuments(e.ctx, bson.M{"job": "items"})
		return r.stats.Snapshot().Phase == status.PhaseFollowing && n == 42
	})

	id, err := jobstate.RequestRetry(e.ctx, e.state, "items", "cli:1:x", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	until(t, "the request taken", func() bool {
		got, err := jobstate.ReadRequest(e.ctx, e.state, "items", id)
		return err == nil && got != nil && got.State != jobstate.RequestPending
	})
	// The retried documents change while the retry runs: whatever the
	// interleaving, each ends with its newest version. (A change written
	// before the retry read the records clears its record by itself: the
	// retry then has fewer to do.)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		coll := e.freshItems()
		for v := 0; ; v++ {
			select {
			case <-stop:
				return
			default:
			}
			id := v % 40
			if _, err := coll.UpdateOne(e.ctx, bson.M{"_id": id}, bson.M{"$set": bson.M{"title": "version " + strconv.Itoa(v)}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var got *jobstate.RetryRequest
	until(t, "the retry answered", func() bool {
		got, err = jobstate.ReadRequest(e.ctx, e.state, "items", id)
		return err == nil && got != nil && (got.State == jobstate.RequestDone || got.State == jobstate.RequestFailed)
	})
	close(stop)
	wg.Wait()
	if got.State != jobstate.RequestDone || got.Holder != "pod-a" || got.Retried < 2 || got.Retried > 42 || got.Gone != 1 || got.Failed != 1 ||
		got.Written+got.Gone+got.Failed != got.Retried {
		t.Fatalf("answer %+v: want done by pod-a, up to 42 retried, 1 gone, 1 failing, the rest written", got)
	}
	t.Logf("retried %d, written %d (the stream wrote the other %d first)", got.Retried, got.Written, 42-got.Retried)
	left, err := e.errs.Find(e.ctx, bson.M{"job": "items"})
	if err != nil {
		t.Fatal(err)
	}
	var rest []bson.M
	if err := left.All(e.ctx, &rest); err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0]["sourceId"] != int32(200) || rest[0]["code"] != "TRANSFORM_FAILED" {
		t.Fatalf("records left %v, want only 200's, failing again", rest)
	}
	e.equal(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func intRange(from, to int) []any {
	var out []any
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// A job reading its change stream takes a request when the stream reads
// its arrival, and one left before the job started when it starts: it
// does not wait for a poll (here ten minutes away).
func TestARequestIsTakenWhenItArrivesNotAtTheNextPoll(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.cfg.RetryPoll = 10 * time.Minute
	e.insert(0, 20, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	before, err := jobstate.RequestRetry(e.ctx, e.state, "items", "cli:1:x", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := e.run(job, l)
	e.settled(job)
	answered := func(id string) func() bool {
		return func() bool {
			got, err := jobstate.ReadRequest(e.ctx, e.state, "items", id)
			return err == nil && got != nil && got.State == jobstate.RequestDone
		}
	}
	until(t, "the request left before the start answered", answered(before))
	until(t, "following", func() bool { return r.stats.Snapshot().Phase == status.PhaseFollowing })
	for range 2 {
		id, err := jobstate.RequestRetry(e.ctx, e.state, "items", "cli:1:x", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		until(t, "the request written while following answered", answered(id))
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
