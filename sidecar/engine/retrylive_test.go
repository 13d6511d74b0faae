package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/engine"
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

// A process looks for the requests of all the jobs it holds in one query
// every RetryFallback polls; an idle job reading its stream asks for one
// (a findAndModify) only when its stream read a request's arrival or that
// look-up found one. A request whose arrival no stream read (here one left
// running by a holder that went away) is still taken, through the look-up.
func TestAProcessLooksForItsJobsRequestsInOneQuery(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.cfg.RetryPoll = 20 * time.Millisecond // a look-up every 200 ms
	e.insert(0, 20, nil)
	var claims, looks atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		switch ev.CommandName {
		case "findAndModify":
			if q, _ := ev.Command.Lookup("query").DocumentOK(); strings.Contains(q.String(), `"_id.retry"`) {
				claims.Add(1)
			}
		case "find":
			if f, _ := ev.Command.Lookup("filter").DocumentOK(); strings.Contains(f.String(), `"_id.retry"`) {
				looks.Add(1)
			}
		}
	}}
	db := e.monitoredDB(mon)
	eng := engine.New(db, db.Collection("meilistream"), db.Collection("meilistream_errors"), e.cfg, nil, e.log)
	base := e.job(itemsJS)
	const jobs = 4
	ctx, cancel := context.WithCancel(e.ctx)
	var runs sync.WaitGroup
	defer func() {
		cancel()
		runs.Wait()
	}()
	stats := make([]*status.JobStats, jobs)
	for i := range jobs {
		job := *base
		job.Name = fmt.Sprintf("items%d", i)
		job.Index = job.Name
		l, err := e.leases.Acquire(e.ctx, job.Name)
		if err != nil {
			t.Fatal(err)
		}
		stats[i] = status.NewJobStats()
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := eng.Run(ctx, &job, e.sink(&job, l), l, stats[i], nil); err != nil {
				t.Errorf("job %s: %v", job.Name, err)
			}
		}()
	}
	for i := range jobs {
		until(t, "job following", func() bool { return stats[i].Snapshot().Phase == status.PhaseFollowing })
	}
	// Idle: each job asked once at its start; from then on the process
	// asks for all of them together.
	var lastLooks int64
	testutil.Until(t, hangBound, "three look-ups by the process", func() bool {
		lastLooks = looks.Load()
		return lastLooks >= 3
	}, func() string { return fmt.Sprintf("%d look-ups", lastLooks) })
	before := claims.Load()
	testutil.Until(t, hangBound, "three more look-ups", func() bool {
		return looks.Load() >= lastLooks+3
	}, func() string { return fmt.Sprintf("%d look-ups", looks.Load()) })
	if got := claims.Load() - before; got != 0 {
		t.Fatalf("%d findAndModify for requests over three look-ups with none waiting, want 0 (the jobs asked by themselves)", got)
	}

	// A request left running by an earlier holder: its insert is not one
	// the stream passes (the record is written done, then set running),
	// so only the look-up finds it.
	id := "left"
	key := bson.D{{Key: "retry", Value: "items2"}, {Key: "request", Value: id}}
	if _, err := e.state.InsertOne(e.ctx, bson.D{{Key: "_id", Value: key}, {Key: "state", Value: jobstate.RequestDone},
		{Key: "requestedBy", Value: "cli:1:x"}, {Key: "requestedAt", Value: time.Now()}, {Key: "expiresAt", Value: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.state.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: key}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: jobstate.RequestRunning}, {Key: "holder", Value: "gone:1:x"}, {Key: "epoch", Value: int64(0)}}}}); err != nil {
		t.Fatal(err)
	}
	until(t, "the request left running answered by the holder", func() bool {
		got, err := jobstate.ReadRequest(e.ctx, e.state, "items2", id)
		return err == nil && got != nil && got.State == jobstate.RequestDone && got.Holder == "pod-a"
	})
}
