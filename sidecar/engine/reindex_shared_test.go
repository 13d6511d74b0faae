package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/transform"
)

// helper is a standby's engine doing chunks of the job's shared reindex,
// with its presence record of the job.
func (e *env) helper(job *transform.Job, process string) (*engine.Engine, func()) {
	e.t.Helper()
	cfg := e.cfg
	cfg.Process = process
	eng := engine.New(e.db, e.state, e.errs, cfg, nil, e.log)
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })
	if err := st.MarkPresent(e.ctx, "items", process, job.Hash, "", time.Hour); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); eng.HelpReindex(ctx, job, nil) }()
	return eng, func() { cancel(); <-done }
}

// A reindex shared with a standby converges exactly, with the stream's
// writes during it, a claimant that stalls past its slot lease (its chunk
// is claimed again, its late result refused), and a high mark of a claim
// the holder never opened (ignored); the results are deleted once applied.
func TestSharedReindexConvergesWithAStandbyAndAStalledClaimant(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 100
	e.cfg.ReindexParallel = 3
	e.insert(0, 1500, nil)
	e.insert(1500, 1600, bson.M{"hidden": true})
	e.insert(1600, 1610, bson.M{"throw": true})
	job := e.job(itemsJS)
	standby, stop := e.helper(job, "test:2:b")
	defer stop()
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })

	// A third process claims one chunk and stops there.
	stalled := claimOne(e, st, job.Hash, testTTL/2)
	e.cfg.Process = "test:1:a"
	r := e.run(job, e.acquire())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the application writes meanwhile
		defer wg.Done()
		for i := 0; i < 200; i++ {
			e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": (i * 7) % 1500}, bson.M{"$set": bson.M{"title": "changed", "n": -i}}))
			if i%10 == 0 {
				e.ok(e.coll.DeleteOne(e.ctx, bson.M{"_id": (i * 13) % 1500}))
				e.insert(5000+i, 5001+i, nil)
			}
		}
	}()
	var c *jobstate.Claim
	select {
	case c = <-stalled:
	case <-e.ctx.Done():
		t.Fatal("no chunk was claimed")
	}
	// A high mark of a window never opened is not a chunk's.
	e.ok(e.state.UpdateOne(e.ctx, bson.M{"_id": bson.M{"watermark": "items"}},
		bson.M{"$set": bson.M{"mark": c.Run + "/" + "0" + "/forged/hi"}}))
	// Its lease lapses by the server's clock (the job's lease does not).
	e.mongo.AdvanceClock(testTTL/2 + time.Second)
	wg.Wait()
	e.settled(job)
	if err := st.WriteChunkResult(e.ctx, c, &jobstate.ChunkResult{}); !errors.Is(err, jobstate.ErrClaimLost) {
		t.Fatalf("the stalled claimant's result after the takeover: %v", err)
	}
	if n := engine.ClaimsDone(standby); n == 0 {
		t.Fatal("the standby did no chunk")
	}
	if n, m, err := st.ChunkCounts(e.ctx, "items"); err != nil || n != 0 || m != 0 {
		t.Fatalf("left after the reindex: %d chunks, %d results (%v)", n, m, err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// What a reindex costs MongoDB, alone and shared: the entries and bytes
// the state collection and the chunks collection add to the oplog per
// reindexed document (the test MongoDB counts them, mongotest.Written),
// side by side with the documents' own size. Figures in the log (go test
// ./sidecar/engine -run TestReindexMongoCost -v), the bounds asserted: a
// shared reindex writes each result once, deletes it once applied, and
// adds a few small entries per chunk.
func TestReindexMongoCostAloneAndShared(t *testing.T) {
	const n = 2000
	src, err := os.ReadFile(testutil.RepoFile("examples/transforms/articles.js"))
	if err != nil {
		t.Skip(err)
	}
	js := strings.NewReplacer(`collection: "articles"`, `collection: "items"`, `index: "articles"`, `index: "items"`).Replace(string(src))
	type cost struct{ entries, bytes float64 }
	measure := func(shared bool) (cost, float64) {
		e := newEnv(t, 0)
		e.cfg.PageSize = 1000
		docs := make([]any, n)
		var docBytes int
		for i := range docs {
			d := articles.Article(i)
			raw, _ := bson.Marshal(d)
			docBytes += len(raw)
			docs[i] = d
		}
		e.ok(e.coll.InsertMany(e.ctx, docs))
		job := e.job(js)
		if shared {
			_, stop := e.helper(job, "test:2:b")
			defer stop()
			e.cfg.Process, e.cfg.ReindexParallel = "test:1:a", 4
		} else {
			e.cfg.ReindexParallel = 1
		}
		before := e.mongo.Written("app", "meilistream")
		r := e.run(job, e.acquire())
		e.settled(job)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		st, ch := e.mongo.Written("app", "meilistream"), e.mongo.Written("app", "meilistream_chunks")
		return cost{
			entries: float64(st.Entries-before.Entries+ch.Entries) / n,
			bytes:   float64(st.Bytes-before.Bytes+ch.Bytes) / n,
		}, float64(docBytes) / n
	}
	alone, size := measure(false)
	shared, _ := measure(true)
	t.Logf("per reindexed document (%d documents of %.0f BSON bytes): alone %.3f oplog entries, %.0f bytes; shared %.3f entries, %.0f bytes",
		n, size, alone.entries, alone.bytes, shared.entries, shared.bytes)
	if shared.bytes > 2*size+alone.bytes+200 {
		t.Errorf("a shared reindex writes %.0f bytes per document: more than its result once, its _ids and its marks", shared.bytes)
	}
}

// A paused job's shared reindex is left alone by every claimant, the
// holder's own and a standby's: the chunks the holder published wait,
// unclaimed, and no result piles up in the chunks collection. Resumed, the
// claimants take them again and the reindex converges exactly.
func TestSharedReindexOfAPausedJobIsClaimedOnlyOnceResumed(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 100
	e.cfg.ReindexParallel = 3
	e.cfg.RetryPoll = 20 * time.Millisecond
	e.insert(0, 1500, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })
	if err := st.RecordPause(e.ctx, "items", l, "cli:1:x"); err != nil {
		t.Fatal(err)
	}
	var holderLog, standbyLog testutil.SyncBuffer
	testLog := e.log
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &standbyLog})
	standby, stop := e.helper(job, "test:2:b")
	defer stop()
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: io.MultiWriter(&holderLog, testWriter{t})})
	e.cfg.Process = "test:1:a"
	r := e.run(job, l)
	e.log = testLog

	const pausedSaid = "the job is paused: no chunk of its shared reindex is claimed"
	claimed := func() (int64, int64) {
		n, err := e.state.CountDocuments(e.ctx, bson.M{"_id.chunk": "items", "$or": bson.A{
			bson.M{"slot": bson.M{"$exists": true}}, bson.M{"submitted": true}}})
		if err != nil {
			t.Fatal(err)
		}
		_, results, err := st.ChunkCounts(e.ctx, "items")
		if err != nil {
			t.Fatal(err)
		}
		return n, results
	}
	// Both processes' claimants met the published chunks and the pause
	// (or, not honouring it, claimed).
	until(t, "the claimants finding the job paused", func() bool {
		if n, results := claimed(); n > 0 || results > 0 {
			return true
		}
		return strings.Contains(standbyLog.String(), pausedSaid) && strings.Contains(holderLog.String(), pausedSaid)
	})
	if n, results := claimed(); n > 0 || results > 0 || engine.ClaimsDone(standby) > 0 {
		t.Fatalf("while paused: %d chunks claimed or done, %d results, %d done by the standby", n, results, engine.ClaimsDone(standby))
	}
	if chunks, _, err := st.ChunkCounts(e.ctx, "items"); err != nil || chunks == 0 {
		t.Fatalf("no chunk published while paused (%v): the claimants had nothing to refuse", err)
	}

	if got := e.ask(jobstate.ResumeKind, ""); got.State != jobstate.RequestDone {
		t.Fatalf("resume answered %+v", got)
	}
	e.settled(job)
	if n := engine.ClaimsDone(standby); n == 0 {
		t.Fatal("the standby did no chunk once resumed")
	}
	until(t, "the standby saying it claims again", func() bool {
		return strings.Contains(standbyLog.String(), "no longer paused: claiming chunks")
	})
	if n, m, err := st.ChunkCounts(e.ctx, "items"); err != nil || n != 0 || m != 0 {
		t.Fatalf("left after the reindex: %d chunks, %d results (%v)", n, m, err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// `meilistream pause` in the middle of a shared reindex: a chunk held by
// a stalled claimant keeps the reindex from ending, so the pause lands
// mid-reindex. While paused, the standby stops claiming (it says so) and
// the stalled claim, once lapsed, is claimable by nobody; resumed, the
// reindex converges exactly and leaves no chunk or result.
func TestSharedReindexPausedMidwayStopsClaimingAndEndsExactOnceResumed(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 100
	e.cfg.ReindexParallel = 3
	e.cfg.RetryPoll = 20 * time.Millisecond
	e.insert(0, 1500, nil)
	job := e.job(itemsJS)
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })
	var standbyLog testutil.SyncBuffer
	testLog := e.log
	e.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: io.MultiWriter(&standbyLog, testWriter{t})})
	standby, stop := e.helper(job, "test:2:b")
	defer stop()
	e.log = testLog

	// A third process claims one chunk and renews its claim until the
	// pause is answered; then it stops, and its claim lapses once the
	// server's clock is moved past it (the job's lease does not).
	const stallTTL = testTTL / 2
	stalled := claimOne(e, st, job.Hash, stallTTL)
	e.cfg.Process = "test:1:a"
	r := e.run(job, e.acquire())
	var c *jobstate.Claim
	select {
	case c = <-stalled:
	case <-e.ctx.Done():
		t.Fatal("no chunk was claimed")
	}
	renewing, renewed := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-renewing:
				renewed <- nil
				return
			case <-tick.C:
				if err := st.RenewClaim(e.ctx, c, stallTTL); err != nil {
					renewed <- err
					return
				}
			}
		}
	}()
	until(t, "the standby doing chunks", func() bool { return engine.ClaimsDone(standby) > 0 })

	if got := e.ask(jobstate.PauseKind, ""); got.State != jobstate.RequestDone {
		t.Fatalf("pause answered %+v", got)
	}
	close(renewing)
	if err := <-renewed; err != nil {
		t.Fatalf("the stalled claim, renewed until the pause: %v", err)
	}
	const pausedSaid = "the job is paused: no chunk of its shared reindex is claimed"
	until(t, "the standby finding the job paused, its claims in flight done", func() bool {
		n, err := e.state.CountDocuments(e.ctx, bson.M{"_id.chunk": "items", "owner": "test:2:b", "slot": bson.M{"$exists": true}})
		return err == nil && n == 0 && strings.Contains(standbyLog.String(), pausedSaid)
	})
	done := engine.ClaimsDone(standby)
	// The stalled claim lapses by the server's clock: its chunk would be
	// claimable, but the job is paused.
	e.mongo.AdvanceClock(stallTTL + time.Second)
	if p, err := st.ClaimChunk(e.ctx, "items", job.Hash, "test:4:probe", time.Minute, 0); !errors.Is(err, jobstate.ErrPaused) || p != nil {
		t.Fatalf("a claim while paused: %+v %v, want ErrPaused", p, err)
	}
	if n := engine.ClaimsDone(standby); n != done {
		t.Fatalf("the standby did %d chunks while paused", n-done)
	}

	if got := e.ask(jobstate.ResumeKind, ""); got.State != jobstate.RequestDone {
		t.Fatalf("resume answered %+v", got)
	}
	e.settled(job)
	if err := st.WriteChunkResult(e.ctx, c, &jobstate.ChunkResult{}); !errors.Is(err, jobstate.ErrClaimLost) {
		t.Fatalf("the stalled claimant's result after the takeover: %v", err)
	}
	if n, m, err := st.ChunkCounts(e.ctx, "items"); err != nil || n != 0 || m != 0 {
		t.Fatalf("left after the reindex: %d chunks, %d results (%v)", n, m, err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// claimOne claims one chunk of the job items for a third process,
// "test:3:stalled", under ttl, as soon as one is published, and hands
// over its claim.
func claimOne(e *env, st *jobstate.Store, hash string, ttl time.Duration) <-chan *jobstate.Claim {
	claimed := make(chan *jobstate.Claim, 1)
	go func() {
		for e.ctx.Err() == nil {
			c, err := st.ClaimChunk(e.ctx, "items", hash, "test:3:stalled", ttl, 0)
			if err == nil && c != nil {
				claimed <- c
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return claimed
}

// A process standing by for many jobs asks MongoDB whether any has chunks
// in one read a poll for all of them, not one per job, and claims a
// chunk published later: idle, twenty jobs' standbys cost the watch's
// reads, and the per-job chunk query is sent once per job (its first
// claim) until a chunk is there.
func TestAStandbyOfManyJobsLooksForChunksInOneReadForAll(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.ReindexParallel = 3
	var finds, watches atomic.Int64
	mon := &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		switch {
		case ev.CommandName == "find" && strings.Contains(ev.Command.String(), `"_id.chunk"`):
			finds.Add(1)
		case ev.CommandName == "distinct":
			watches.Add(1)
		}
	}}
	db := e.monitoredDB(mon)
	cfg := e.cfg
	cfg.Process = "test:2:b"
	eng := engine.New(db, db.Collection("meilistream"), e.errs, cfg, nil, e.log)
	const jobs = 20
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var last *transform.Job
	for i := 0; i < jobs; i++ {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("items%d.js", i))
		job, err := transform.LoadFile(path, []byte(itemsJS), transform.Options{MemoryLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		last = job
		wg.Add(1)
		go func() { defer wg.Done(); eng.HelpReindex(ctx, job, nil) }()
	}
	// Until the standbys have made 60 reads, at most one chunk query per
	// job (each claimant's first) is among them.
	testutil.Until(t, 2*time.Minute, "60 reads for chunks", func() bool { return finds.Load()+watches.Load() >= 60 },
		func() string { return fmt.Sprintf("%d chunk queries, %d watch reads", finds.Load(), watches.Load()) })
	if f := finds.Load(); f > jobs+2 {
		t.Fatalf("%d chunk queries and %d watch reads from %d idle standbys: want at most one chunk query a job", f, watches.Load(), jobs)
	}
	// A chunk published for the last job is claimed by its standby.
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })
	if err := st.EnsureSlotIndex(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.PublishChunk(e.ctx, noFence{}, jobstate.SharedChunk{Job: last.Name, Run: "r", Seq: 0, Hash: last.Hash, Parallel: 3,
		IDs: []bson.RawValue{rawInt(1)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 2*time.Minute, "the chunk claimed by the standby", func() bool {
		n, _ := e.state.CountDocuments(e.ctx, bson.M{"_id.chunk": last.Name, "owner": "test:2:b"})
		m, _ := e.state.CountDocuments(e.ctx, bson.M{"_id.chunk": last.Name, "submitted": true})
		return n+m > 0
	}, nil)
}

// noFence is a lease that always holds, for chunks published by a test.
type noFence struct{}

func (noFence) Epoch() int64 { return 1 }
func (noFence) Err() error   { return nil }

func rawInt(n int32) bson.RawValue {
	return bson.RawValue{Type: bson.TypeInt32, Value: bsoncore.AppendInt32(nil, n)}
}

// A chunk whose result passes what one MongoDB document holds goes
// through the shared path all the same, in several result documents: a
// standby's results are applied, none transformed again by the holder,
// and the index ends as transform(collection).
func TestSharedReindexOfLargeDocumentsAppliesTheStandbysResults(t *testing.T) {
	e := newEnv(t, 0)
	// Chunks of sixteen search documents of 780 KB (a transform's result
	// is at most 1 MB of JSON): results of 12.5 MB.
	e.cfg.PageSize = 8
	e.cfg.ReindexParallel = 2
	body := strings.Repeat("large ", 130_000)
	for i := 0; i < 64; i++ {
		e.ok(e.coll.InsertOne(e.ctx, bson.M{"_id": i, "title": body, "n": i}))
	}
	job := e.job(itemsJS)
	standby, stop := e.helper(job, "test:2:b")
	defer stop()
	e.cfg.Process = "test:1:a"
	r := e.run(job, e.acquire())
	e.settled(job)
	if n := engine.ClaimsDone(standby); n == 0 {
		t.Fatal("the standby did no chunk")
	}
	if n := r.stats.Snapshot().ChunksRedone; n != 0 {
		t.Fatalf("the holder transformed %d chunks again: want the standby's results applied", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A claimant that has just done a chunk claims its next one in the slot
// it gave back, without reaping first: of six chunks done one after the
// other, only the first two claims (no slot given back yet) reap.
func TestAClaimantClaimsItsNextChunkInTheSlotItGaveBack(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.ReindexParallel = 2
	e.insert(0, 12, nil)
	job := e.job(itemsJS)
	var mu sync.Mutex
	var reaps, claims int
	reapsAtClaim := map[int]int{}
	mon := &event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName == "update" && strings.Contains(ev.Command.String(), `"$unset"`) && strings.Contains(ev.Command.String(), `"$lt"`) {
				mu.Lock()
				reaps++
				mu.Unlock()
			}
		},
		Succeeded: func(_ context.Context, ev *event.CommandSucceededEvent) {
			if ev.CommandName == "findAndModify" && ev.Reply.Lookup("value").Type == bson.TypeEmbeddedDocument {
				mu.Lock()
				claims++
				reapsAtClaim[claims] = reaps
				mu.Unlock()
			}
		},
	}
	db := e.monitoredDB(mon)
	cfg := e.cfg
	cfg.Process = "test:2:b"
	// The short way is taken for a third of a slot lease after a long
	// claim: a lease of minutes (a presence interval's) keeps six chunks
	// inside that third however slow the machine.
	cfg.PresenceInterval = 3 * time.Minute
	eng := engine.New(db, db.Collection("meilistream"), e.errs, cfg, nil, e.log)
	st := jobstate.New(e.state, e.errs, func(context.Context, int) error { return nil })
	if err := st.EnsureSlotIndex(e.ctx); err != nil {
		t.Fatal(err)
	}
	for seq := 0; seq < 6; seq++ {
		if err := st.PublishChunk(e.ctx, noFence{}, jobstate.SharedChunk{Job: "items", Run: "r", Seq: int64(seq), Hash: job.Hash, Parallel: 2,
			IDs: []bson.RawValue{rawInt(int32(2 * seq)), rawInt(int32(2*seq + 1))}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); eng.HelpReindex(ctx, job, nil) }()
	defer func() { cancel(); <-done }()
	testutil.Until(t, 2*time.Minute, "six chunks claimed", func() bool { mu.Lock(); defer mu.Unlock(); return claims >= 6 },
		func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d claims, %d reaps", claims, reaps) })
	mu.Lock()
	defer mu.Unlock()
	// The first two claims reap. Under the race detector on a loaded
	// machine one or two after them have been seen to go the long way
	// too (a reaping claim is still correct, only slower): every claim
	// the long way, as before the short claim, is what must not be.
	if n := reapsAtClaim[6]; n >= 6 {
		t.Fatalf("%d reaps before the sixth claim (%v): want the claims after the first two taken in the slot given back", n, reapsAtClaim)
	}
	t.Logf("reaps at each claim: %v", reapsAtClaim)
}
