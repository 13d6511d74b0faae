package engine_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/status"
)

// durableSeen is what Config.Durable told, and whether, each time it
// first passed a time the test waits for, the live index held what the
// test wrote before it.
type durableSeen struct {
	mu      sync.Mutex
	max     bson.Timestamp
	waitFor bson.Timestamp
	check   func() bool
	passed  chan bool
}

func (d *durableSeen) publish(job string, ts bson.Timestamp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if job != "items" || !ts.After(d.max) {
		return
	}
	crossed := d.check != nil && d.max.Before(d.waitFor) && !ts.Before(d.waitFor)
	d.max = ts
	if crossed {
		d.passed <- d.check()
	}
}

// expect arms the check for the durable time passing at.
func (d *durableSeen) expect(at bson.Timestamp, check func() bool) chan bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waitFor, d.check, d.passed = at, check, make(chan bool, 1)
	if !d.max.Before(at) {
		panic("the durable time passed the write before it was made durable")
	}
	return d.passed
}

func (d *durableSeen) now() bson.Timestamp {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.max
}

// A write's cluster time is covered once the holder has seen a wait
// document written after it and made everything before durable: promptly,
// with a position interval of an hour, and only once the live index holds
// the write. A change the transform turns away is covered the same way.
func TestAWaitDocumentCarriesTheDurableTimePastTheWrite(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PositionInterval = time.Hour
	seen := &durableSeen{}
	e.cfg.Durable = seen.publish
	e.insert(0, 10, nil)
	job := e.job(itemsJS)
	r := e.run(job, e.acquire())
	defer r.stop(t)
	e.settled(job)

	for i, c := range []struct {
		update bson.M
		live   func() bool
	}{
		{bson.M{"title": "waited for"}, func() bool { return e.liveHas(3, "waited for") }},
		{bson.M{"hidden": true}, func() bool { return !e.liveHas(3, "waited for") }},
	} {
		op := e.sessionUpdate(3, c.update)
		passed := seen.expect(op, c.live)
		mark, err := jobstate.MarkWait(e.ctx, e.state, "items")
		if err != nil {
			t.Fatal(err)
		}
		if !mark.After(op) {
			t.Fatalf("the wait document's time %v is not after the write's %v", mark, op)
		}
		select {
		case ok := <-passed:
			if !ok {
				t.Fatalf("change %d: the durable time passed the write before the live index had it", i)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("change %d: the durable time (%v) never passed the write (%v)", i, seen.now(), op)
		}
		until(t, "the durable time recorded", func() bool {
			d, err := jobstate.ReadDurable(e.ctx, e.state, "items")
			return err == nil && !d.Before(op)
		})
	}
}

// sessionUpdate sets fields of document id in a session and returns the
// write's operationTime, as an application has it.
func (e *env) sessionUpdate(id int, set bson.M) bson.Timestamp {
	e.t.Helper()
	sess, err := e.client.StartSession()
	if err != nil {
		e.t.Fatal(err)
	}
	defer sess.EndSession(e.ctx)
	ctx := mongo.NewSessionContext(e.ctx, sess)
	if _, err := e.coll.UpdateOne(ctx, bson.M{"_id": id}, bson.M{"$set": set}); err != nil {
		e.t.Fatal(err)
	}
	if sess.OperationTime() == nil {
		e.t.Fatal("no operationTime")
	}
	return *sess.OperationTime()
}

// While a swap reindex runs, the durable time is the live index's: a
// write made during it is covered once the live index has it, long before
// the reindex ends.
func TestDuringASwapReindexTheDurableTimeIsTheLiveIndexs(t *testing.T) {
	e := newEnv(t, 0)
	e.cfg.PageSize = 50
	slow, err := meilitest.Start(meilitest.Options{TaskDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e.meili, e.mc = slow, meili.NewClient(slow.URL(), "")
	seen := &durableSeen{}
	e.cfg.Durable = seen.publish
	e.insert(0, 3000, nil)
	job := e.job(itemsJS)
	l := e.acquire()
	r := e.run(job, l)
	e.settled(job)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	edited := e.job(strings.Replace(itemsJS, "n: doc.n", "n: doc.n * 2", 1))
	r = e.run(edited, l)
	defer r.stop(t)
	until(t, "reindex under way", func() bool {
		s := r.stats.Snapshot()
		return s.Phase == status.PhaseReindexing && s.Reindex.Done > 0
	})
	op := e.sessionUpdate(2900, bson.M{"title": "updated while reindexing"})
	passed := seen.expect(op, func() bool { return e.liveHas(2900, "updated while reindexing") })
	if _, err := jobstate.MarkWait(e.ctx, e.state, "items"); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-passed:
		if !ok {
			t.Fatal("the durable time passed the write before the live index had it")
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the durable time (%v) never passed the write (%v)", seen.now(), op)
	}
	if s := r.stats.Snapshot(); s.Phase != status.PhaseReindexing {
		t.Fatalf("the reindex ended before the write was covered; make it longer (phase %q)", s.Phase)
	}
}

// A pending change is sent within the flush interval however many events
// that add no change follow it (wait documents here), and a document that
// keeps changing is sent too: neither may put the flush off for good.
func TestEventsAfterAPendingChangeDoNotPutItsFlushOff(t *testing.T) {
	for _, c := range []struct {
		name string
		more func(e *env, i int)
	}{
		{"wait documents keep coming", func(e *env, i int) {
			if _, err := jobstate.MarkWait(e.ctx, e.state, "items"); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"the document keeps changing", func(e *env, i int) {
			e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 3}, bson.M{"$set": bson.M{"n": 1000 + i}}))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.cfg.FlushInterval = 300 * time.Millisecond
			e.cfg.PositionInterval = time.Hour
			e.insert(0, 10, nil)
			job := e.job(itemsJS)
			r := e.run(job, e.acquire())
			defer r.stop(t)
			e.settled(job)
			e.ok(e.coll.UpdateOne(e.ctx, bson.M{"_id": 3}, bson.M{"$set": bson.M{"title": "sent at last"}}))
			// More events, each well within the flush interval of the
			// last, until the change is in the index (or a deadline
			// far past the interval).
			deadline := time.Now().Add(20 * time.Second)
			for i := 0; !e.liveHas(3, "sent at last"); i++ {
				if time.Now().After(deadline) {
					t.Fatalf("the change was not sent while events kept coming (%d of them)", i)
				}
				c.more(e, i)
				time.Sleep(50 * time.Millisecond) // the pace of the events, not a wait for a result
			}
		})
	}
}

func TestJustBefore(t *testing.T) {
	for _, c := range []struct{ in, want bson.Timestamp }{
		{bson.Timestamp{T: 100, I: 5}, bson.Timestamp{T: 100, I: 4}},
		{bson.Timestamp{T: 100, I: 1}, bson.Timestamp{T: 100, I: 0}},
		{bson.Timestamp{T: 100, I: 0}, bson.Timestamp{T: 99, I: 4294967295}},
		{bson.Timestamp{T: 0, I: 0}, bson.Timestamp{}},
	} {
		if got := engine.JustBefore(c.in); got != c.want {
			t.Errorf("JustBefore(%v) = %v; want %v", c.in, got, c.want)
		}
	}
}
