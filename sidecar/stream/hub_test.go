package stream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
)

// follower reads a Sub as the follow loop does: each item taken in, the
// last token read kept (where a restarted job joins again).
type follower struct {
	t    *testing.T
	job  *jobdef.Job
	sub  *Sub
	ids  []int32 // the _ids of its collection's inserts, in stream order
	last bson.Raw
}

func join(t *testing.T, ctx context.Context, h *Hub, job *jobdef.Job, tok bson.Raw, readAhead int) *follower {
	t.Helper()
	s, err := h.Join(ctx, job, tok, time.Millisecond, readAhead, nil)
	if err != nil {
		t.Fatalf("join %s: %v", job.Name, err)
	}
	f := &follower{t: t, job: job, sub: s, last: tok}
	if len(f.last) == 0 {
		f.last = s.ResumeToken()
	}
	return f
}

// take takes in one item, waiting at most until ctx ends; false when
// none came.
func (f *follower) take(ctx context.Context) bool {
	f.t.Helper()
	select {
	case it := <-f.sub.Items():
		if it.Err != nil {
			f.t.Fatalf("%s: %v", f.job.Name, it.Err)
		}
		for _, ev := range it.Events {
			coll, _ := ev.Lookup("ns", "coll").StringValueOK()
			if coll != f.job.Collection {
				f.t.Fatalf("%s got an event of %s", f.job.Name, coll)
			}
			tok := ev.Lookup("_id").Document()
			if !TokenLess(f.last, tok) {
				f.t.Fatalf("%s: event %s not after the last token read %s", f.job.Name, tok, f.last)
			}
			f.last = tok
			f.ids = append(f.ids, ev.Lookup("documentKey", "_id").Int32())
		}
		if it.Token != nil {
			f.last = it.Token
		}
		f.sub.Taken(it)
		return true
	case <-ctx.Done():
		return false
	}
}

// until takes items until it has n events.
func (f *follower) until(ctx context.Context, n int) {
	f.t.Helper()
	for len(f.ids) < n {
		if !f.take(ctx) {
			f.t.Fatalf("%s: %d of %d events read", f.job.Name, len(f.ids), n)
		}
	}
}

// exactly fails unless f read the inserts 0..n-1 once each, in order.
func (f *follower) exactly(n int) {
	f.t.Helper()
	if len(f.ids) != n {
		f.t.Fatalf("%s read %d events, want %d: %v", f.job.Name, len(f.ids), n, f.ids)
	}
	for i, id := range f.ids {
		if id != int32(i) {
			f.t.Fatalf("%s: event %d is _id %d: %v", f.job.Name, i, id, f.ids)
		}
	}
}

func insert(t *testing.T, ctx context.Context, c *mongo.Collection, id int) {
	t.Helper()
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(id)}}); err != nil {
		t.Fatal(err)
	}
}

func openStreams(t *testing.T, ctx context.Context, db *mongo.Database) int64 {
	t.Helper()
	var st bson.Raw
	if err := db.Client().Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&st); err != nil {
		t.Fatal(err)
	}
	v := st.Lookup("metrics", "changeStreams", "cursor", "open", "total")
	n, ok := v.AsInt64OK()
	if !ok {
		t.Fatalf("serverStatus metrics.changeStreams.cursor.open.total: %s", v)
	}
	return n
}

// settle takes items in until every follower is on the shared stream.
func settle(t *testing.T, ctx context.Context, h *Hub, fs ...*follower) {
	t.Helper()
	for {
		h.mu.Lock()
		n, j := len(h.members), len(h.joining)
		h.mu.Unlock()
		if n == len(fs) && j == 0 {
			return
		}
		for _, f := range fs {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			f.take(tctx)
			cancel()
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d jobs on the shared stream", n, len(fs))
		}
	}
}

func jobOn(name string) *jobdef.Job { return &jobdef.Job{Name: name, Collection: name} }

