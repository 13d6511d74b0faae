package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// engineAs is an engine of another process (its presence records are that
// process's).
func (e *env) engineAs(process string) *engine.Engine {
	c := e.cfg
	c.Process = process
	return engine.New(e.db, e.state, e.errs, c, e.metrics, e.log)
}

func TestAnOlderTransformStandsByOnlyWhileALiveProcessRunsTheNewerOne(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.insert(0, 50, nil)
	old := e.job(itemsJS)
	updated := e.job(strings.Replace(itemsJS, "n: doc.n", "n: doc.n, version: 2", 1))
	l := e.acquire()
	r := e.run(old, l)
	e.settled(old)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r = e.run(updated, l)
	e.settled(updated)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// pod-b runs the updated file (holder or standby): pod-a, with the
	// file that transform replaced, stands by rather than roll it back.
	pb := e.engineAs("pod-b").KeepPresence(updated)
	defer pb.Close()
	until(t, "pod-a told to stand by", func() bool {
		return errors.Is(e.engine().Older(e.ctx, old), engine.ErrTransformOlder)
	})
	err := e.engine().Older(e.ctx, old)
	for _, want := range []string{"items.js (hash " + old.Hash[:12] + ") is the one replaced by the recorded transform (hash " + updated.Hash[:12], "which pod-b runs"} {
		if !strings.Contains(errs.Format(err), want) {
			t.Errorf("%q does not say %q", errs.Format(err), want)
		}
	}
	if err := e.engine().Older(e.ctx, updated); err != nil {
		t.Errorf("the newer transform told to stand by: %v", err)
	}
	swaps := e.meili.Requests("POST /swap-indexes")
	r = e.run(old, l) // as if it had taken the lease anyway
	if err := r.wait(t); !errors.Is(err, engine.ErrTransformOlder) {
		t.Fatalf("a run with the older file: %v, want ErrTransformOlder", err)
	}
	if e.meili.Requests("POST /swap-indexes") != swaps || e.positionHash() != updated.Hash {
		t.Fatal("the older transform reindexed")
	}
	e.equal(updated)

	// pod-a's own record, even with the newer hash, is not another pod;
	// once pod-b is gone, no live pod runs the newer transform.
	pa := e.engine().KeepPresence(updated)
	pb.Close()
	until(t, "pod-a free to go back", func() bool { return e.engine().Older(e.ctx, old) == nil })
	pa.Close()

	// So going back is a revert, honoured at once.
	r = e.run(old, l)
	e.settled(old)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if s := r.stats.Snapshot(); s.Reindexes != 1 {
		t.Fatalf("revert: stats %+v, want one reindex", s)
	}
	states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
	if err != nil || len(states) != 1 || states[0].Position.Hash != old.Hash || states[0].Position.Previous != updated.Hash {
		t.Fatalf("state %+v %v: want the old hash recorded, the updated one before it", states, err)
	}
	// Presence records are gone with their processes (the delete is made
	// by Close; polled, as a loaded machine may answer it late).
	var left int64
	testutil.Until(t, 15*time.Second, "presence records gone after Close", func() bool {
		left, _ = e.state.CountDocuments(e.ctx, bson.D{{Key: "_id.presence", Value: "items"}})
		return left == 0
	}, func() string { return fmt.Sprintf("%d presence records left after Close", left) })
}

func TestPositionRecordedWithTheLegacyHashDoesNotReindex(t *testing.T) {
	e := newEnv(t, 0)
	var logs testutil.SyncBuffer
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	e.insert(0, 30, nil)
	job := e.job(itemsJS)
	if job.LegacyHash == "" || job.LegacyHash == job.Hash {
		t.Fatalf("legacy hash %q, hash %q", job.LegacyHash, job.Hash)
	}
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// The position as an earlier release recorded it: the file's bytes.
	e.ok(e.state.UpdateOne(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: "items"}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "hash", Value: job.LegacyHash}}}}))
	swaps := e.meili.Requests("POST /swap-indexes")
	for i := range 2 {
		r = e.run(job, l)
		until(t, "the token hash recorded", func() bool { return e.positionHash() == job.Hash })
		e.insert(100+i, 101+i, nil) // followed as usual
		e.equal(job)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if s := r.stats.Snapshot(); s.Reindexes != 0 {
			t.Fatalf("stats %+v: the legacy hash reindexed", s)
		}
	}
	if e.meili.Requests("POST /swap-indexes") != swaps {
		t.Fatal("the legacy hash swapped an index in")
	}
	if n := strings.Count(logs.String(), "recorded by an earlier release"); n != 1 {
		t.Fatalf("the upgrade is logged %d times, want once:\n%s", n, logs.String())
	}
}

// slowItemsJS is itemsJS taking about 2 ms a document, so a reindex of a
// few hundred can be stopped after its first checkpoint.
var slowItemsJS = strings.Replace(itemsJS, "transform(doc) {", "transform(doc) { const t = Date.now(); while (Date.now() - t < 2) {}", 1)

