package scripttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Commands of the verify scenarios (verify_*.txtar): a destination
// written behind the sidecar's back, and a collection that changes while
// a verify runs.
func init() {
	for name, fn := range map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"meili-write":     cmdMeiliWrite,
		"replica-replace": cmdReplicaReplace,
		"replica-update":  cmdReplicaUpdate,
		"churn":           cmdChurn,
	} {
		Cmds[name] = fn
	}
}

// cmdMeiliWrite: meili-write INDEX add DOC... | delete ID... writes to the
// index ($MEILISTREAM_INDEX_PREFIX+INDEX) directly through the
// Meilisearch API, as someone editing the index by hand would, and waits
// until the task succeeded. add replaces whole documents (JSON objects);
// delete takes ids as JSON values (42, "sku-1").
func cmdMeiliWrite(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 || (args[1] != "add" && args[1] != "delete") {
		ts.Fatalf("usage: meili-write INDEX add DOC... | delete ID...")
	}
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + args[0]
	idx := scriptMeili(ts).Index(uid)
	ctx, cancel := cmdCtx()
	defer cancel()
	var uidTask int64
	switch args[1] {
	case "add":
		docs := make([]map[string]any, len(args)-2)
		for i, a := range args[2:] {
			ts.Check(json.Unmarshal([]byte(a), &docs[i]))
		}
		t, err := idx.AddDocuments(ctx, docs, nil)
		ts.Check(err)
		uidTask = t.TaskUID
	case "delete":
		ids := make([]string, len(args)-2)
		for i, a := range args[2:] {
			var v any
			ts.Check(json.Unmarshal([]byte(a), &v))
			ids[i] = fmt.Sprint(v)
		}
		t, err := idx.DeleteDocuments(ctx, ids, nil)
		ts.Check(err)
		uidTask = t.TaskUID
	}
	task, err := scriptMeili(ts).WaitForTask(ctx, uidTask, 20*time.Millisecond)
	ts.Check(err)
	if task.Status != "succeeded" {
		ts.Fatalf("meili-write: task %d %s: %v", uidTask, task.Status, task.Error)
	}
}

// cmdReplicaReplace: replica-replace COLL FILTER DOC replaces the matching
// document of the replica collection COLL, as someone editing the replica
// by hand would.
func cmdReplicaReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replica-replace COLL FILTER DOC")
	}
	var filter, doc bson.D
	ts.Check(bson.UnmarshalExtJSON([]byte(args[1]), false, &filter))
	ts.Check(bson.UnmarshalExtJSON([]byte(args[2]), false, &doc))
	ctx, cancel := cmdCtx()
	defer cancel()
	res, err := scriptReplica(ts).Collection(args[0]).ReplaceOne(ctx, filter, doc)
	ts.Check(err)
	if res.MatchedCount != 1 {
		ts.Fatalf("replica-replace: %d documents match %s", res.MatchedCount, args[1])
	}
}

// cmdReplicaUpdate: replica-update COLL FILTER UPDATE updates the matching
// document of the replica collection COLL in place.
func cmdReplicaUpdate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replica-update COLL FILTER UPDATE")
	}
	var filter, update bson.D
	ts.Check(bson.UnmarshalExtJSON([]byte(args[1]), false, &filter))
	ts.Check(bson.UnmarshalExtJSON([]byte(args[2]), false, &update))
	ctx, cancel := cmdCtx()
	defer cancel()
	res, err := scriptReplica(ts).Collection(args[0]).UpdateOne(ctx, filter, update)
	ts.Check(err)
	if res.MatchedCount != 1 {
		ts.Fatalf("replica-update: %d documents match %s", res.MatchedCount, args[1])
	}
}

// churns are the scripts' running churns, by script and collection.
var churns sync.Map // churnKey -> *churner

type churnKey struct {
	ts   *testscript.TestScript
	coll string
}

type churner struct {
	stop    context.CancelFunc
	done    chan struct{}
	changes int
	err     error
}

// cmdChurn: churn start COLL LO HI | churn stop COLL changes COLL (of the
// script's database) in the background until stopped, as an application
// would while a verify runs: it sets "churn" on random documents of the
// integer _ids LO..HI, and inserts and deletes documents of its own (_ids
// from 1000000, title "churn"), up to a few milliseconds apart. stop prints how
// many changes it made and fails if one failed.
func cmdChurn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: churn start COLL LO HI | churn stop COLL")
	}
	key := churnKey{ts, args[1]}
	switch args[0] {
	case "start":
		if len(args) != 4 {
			ts.Fatalf("usage: churn start COLL LO HI")
		}
		lo, err := strconv.Atoi(args[2])
		ts.Check(err)
		hi, err := strconv.Atoi(args[3])
		ts.Check(err)
		ctx, cancel := context.WithCancel(context.Background())
		c := &churner{stop: cancel, done: make(chan struct{})}
		if _, dup := churns.LoadOrStore(key, c); dup {
			cancel()
			ts.Fatalf("churn: %s already churns", args[1])
		}
		coll := collIn(scriptMongo(ts), args[1])
		go c.run(ctx, coll, lo, hi)
		ts.Defer(func() { c.stop(); <-c.done; churns.Delete(key) })
	case "stop":
		v, ok := churns.LoadAndDelete(key)
		if !ok {
			ts.Fatalf("churn: %s does not churn", args[1])
		}
		c := v.(*churner)
		c.stop()
		<-c.done
		if c.err != nil {
			ts.Fatalf("churn of %s failed after %d changes: %v", args[1], c.changes, c.err)
		}
		fmt.Fprintf(ts.Stdout(), "%d changes\n", c.changes)
	default:
		ts.Fatalf("usage: churn start COLL LO HI | churn stop COLL")
	}
}

func (c *churner) run(ctx context.Context, coll *mongo.Collection, lo, hi int) {
	defer close(c.done)
	next := 1000000
	var own []int
	for ctx.Err() == nil {
		var err error
		switch r := rand.IntN(10); {
		case r < 6:
			id := lo + rand.IntN(hi-lo+1)
			_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "churn", Value: 1}}}})
		case r < 8 || len(own) == 0:
			_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: next}, {Key: "title", Value: "churn"}, {Key: "status", Value: "published"}})
			own = append(own, next)
			next++
		default:
			i := rand.IntN(len(own))
			_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: own[i]}})
			own = append(own[:i], own[i+1:]...)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.err = err
			}
			return
		}
		c.changes++
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rand.IntN(3)) * time.Millisecond):
		}
	}
}