func TestHubServesEveryJobFromOneStream(t *testing.T) {
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	ctx := testutil.Context(t, 60*time.Second)
	h := NewHubs("meilistream").For(db)
	var fs []*follower
	for i := range 5 {
		fs = append(fs, join(t, ctx, h, jobOn(fmt.Sprintf("c%d", i)), nil, 0))
	}
	for n := range 4 {
		for _, f := range fs {
			insert(t, ctx, db.Collection(f.job.Collection), n)
		}
	}
	for _, f := range fs {
		f.until(ctx, 4)
		f.exactly(4)
	}
	// The first job opened a stream of its own at the present and merged
	// at its first empty getMore; wait for every job to be on the shared
	// stream, then count the server's open change streams.
	for {
		h.mu.Lock()
		n := len(h.members)
		h.mu.Unlock()
		if n == len(fs) && openStreams(t, ctx, db) == 1 {
			break
		}
		for _, f := range fs {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			f.take(tctx)
			cancel()
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d jobs on the shared stream, %d streams open", n, len(fs), openStreams(t, ctx, db))
		}
	}
	insert(t, ctx, db.Collection("c2"), 4)
	fs[2].until(ctx, 5)
	fs[2].exactly(5)
	for _, f := range fs {
		f.sub.Close()
	}
}