// stopMidReindex runs a reindex of src and stops it once a checkpoint is
// recorded, leaving it unfinished.
func (e *env) stopMidReindex(src string, l engine.Lease) {
	e.t.Helper()
	job := e.job(src)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.engine().Reindex(ctx, job, e.sink(job, l), l, nil)
		done <- err
	}()
	until(e.t, "a checkpoint", func() bool {
		var cp struct {
			Count int64 `bson:"count"`
		}
		err := e.state.FindOne(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "reindex", Value: "items"}}}}).Decode(&cp)
		return err == nil && cp.Count > 0
	})
	cancel()
	if err := <-done; err == nil {
		e.t.Fatal("the reindex finished before it was stopped")
	}
}

func (e *env) hasIndex(uid string) bool {
	e.t.Helper()
	_, err := e.mc.GetIndex(e.ctx, uid)
	return err == nil
}

func TestAbandonedStagedIndexIsDeletedWhenTheReindexStartsOver(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.BatchSize, e.cfg.PageSize = 10, 20
	e.insert(0, 300, nil)
	l := e.acquire()

	t.Run("the job turned in place", func(t *testing.T) {
		e.stopMidReindex(slowItemsJS, l)
		if !e.hasIndex("items__reindex") {
			t.Fatal("no staged index after the stopped reindex")
		}
		inPlace := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items", reindex: "inplace",`, 1))
		if _, err := e.engine().Reindex(e.ctx, inPlace, e.sink(inPlace, l), l, nil); err != nil {
			t.Fatal(err)
		}
		if e.hasIndex("items__reindex") {
			t.Fatal("the abandoned staged index is still there")
		}
		states, err := jobstate.ReadState(e.ctx, e.state, e.errs)
		if err != nil || len(states) != 1 || states[0].Reindex != nil || states[0].Position.Hash != inPlace.Hash {
			t.Fatalf("state %+v %v: want no checkpoint, the in-place hash recorded", states, err)
		}
		e.equal(inPlace)
	})

	t.Run("the job's index moved", func(t *testing.T) {
		e.stopMidReindex(slowItemsJS, l)
		if !e.hasIndex("items__reindex") {
			t.Fatal("no staged index after the stopped reindex")
		}
		moved := e.job(strings.Replace(itemsJS, `index: "items",`, `index: "items_v2",`, 1))
		if _, err := e.engine().Reindex(e.ctx, moved, e.sink(moved, l), l, nil); err != nil {
			t.Fatal(err)
		}
		if e.hasIndex("items__reindex") || e.hasIndex("items_v2__reindex") || !e.hasIndex("items_v2") {
			t.Fatal("want items_v2 alone, without staged indexes")
		}
	})
}

// A process keeps all of its jobs' presence records from one loop: many
// kept records cost no goroutine each, each record is still written at once
// and refreshed every interval by the server's clock, and one closed record
// is deleted while the others go on being refreshed.
func TestAProcessRefreshesAllItsPresenceRecordsFromOneLoop(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.Process = "pod-a"
	e.cfg.PresenceInterval = 200 * time.Millisecond
	eng := e.engine()
	base := e.job(itemsJS)
	const jobs = 40
	before := runtime.NumGoroutine()
	var kept []*engine.Presence
	for i := range jobs {
		job := *base
		job.Name = fmt.Sprintf("items%02d", i)
		kept = append(kept, eng.KeepPresence(&job))
	}
	defer func() {
		for _, p := range kept {
			p.Close()
		}
	}()
	records := func(filter bson.D) int64 {
		n, _ := e.state.CountDocuments(e.ctx, append(bson.D{{Key: "_id.process", Value: "pod-a"}}, filter...))
		return n
	}
	var n int64
	testutil.Until(t, hangBound, "every job's record written", func() bool {
		n = records(nil)
		return n == jobs
	}, func() string { return fmt.Sprintf("%d of %d records", n, jobs) })
	if grown := runtime.NumGoroutine() - before; grown >= jobs/2 {
		t.Fatalf("%d goroutines more for %d kept presence records, want a few for the process", grown, jobs)
	}

	// Refreshed: every record's server date moves past the moment all
	// were first seen.
	var at struct {
		At time.Time `bson:"at"`
	}
	if err := e.state.FindOne(e.ctx, bson.D{{Key: "_id.process", Value: "pod-a"}},
		options.FindOne().SetSort(bson.D{{Key: "at", Value: -1}})).Decode(&at); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, hangBound, "every record refreshed", func() bool {
		n = records(bson.D{{Key: "at", Value: bson.D{{Key: "$gt", Value: at.At}}}})
		return n == jobs
	}, func() string { return fmt.Sprintf("%d of %d records refreshed", n, jobs) })

	kept[0].Close()
	if got := records(bson.D{{Key: "_id.presence", Value: "items00"}}); got != 0 {
		t.Fatalf("%d records of a closed presence", got)
	}
	if err := e.state.FindOne(e.ctx, bson.D{{Key: "_id.process", Value: "pod-a"}},
		options.FindOne().SetSort(bson.D{{Key: "at", Value: -1}})).Decode(&at); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, hangBound, "the other records refreshed after one closed", func() bool {
		n = records(bson.D{{Key: "at", Value: bson.D{{Key: "$gt", Value: at.At}}}})
		return n == jobs-1
	}, func() string { return fmt.Sprintf("%d of %d records refreshed", n, jobs-1) })
	if got := records(bson.D{{Key: "_id.presence", Value: "items00"}}); got != 0 {
		t.Fatalf("a closed presence's record written again (%d)", got)
	}
}
