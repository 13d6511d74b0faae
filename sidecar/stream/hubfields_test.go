package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
)

// describe is an event as "coll op key1,key2[removed] fullDocument".
func describe(t *testing.T, ev bson.Raw) string {
	t.Helper()
	var e struct {
		Op string `bson:"operationType"`
		NS struct {
			Coll string `bson:"coll"`
		} `bson:"ns"`
		UD *struct {
			Updated bson.D   `bson:"updatedFields"`
			Removed []string `bson:"removedFields"`
		} `bson:"updateDescription"`
		Full bson.Raw `bson:"fullDocument"`
	}
	if err := bson.Unmarshal(ev, &e); err != nil {
		t.Fatal(err)
	}
	s := e.NS.Coll + " " + e.Op
	if e.UD != nil {
		var keys []string
		for _, f := range e.UD.Updated {
			keys = append(keys, f.Key)
		}
		s += " " + strings.Join(keys, ",") + fmt.Sprint(e.UD.Removed)
	}
	// An update's document is looked up when the stream reads it, so
	// two streams read at other moments see other versions of it: only
	// inserts' and replaces' are compared (kept checks the updates').
	if full, err := ev.LookupErr("fullDocument"); err == nil && full.Type != bson.TypeNull && e.Op != "update" {
		s += " " + e.Full.String()
	}
	return s
}

// kept fails unless every document of job's collection in events has
// only the fields job keeps.
func kept(t *testing.T, job *jobdef.Job, events []bson.Raw) {
	t.Helper()
	fields := job.StreamFields()
	for _, ev := range events {
		doc, ok := ev.Lookup("fullDocument").DocumentOK()
		if c, _ := ev.Lookup("ns", "coll").StringValueOK(); !ok || c != job.Collection || fields == nil {
			continue
		}
		elems, _ := doc.Elements()
		for _, e := range elems {
			if !keeps(e.Key(), fields) {
				t.Errorf("%s: a document with %q, which it does not keep: %s", job.Name, e.Key(), ev)
			}
		}
	}
}

// isEnd says whether ev is the insert of _id 99 into coll, the end
// marker.
func isEnd(ev bson.Raw, coll string) bool {
	c, _ := ev.Lookup("ns", "coll").StringValueOK()
	op, _ := ev.Lookup("operationType").StringValueOK()
	id, _ := ev.Lookup("documentKey", "_id").AsInt64OK()
	return c == coll && op == "insert" && id == 99
}

// ownEvents reads a job's own stream until its end marker.
func ownEvents(t *testing.T, ctx context.Context, job *jobdef.Job, cs *mongo.ChangeStream) []string {
	t.Helper()
	var out []string
	for cs.Next(ctx) {
		if isEnd(cs.Current, job.Collection) {
			return out
		}
		out = append(out, describe(t, cs.Current))
	}
	t.Fatalf("%s: own stream ended: %v", job.Name, cs.Err())
	return nil
}

// subEvents reads a job's share of a Hub until its end marker.
func subEvents(t *testing.T, ctx context.Context, job *jobdef.Job, s *Sub) []string {
	t.Helper()
	var out []string
	for {
		select {
		case it := <-s.Items():
			if it.Err != nil {
				t.Fatalf("%s: %v", job.Name, it.Err)
			}
			kept(t, job, it.Events)
			for _, ev := range it.Events {
				if isEnd(ev, job.Collection) {
					s.Taken(it)
					return out
				}
				out = append(out, describe(t, ev))
			}
			s.Taken(it)
		case <-ctx.Done():
			t.Fatalf("%s: %d events read, no end marker: %q", job.Name, len(out), out)
		}
	}
}