// TestHubLosesNothingUnderChurn: jobs join and leave (a restart joins at
// the last token it read, as the follow loop does) while a writer inserts
// into every collection; each job reads each insert once, in order.
func TestHubLosesNothingUnderChurn(t *testing.T) {
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	ctx := testutil.Context(t, 120*time.Second)
	h := NewHubs("meilistream").For(db)
	const jobs, writes = 4, 60
	fs := make([]*follower, jobs)
	for i := range fs {
		fs[i] = join(t, ctx, h, jobOn(fmt.Sprintf("c%d", i)), nil, 0)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := range writes {
			for i := range jobs {
				if _, err := db.Collection(fmt.Sprintf("c%d", i)).InsertOne(ctx, bson.D{{Key: "_id", Value: int32(n)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	// Job 0 never leaves; the others leave and join again in turn, each
	// after reading a few more events.
	for round := 0; ; round++ {
		done := true
		for i, f := range fs {
			if len(f.ids) < writes {
				done = false
				tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				f.take(tctx)
				cancel()
			}
			if i > 0 && round%3 == i%3 && len(f.ids) < writes {
				f.sub.Close()
				s, err := h.Join(ctx, f.job, f.last, time.Millisecond, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				f.sub = s
			}
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("timed out")
		}
	}
	wg.Wait()
	for _, f := range fs {
		f.exactly(writes)
		f.sub.Close()
	}
}

// TestHubLateJoinerCatchesUpOnItsOwn: a job whose position is far behind
// the shared stream reads a stream of its own to the present, then merges;
// the shared stream is never reopened from its position.
func TestHubLateJoinerCatchesUpOnItsOwn(t *testing.T) {
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	ctx := testutil.Context(t, 60*time.Second)
	h := NewHubs("meilistream").For(db)
	a := join(t, ctx, h, jobOn("a"), nil, 0)
	b := join(t, ctx, h, jobOn("b"), nil, 0)
	insert(t, ctx, db.Collection("b"), 0)
	b.until(ctx, 1)
	b.sub.Close() // b stops at its first event
	for n := range 3 {
		insert(t, ctx, db.Collection("a"), n)
		insert(t, ctx, db.Collection("b"), n+1)
	}
	a.until(ctx, 3)
	srv.AdvanceClock(2 * CatchUpWindow)
	insert(t, ctx, db.Collection("a"), 3)
	a.until(ctx, 4)
	h.mu.Lock()
	ahead := !near(b.last, h.pos)
	h.mu.Unlock()
	if !ahead {
		t.Fatal("the shared stream is not past the catch-up window of b's position")
	}
	b.sub = join(t, ctx, h, jobOn("b"), b.last, 0).sub
	b.until(ctx, 4)
	b.exactly(4)
	for n := 4; n < 6; n++ {
		insert(t, ctx, db.Collection("a"), n)
		insert(t, ctx, db.Collection("b"), n)
	}
	a.until(ctx, 6)
	b.until(ctx, 6)
	a.exactly(6)
	b.exactly(6)
	a.sub.Close()
	b.sub.Close()
}

// TestHubHistoryLostIsTheJobsOwn: a job joining at a position the history
// no longer holds gets ChangeStreamHistoryLost; the job already on the
// shared stream reads on.
func TestHubHistoryLostIsTheJobsOwn(t *testing.T) {
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	ctx := testutil.Context(t, 60*time.Second)
	h := NewHubs("meilistream").For(db)
	a := join(t, ctx, h, jobOn("a"), nil, 0)
	b := join(t, ctx, h, jobOn("b"), nil, 0)
	settle(t, ctx, h, a, b)
	old := b.last
	b.sub.Close()
	srv.SetHistorySize(3)
	for n := range 10 {
		// One at a time: the shared stream keeps within the short history.
		insert(t, ctx, db.Collection("a"), n)
		a.until(ctx, n+1)
	}
	s, err := h.Join(ctx, jobOn("b"), old, time.Millisecond, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case it := <-s.Items():
		if !IsHistoryLost(it.Err) {
			t.Fatalf("b read %+v, want history lost", it)
		}
	case <-ctx.Done():
		t.Fatal("b read nothing")
	}
	s.Close()
	insert(t, ctx, db.Collection("a"), 10)
	a.until(ctx, 11)
	a.exactly(11)
	a.sub.Close()
}

// TestHubSlowJobReadsOnItsOwn: a job that takes nothing in while its
// budget is full is detached to its own stream; the others read on, and
// it still reads every event once, in order.
func TestHubSlowJobReadsOnItsOwn(t *testing.T) {
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	ctx := testutil.Context(t, 60*time.Second)
	h := NewHubs("meilistream").For(db)
	a := join(t, ctx, h, jobOn("a"), nil, 0)
	slow := join(t, ctx, h, jobOn("s"), nil, 200) // about one event
	const n = 30
	for i := range n {
		// In turns: the shared stream reads them in several batches.
		insert(t, ctx, db.Collection("s"), i)
		insert(t, ctx, db.Collection("a"), i)
		a.until(ctx, i+1)
	}
	a.exactly(n)
	h.mu.Lock()
	detached := h.detached
	h.mu.Unlock()
	if detached == 0 {
		t.Fatal("the slow job was never detached from the shared stream")
	}
	slow.until(ctx, n)
	slow.exactly(n)
	a.sub.Close()
	slow.sub.Close()
}

func TestTokenLess(t *testing.T) {
	tok := func(s string) bson.Raw {
		b, _ := bson.Marshal(bson.D{{Key: "_data", Value: s}})
		return b
	}
	for _, c := range []struct {
		a, b bson.Raw
		want bool
	}{
		{nil, tok("82"), true},
		{tok("82"), nil, false},
		// Cluster time first, then the event's place.
		{tok("8263F0A6E1000000012B"), tok("8263F0A6E2000000012B"), true},
		{tok("8263F0A6E100000001000000000000000580"), tok("8263F0A6E1000000010000000000000005C0"), true},
		{tok("8263f0a6e1000000012b"), tok("8263F0A6E1000000012C"), true},
		{tok("8263F0A6E1000000012B"), tok("8263F0A6E1000000012B"), false},
	} {
		if got := TokenLess(c.a, c.b); got != c.want {
			t.Errorf("TokenLess(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// TestClusterHubTellsDatabasesApart: jobs on collections of one name in
// two databases share the cluster-wide stream, and each reads its own
// database's events only.
func TestClusterHubTellsDatabasesApart(t *testing.T) {
	_, client := testutil.StartMongo(t, mongotest.Options{})
	main := client.Database("app")
	ctx := testutil.Context(t, 60*time.Second)
	h := NewHubs("meilistream").Cluster(main)
	a := join(t, ctx, h, &jobdef.Job{Name: "a", Collection: "items", Database: "dba"}, nil, 0)
	b := join(t, ctx, h, &jobdef.Job{Name: "b", Collection: "items", Database: "dbb"}, nil, 0)
	for n := range 3 {
		insert(t, ctx, client.Database("dba").Collection("items"), n)
		insert(t, ctx, main.Collection("items"), n) // nobody's
		insert(t, ctx, client.Database("dbb").Collection("items"), n)
	}
	a.until(ctx, 3)
	b.until(ctx, 3)
	settle(t, ctx, h, a, b)
	insert(t, ctx, client.Database("dbb").Collection("items"), 3)
	insert(t, ctx, client.Database("dba").Collection("items"), 3)
	a.until(ctx, 4)
	b.until(ctx, 4)
	a.exactly(4)
	b.exactly(4)
	if n := openStreams(t, ctx, main); n != 1 {
		t.Fatalf("%d change streams open, want the one cluster-wide stream", n)
	}
	a.sub.Close()
	b.sub.Close()
}