// Jobs declaring fields share the stream with each other and with jobs
// that declare none, on the same collection and on others: each reads
// from the Hub exactly the events its own stream carries (the updates
// touching none of its fields dropped, the documents cut to its fields),
// whether the shared stream kept a collection whole (a job without fields
// reads it) or trimmed to the union of its jobs' fields.
func TestJobsWithFieldsShareTheStreamAndReadWhatTheirOwnWould(t *testing.T) {
	for _, tc := range []struct{ whole, cluster bool }{{true, false}, {false, false}, {true, true}} {
		t.Run(fmt.Sprintf("whole=%v,cluster=%v", tc.whole, tc.cluster), func(t *testing.T) {
			ctx := testutil.Context(t, 60*time.Second)
			_, client := testutil.StartMongo(t, mongotest.Options{})
			db := client.Database("app")
			// In a cluster-wide stream, "other" is another database's.
			otherDB := ""
			if tc.cluster {
				otherDB = "app2"
			}
			items, other, state := db.Collection("items"), client.Database(orDB(otherDB, "app")).Collection("other"), db.Collection("meilistream")
			jobs := []*jobdef.Job{
				{Name: "a", Collection: "items", Fields: []string{"a", "tags", "x+y"}},
				{Name: "c", Collection: "items", Fields: []string{"views"}},
				{Name: "d", Database: otherDB, Collection: "other", Fields: []string{"a"}},
				{Name: "e", Database: otherDB, Collection: "other", Fields: []string{}},
			}
			if tc.whole {
				jobs = append(jobs, &jobdef.Job{Name: "b", Collection: "items"})
			}
			hubs := NewHubs("meilistream")
			h := hubs.For(db)
			if tc.cluster {
				h = hubs.Cluster(db)
			}
			var fs []*follower
			for _, j := range jobs {
				fs = append(fs, join(t, ctx, h, j, nil, 0))
			}
			settle(t, ctx, h, fs...)
			var own []*mongo.ChangeStream
			for _, j := range jobs {
				opts := options.ChangeStream().SetFullDocument(options.UpdateLookup)
				var cs *mongo.ChangeStream
				var err error
				if tc.cluster {
					cs, err = client.Watch(ctx, ClusterPipeline(j, "app", "meilistream"), opts)
				} else {
					cs, err = db.Watch(ctx, Pipeline(j, "meilistream"), opts)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer cs.Close(ctx)
				own = append(own, cs)
			}

			set := func(c *mongo.Collection, id any, u bson.D) {
				t.Helper()
				if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, u); err != nil {
					t.Fatal(err)
				}
			}
			ins := func(c *mongo.Collection, d bson.D) {
				t.Helper()
				if _, err := c.InsertOne(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			ins(items, bson.D{{Key: "_id", Value: 1}, {Key: "z", Value: 0}, {Key: "a", Value: bson.D{{Key: "b", Value: 1}}}, {Key: "tags", Value: bson.A{"t"}}, {Key: "views", Value: 0}})
			ins(other, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "b", Value: 1}})
			set(items, 1, bson.D{{Key: "$inc", Value: bson.D{{Key: "views", Value: 1}}}})
			set(other, 1, bson.D{{Key: "$inc", Value: bson.D{{Key: "b", Value: 1}}}})
			set(items, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 2}}}})
			set(items, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "ab", Value: 1}, {Key: "xy", Value: 1}}}})
			set(other, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 2}}}})
			set(items, 1, bson.D{{Key: "$push", Value: bson.D{{Key: "tags", Value: "u"}}}})
			set(items, 1, bson.D{{Key: "$set", Value: bson.D{{Key: "x+y", Value: 1}}}})
			set(items, 1, bson.D{{Key: "$unset", Value: bson.D{{Key: "views", Value: ""}}}})
			set(items, 1, bson.D{{Key: "$unset", Value: bson.D{{Key: "a", Value: ""}}}})
			ins(state, bson.D{{Key: "_id", Value: bson.D{{Key: "watermark", Value: "a"}}}, {Key: "mark", Value: "m0"}})
			set(state, bson.D{{Key: "watermark", Value: "a"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "mark", Value: "m2"}}}})
			if _, err := items.ReplaceOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "views", Value: 9}, {Key: "tags", Value: bson.A{}}}); err != nil {
				t.Fatal(err)
			}
			ins(items, bson.D{{Key: "_id", Value: 2}, {Key: "views", Value: 1}, {Key: "z", Value: 1}})
			if _, err := other.DeleteOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
				t.Fatal(err)
			}
			ins(items, bson.D{{Key: "_id", Value: 99}})
			ins(other, bson.D{{Key: "_id", Value: 99}})

			for i, j := range jobs {
				want := ownEvents(t, ctx, j, own[i])
				got := subEvents(t, ctx, j, fs[i].sub)
				if len(want) == 0 {
					t.Fatalf("%s: its own stream carried nothing", j.Name)
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s from the shared stream:\n%s\nits own stream:\n%s", j.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			h.mu.Lock()
			members := len(h.members)
			h.mu.Unlock()
			if members != len(jobs) {
				t.Fatalf("%d of %d jobs on the shared stream", members, len(jobs))
			}
			for _, f := range fs {
				f.sub.Close()
			}
		})
	}
}
