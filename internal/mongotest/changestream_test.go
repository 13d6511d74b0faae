package mongotest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/mongotest"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

type changeEvent struct {
	ID                bson.Raw       `bson:"_id"`
	OperationType     string         `bson:"operationType"`
	ClusterTime       bson.Timestamp `bson:"clusterTime"`
	WallTime          time.Time      `bson:"wallTime"`
	FullDocument      bson.M         `bson:"fullDocument"`
	NS                bson.M         `bson:"ns"`
	To                bson.M         `bson:"to"`
	DocumentKey       bson.M         `bson:"documentKey"`
	UpdateDescription *struct {
		UpdatedFields   bson.M   `bson:"updatedFields"`
		RemovedFields   []string `bson:"removedFields"`
		TruncatedArrays []any    `bson:"truncatedArrays"`
	} `bson:"updateDescription"`
}

func next(t *testing.T, cs *mongo.ChangeStream) changeEvent {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !cs.Next(c) {
		t.Fatalf("no event: %v", cs.Err())
	}
	var ev changeEvent
	if err := cs.Decode(&ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestChangeStreamEventsInOrder(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	if cs.ResumeToken() == nil {
		t.Fatal("no postBatchResumeToken on the initial aggregate")
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "sub", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 2}}}})
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "b", Value: 2}, {Key: "sub.x", Value: 5}}}, {Key: "$unset", Value: bson.D{{Key: "a", Value: ""}}}})
	coll.ReplaceOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "r", Value: true}})
	coll.DeleteOne(c, bson.D{{Key: "_id", Value: 1}})

	ins := next(t, cs)
	if ins.OperationType != "insert" || ins.FullDocument["a"] != int32(1) || ins.DocumentKey["_id"] != int32(1) || ins.NS["db"] != "db" || ins.NS["coll"] != "c" || ins.WallTime.IsZero() {
		t.Fatalf("insert %+v", ins)
	}
	upd := next(t, cs)
	if upd.OperationType != "update" || upd.UpdateDescription == nil {
		t.Fatalf("update %+v", upd)
	}
	ud := upd.UpdateDescription
	if ud.UpdatedFields["b"] != int32(2) || ud.UpdatedFields["sub.x"] != int32(5) || len(ud.RemovedFields) != 1 || ud.RemovedFields[0] != "a" || ud.TruncatedArrays == nil {
		t.Fatalf("updateDescription %+v", ud)
	}
	// updateLookup reads the document when the event is read: by now it
	// has been replaced and deleted, so it is null, as with mongod.
	if upd.FullDocument != nil {
		t.Fatalf("updateLookup after delete: %v", upd.FullDocument)
	}
	rep := next(t, cs)
	if rep.OperationType != "replace" || rep.FullDocument["r"] != true {
		t.Fatalf("replace %+v", rep)
	}
	del := next(t, cs)
	if del.OperationType != "delete" || del.DocumentKey["_id"] != int32(1) || del.FullDocument != nil {
		t.Fatalf("delete %+v", del)
	}
	if !(ins.ClusterTime.Before(upd.ClusterTime) && upd.ClusterTime.Before(rep.ClusterTime) && rep.ClusterTime.Before(del.ClusterTime)) {
		t.Fatal("cluster times not increasing")
	}
	if string(ins.ID.Lookup("_data").StringValue()) >= upd.ID.Lookup("_data").StringValue() {
		t.Fatal("resume tokens not ordered")
	}
}

func TestChangeStreamUpdateLookupSeesCurrentDocument(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "operationType", Value: "update"}}}}}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 1}})
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	ev := next(t, cs)
	if ev.OperationType != "update" || ev.FullDocument["n"] != int32(2) {
		t.Fatalf("%+v", ev)
	}
}

func TestChangeStreamResumesAutomaticallyAfterNetworkError(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	for i := 0; i < 5; i++ {
		coll.InsertOne(c, bson.D{{Key: "_id", Value: i}})
	}
	if ev := next(t, cs); ev.DocumentKey["_id"] != int32(0) {
		t.Fatalf("%v", ev.DocumentKey)
	}
	// The next getMore's connection is closed under it: a network error,
	// which the driver answers by resuming from its cached token.
	srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "closeConnection", Value: true}}}})
	for i := 1; i < 5; i++ {
		ev := next(t, cs)
		if ev.DocumentKey["_id"] != int32(i) {
			t.Fatalf("event %d: got %v", i, ev.DocumentKey)
		}
	}
	// A resumable server error (label ResumableChangeStreamError) resumes too.
	srv.FailCommand(bson.D{{Key: "mode", Value: bson.D{{Key: "times", Value: 1}}},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"getMore"}}, {Key: "errorCode", Value: 234}, {Key: "errorLabels", Value: bson.A{"ResumableChangeStreamError"}}}}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 5}})
	if ev := next(t, cs); ev.DocumentKey["_id"] != int32(5) {
		t.Fatalf("%v", ev.DocumentKey)
	}
}

// TestChangeStreamAcrossDroppedConnections drops every connection (the
// monitor's too) while a stream is read. The driver resumes by itself when
// its pool is ready again; when it is not (its resume met the cleared pool,
// which a real network blip does too) the stream ends with an error and the
// consumer reopens it from its last token, as the sidecar does. Either way
// no event is lost or repeated.
func TestChangeStreamAcrossDroppedConnections(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	const total = 30
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i++ {
			if i == 10 || i == 20 {
				srv.DropConnections()
			}
			for {
				_, err := coll.InsertOne(c, bson.D{{Key: "_id", Value: i}})
				if err == nil || mongo.IsDuplicateKeyError(err) {
					break
				}
				if c.Err() != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	for i := 0; i < total; {
		c2, cancel := context.WithTimeout(c, 10*time.Second)
		ok := cs.Next(c2)
		cancel()
		if !ok {
			tok := cs.ResumeToken()
			t.Logf("stream ended (%v); reopening from its token", cs.Err())
			cs.Close(c)
			if cs, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok)); err != nil {
				time.Sleep(100 * time.Millisecond)
				if cs, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok)); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		var ev changeEvent
		if err := cs.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.DocumentKey["_id"] != int32(i) {
			t.Fatalf("event %d: got %v", i, ev.DocumentKey)
		}
		i++
	}
	cs.Close(c)
	<-done
}

func TestChangeStreamHistoryLost(t *testing.T) {
	srv, client := start(t, mongotest.Options{HistorySize: 5})
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 0}})
	next(t, cs)
	tok := cs.ResumeToken()
	cs.Close(c)
	for i := 1; i <= 10; i++ {
		coll.InsertOne(c, bson.D{{Key: "_id", Value: i}})
	}
	_, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok))
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 286 || ce.Name != "ChangeStreamHistoryLost" || !ce.HasErrorLabel("NonResumableChangeStreamError") {
		t.Fatalf("resume from lost history: %v", err)
	}
	// A token inside the kept history still works.
	srv.SetHistorySize(100)
	cs, err = coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 11}})
	next(t, cs)
	tok = cs.ResumeToken()
	cs.Close(c)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 12}})
	cs, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok))
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, cs); ev.DocumentKey["_id"] != int32(12) {
		t.Fatalf("resumed at %v", ev.DocumentKey)
	}
	// Trimming now drops what a live stream has not read: its getMore fails.
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 13}})
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 14}})
	srv.SetHistorySize(1)
	c2, cancel := context.WithTimeout(c, 3*time.Second)
	defer cancel()
	if cs.Next(c2) {
		t.Fatal("expected history lost")
	}
	// A live stream overtaken by the trim fails as on mongod: 136
	// CappedPositionLost from the getMore, without a resumable label.
	if !errors.As(cs.Err(), &ce) || ce.Code != 136 || ce.Name != "CappedPositionLost" || len(ce.Labels) != 0 {
		t.Fatalf("live stream: %v", cs.Err())
	}
	// Resuming from its last token is then 286.
	_, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(cs.ResumeToken()))
	if !errors.As(err, &ce) || ce.Code != 286 {
		t.Fatalf("resume after the trim: %v", err)
	}
}

func TestChangeStreamInvalidateOnDropAndRename(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	db.Collection("c").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	cs, err := db.Collection("c").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	dbs, err := db.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Collection("c").Drop(c); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, cs); ev.OperationType != "drop" {
		t.Fatalf("%+v", ev)
	}
	inv := next(t, cs)
	if inv.OperationType != "invalidate" {
		t.Fatalf("%+v", inv)
	}
	c2, cancel := context.WithTimeout(c, 2*time.Second)
	defer cancel()
	if cs.Next(c2) || cs.Err() != nil || cs.ID() != 0 {
		t.Fatalf("after invalidate: next, err %v, id %d", cs.Err(), cs.ID())
	}
	// resumeAfter an invalidate is refused; startAfter works.
	_, err = db.Collection("c").Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(inv.ID))
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 260 {
		t.Fatalf("resumeAfter invalidate: %v", err)
	}
	cs2, err := db.Collection("c").Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAfter(inv.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close(c)
	db.Collection("c").InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	if ev := next(t, cs2); ev.OperationType != "insert" {
		t.Fatalf("%+v", ev)
	}
	// rename: the source's stream sees rename then invalidate.
	cs3, err := db.Collection("c").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "renameCollection", Value: "db.c"}, {Key: "to", Value: "db.d"}}).Err(); err != nil {
		t.Fatal(err)
	}
	ren := next(t, cs3)
	if ren.OperationType != "rename" || ren.To["coll"] != "d" || ren.NS["coll"] != "c" {
		t.Fatalf("%+v", ren)
	}
	if ev := next(t, cs3); ev.OperationType != "invalidate" {
		t.Fatalf("%+v", ev)
	}
	// The database stream saw drop, insert, rename and is not invalidated
	// until dropDatabase.
	for _, want := range []string{"drop", "insert", "rename"} {
		if ev := next(t, dbs); ev.OperationType != want {
			t.Fatalf("db stream: %s, want %s", ev.OperationType, want)
		}
	}
	if err := db.Drop(c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"drop", "dropDatabase", "invalidate"} {
		if ev := next(t, dbs); ev.OperationType != want {
			t.Fatalf("db stream: %s, want %s", ev.OperationType, want)
		}
	}
}

func TestChangeStreamStartAtOperationTime(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	coll.InsertOne(c, bson.D{{Key: "_id", Value: "before"}})
	var hello bson.Raw
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		t.Fatal(err)
	}
	t0, i0 := hello.Lookup("operationTime").Timestamp()
	coll.InsertOne(c, bson.D{{Key: "_id", Value: "after"}})
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAtOperationTime(&bson.Timestamp{T: t0, I: i0 + 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	if ev := next(t, cs); ev.DocumentKey["_id"] != "after" {
		t.Fatalf("first event %v", ev.DocumentKey)
	}
	// startAtOperationTime is inclusive: the operationTime of a write
	// replays that write (change-streams spec; reference note §4.2).
	cs2, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAtOperationTime(&bson.Timestamp{T: t0, I: i0}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close(c)
	if ev := next(t, cs2); ev.DocumentKey["_id"] != "before" {
		t.Fatalf("inclusive start: %v", ev.DocumentKey)
	}
}

func TestChangeStreamGetMoreWaitsForMaxAwaitTime(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	var started int
	monitorClient := client
	coll := monitorClient.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	tok := cs.ResumeToken()
	begin := time.Now()
	for time.Since(begin) < 900*time.Millisecond {
		if cs.TryNext(c) {
			t.Fatal("unexpected event")
		}
		started++
	}
	// Each empty getMore waited ~300 ms instead of returning at once.
	if started > 4 {
		t.Fatalf("%d getMores in 900ms: not waiting", started)
	}
	if cs.ResumeToken() == nil || tok == nil {
		t.Fatal("no postBatchResumeToken")
	}
	// A write wakes a waiting getMore: long before its maxAwaitTime, which
	// no slow machine reaches. The write comes after the stream opened (a
	// stream sees only what follows its start), a moment into the getMore.
	const maxAwait = 30 * time.Second
	c, cancel := context.WithTimeout(context.Background(), 4*maxAwait) // the driver wants it above maxAwaitTime
	defer cancel()
	cs2, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(maxAwait))
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close(c)
	go func() {
		time.Sleep(50 * time.Millisecond)
		coll.InsertOne(context.Background(), bson.D{{Key: "_id", Value: 1}})
	}()
	begin = time.Now()
	if !cs2.Next(c) || time.Since(begin) > maxAwait/2 {
		t.Fatalf("woke after %v: %v", time.Since(begin), cs2.Err())
	}
}

func TestChangeStreamPipelineAndDatabaseScope(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	cs, err := db.Watch(c, mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "ns.coll", Value: "b"}}}},
		{{Key: "$project", Value: bson.D{{Key: "operationType", Value: 1}, {Key: "documentKey", Value: 1}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	for i := 0; i < 3; i++ {
		db.Collection("a").InsertOne(c, bson.D{{Key: "_id", Value: i}})
		db.Collection("b").InsertOne(c, bson.D{{Key: "_id", Value: i}})
	}
	for i := 0; i < 3; i++ {
		ev := next(t, cs)
		if ev.DocumentKey["_id"] != int32(i) || ev.NS != nil || ev.FullDocument != nil {
			t.Fatalf("%+v", ev)
		}
	}
	// Changing _id in the pipeline is fatal to the stream (280).
	cs2, err := db.Watch(c, mongo.Pipeline{{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	db.Collection("a").InsertOne(c, bson.D{{Key: "_id", Value: 9}})
	if cs2.Next(c) {
		t.Fatal("expected an error")
	}
	var ce mongo.CommandError
	if !errors.As(cs2.Err(), &ce) || ce.Code != 280 {
		t.Fatalf("%v", cs2.Err())
	}
}

func TestChangeStreamPipelineUpdateSizeRule(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	big := make([]byte, 500)
	for i := range big {
		big[i] = 'x'
	}
	coll.InsertMany(c, []any{bson.D{{Key: "_id", Value: "small"}, {Key: "n", Value: 1}}, bson.D{{Key: "_id", Value: "big"}, {Key: "n", Value: 1}, {Key: "pad", Value: string(big)}}})
	cs, err := coll.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	for _, id := range []string{"small", "big"} {
		coll.UpdateOne(c, bson.D{{Key: "_id", Value: id}}, mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "n", Value: 2}}}}})
	}
	// A small document's pipeline update is logged as a full replacement
	// (its delta is not smaller than the document); a big one's as a delta.
	if ev := next(t, cs); ev.OperationType != "replace" {
		t.Fatalf("small: %s", ev.OperationType)
	}
	if ev := next(t, cs); ev.OperationType != "update" || fmt.Sprint(ev.UpdateDescription.UpdatedFields["n"]) != "2" {
		t.Fatalf("big: %+v", ev)
	}
}

func TestChangeStreamExpandedEvents(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	plain, err := db.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(c)
	cs, err := db.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetShowExpandedEvents(true))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll := db.Collection("c")
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	coll.Indexes().CreateOne(c, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}}, Options: options.Index().SetUnique(true)})
	coll.Indexes().DropOne(c, "k_1")
	db.RunCommand(c, bson.D{{Key: "collMod", Value: "c"}, {Key: "validationLevel", Value: "moderate"}})
	other := db.Collection("other")
	other.InsertOne(c, bson.D{})
	db.Client().Database("admin").RunCommand(c, bson.D{{Key: "renameCollection", Value: "db.c"}, {Key: "to", Value: "db.other"}, {Key: "dropTarget", Value: true}})
	var got []string
	for i := 0; i < 8; i++ {
		var ev bson.M
		if !cs.Next(c) {
			t.Fatal(cs.Err())
		}
		cs.Decode(&ev)
		got = append(got, ev["operationType"].(string))
		if ev["collectionUUID"] == nil {
			t.Fatalf("no collectionUUID: %v", ev)
		}
		if ev["operationType"] == "createIndexes" {
			var desc struct {
				Indexes []bson.M `bson:"indexes"`
			}
			raw, _ := bson.Marshal(ev["operationDescription"])
			bson.Unmarshal(raw, &desc)
			if idx := desc.Indexes; len(idx) != 1 || idx[0]["name"] != "k_1" || idx[0]["unique"] != true {
				t.Fatalf("%v", idx)
			}
		}
		// modify: what collMod changed, and the options before
		// (change_stream_event_transform.cpp).
		if ev["operationType"] == "modify" {
			desc, _ := ev["operationDescription"].(bson.D)
			if len(desc) != 1 || desc[0].Key != "validationLevel" || desc[0].Value != "moderate" || ev["stateBeforeChange"] == nil {
				t.Fatalf("modify event %v", ev)
			}
		}
		// A rename replacing a collection names the one dropped.
		if ev["operationType"] == "rename" {
			desc, _ := ev["operationDescription"].(bson.D)
			if len(desc) != 2 || desc[1].Key != "dropTarget" {
				t.Fatalf("rename event %v", ev)
			}
		}
	}
	if fmt.Sprint(got) != "[create insert createIndexes dropIndexes modify create insert rename]" {
		t.Fatalf("expanded: %v", got)
	}
	// Without showExpandedEvents only the insert is seen.
	if ev := next(t, plain); ev.OperationType != "insert" {
		t.Fatalf("%+v", ev)
	}
}

func TestChangeStreamForeignTokenAndFutureStart(t *testing.T) {
	srv, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	// A token from another server: 280, "resume token was not found".
	other, otherClient := another(t)
	_ = other
	ocs, err := otherClient.Database("db").Collection("c").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		otherClient.Database("db").Collection("c").InsertOne(c, bson.D{})
	}
	for i := 0; i < 3; i++ {
		next(t, ocs)
	}
	_, err = coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(ocs.ResumeToken()))
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 280 {
		t.Fatalf("foreign token: %v", err)
	}
	// startAtOperationTime ahead of the newest write skips writes before it.
	future := bson.Timestamp{T: uint32(srv.Now().Add(time.Hour).Unix())}
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetStartAtOperationTime(&future))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: "early"}})
	// Two idle hours also kill the stream's cursor (cursorTimeoutMillis):
	// the driver resumes on 43 from its cached postBatchResumeToken, which
	// must still lie at the future start, as mongod's does.
	srv.AdvanceClock(2 * time.Hour)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: "late"}})
	if ev := next(t, cs); ev.DocumentKey["_id"] != "late" {
		t.Fatalf("%v", ev.DocumentKey)
	}
}

// An idle server writes a periodic no-op (mongod's noop_writer.cpp, every
// periodicNoopIntervalSecs when nothing else was written): no stream sees
// it, but the postBatchResumeToken and operationTime move past it, so a
// quiet collection's recorded position keeps up with the oplog.
func TestPeriodicNoopAdvancesIdlePositions(t *testing.T) {
	srv, client := start(t, mongotest.Options{NoopInterval: 100 * time.Millisecond})
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	first := append(bson.Raw(nil), cs.ResumeToken()...)
	opTime := func() bson.Timestamp {
		var r struct {
			OperationTime bson.Timestamp `bson:"operationTime"`
		}
		if err := client.Database("db").RunCommand(c, bson.D{{Key: "ping", Value: 1}}).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.OperationTime
	}
	before := opTime()
	deadline := time.Now().Add(5 * time.Second)
	for bytes.Equal(cs.ResumeToken(), first) {
		if time.Now().After(deadline) {
			t.Fatal("the postBatchResumeToken of an idle stream never advanced")
		}
		if cs.TryNext(c) {
			t.Fatalf("a no-op was shown to the stream: %s", cs.Current)
		}
		if cs.Err() != nil {
			t.Fatal(cs.Err())
		}
	}
	if after := opTime(); !before.Before(after) {
		t.Fatalf("operationTime did not advance: %v then %v", before, after)
	}
	// A write resumed from the advanced token is still delivered.
	tok := append(bson.Raw(nil), cs.ResumeToken()...)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	cs2, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close(c)
	if ev := next(t, cs2); ev.OperationType != "insert" {
		t.Fatalf("got %s", ev.OperationType)
	}
	_ = srv
}

// The writer only writes when nothing else was written in the interval,
// and AdvanceClock past the interval writes one at the new time.
func TestNoopOnlyWhenIdleAndOnAdvanceClock(t *testing.T) {
	srv, client := start(t, mongotest.Options{NoopInterval: time.Hour})
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	res := client.Database("db").RunCommand(c, bson.D{{Key: "insert", Value: "c"}, {Key: "documents", Value: bson.A{bson.D{{Key: "_id", Value: 1}}}}})
	raw, err := res.Raw()
	if err != nil {
		t.Fatal(err)
	}
	var wt bson.Timestamp
	wt.T, wt.I = raw.Lookup("operationTime").Timestamp()
	_ = coll
	ping := func() bson.Timestamp {
		raw, err := client.Database("db").RunCommand(c, bson.D{{Key: "ping", Value: 1}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		var ts bson.Timestamp
		ts.T, ts.I = raw.Lookup("operationTime").Timestamp()
		return ts
	}
	if got := ping(); got != (bson.Timestamp{T: wt.T, I: wt.I}) {
		t.Fatalf("idle operationTime %v moved from the write's %v without a no-op", got, wt)
	}
	srv.AdvanceClock(30 * time.Minute) // below the interval: nothing written
	if got := ping(); got.T != wt.T || got.I != wt.I {
		t.Fatalf("operationTime moved on a short AdvanceClock: %v", got)
	}
	srv.AdvanceClock(2 * time.Hour)
	got := ping()
	if got.T < uint32(srv.Now().Unix())-1 {
		t.Fatalf("after AdvanceClock past the interval operationTime is %v, server now %v", got, srv.Now())
	}
}

// NoopInterval < 0 turns the writer off.
func TestNoopDisabled(t *testing.T) {
	srv, client := start(t, mongotest.Options{NoopInterval: -1})
	c := ctx(t)
	raw, err := client.Database("db").RunCommand(c, bson.D{{Key: "ping", Value: 1}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var before, after bson.Timestamp
	before.T, before.I = raw.Lookup("operationTime").Timestamp()
	srv.AdvanceClock(time.Minute)
	raw, _ = client.Database("db").RunCommand(c, bson.D{{Key: "ping", Value: 1}}).Raw()
	if after.T, after.I = raw.Lookup("operationTime").Timestamp(); after != before {
		t.Fatalf("operationTime moved with the no-op writer off: %v then %v", before, after)
	}
}

// Renaming a collection onto the watched one (dropTarget) overwrites it:
// mongod logs one renameCollection entry (no separate drop), the target's
// stream sees the rename (ns: the source, to: the target) and is
// invalidated (change_stream_filter_helpers.cpp: "Relevant collection was
// overwritten"); a database stream sees just the rename.
func TestChangeStreamRenameOntoWatchedCollection(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	db.Collection("live").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	db.Collection("rebuilt").InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	cs, err := db.Collection("live").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	dbs, err := db.Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer dbs.Close(c)
	if err := client.Database("admin").RunCommand(c, bson.D{{Key: "renameCollection", Value: "db.rebuilt"}, {Key: "to", Value: "db.live"}, {Key: "dropTarget", Value: true}}).Err(); err != nil {
		t.Fatal(err)
	}
	ren := next(t, cs)
	if ren.OperationType != "rename" || ren.NS["coll"] != "rebuilt" || ren.To["coll"] != "live" {
		t.Fatalf("%+v", ren)
	}
	if ev := next(t, cs); ev.OperationType != "invalidate" {
		t.Fatalf("%+v", ev)
	}
	if ev := next(t, dbs); ev.OperationType != "rename" {
		t.Fatalf("db stream: %+v", ev)
	}
	db.Collection("other").InsertOne(c, bson.D{{Key: "_id", Value: 3}})
	if ev := next(t, dbs); ev.OperationType != "insert" || ev.NS["coll"] != "other" {
		t.Fatalf("db stream after the rename: %+v", ev)
	}
	var got bson.M
	if err := db.Collection("live").FindOne(c, bson.D{}).Decode(&got); err != nil || got["_id"] != int32(2) {
		t.Fatalf("live after the rename: %v %v", got, err)
	}
}

// Writes to other collections and databases are not shown to a collection
// stream but move its postBatchResumeToken past them (mongod scans the
// whole oplog and reports a high-water mark), and resuming from that token
// skips nothing of the watched collection.
func TestPostBatchResumeTokenAdvancesOnOtherNamespaces(t *testing.T) {
	_, client := start(t, mongotest.Options{NoopInterval: -1})
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetMaxAwaitTime(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	first := append(bson.Raw(nil), cs.ResumeToken()...)
	client.Database("db").Collection("other").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	client.Database("db2").Collection("c").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	// The driver's first TryNext only consumes the empty first batch; the
	// second runs a getMore.
	for range 2 {
		if cs.TryNext(c) {
			t.Fatalf("saw %s", cs.Current)
		}
	}
	second := append(bson.Raw(nil), cs.ResumeToken()...)
	d1, _ := first.Lookup("_data").StringValueOK()
	d2, _ := second.Lookup("_data").StringValueOK()
	if !(d1 < d2) {
		t.Fatalf("postBatchResumeToken did not advance: %s then %s", d1, d2)
	}
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 7}})
	cs2, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(second))
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close(c)
	if ev := next(t, cs2); ev.DocumentKey["_id"] != int32(7) {
		t.Fatalf("%v", ev.DocumentKey)
	}
	// Tokens sort by cluster time, as real ones do: the event's token is
	// after the high-water mark it follows.
	var ev bson.Raw = cs2.Current
	d3, _ := ev.Lookup("_id", "_data").StringValueOK()
	if !(d2 < d3) {
		t.Fatalf("event token %s not after %s", d3, d2)
	}
}

// Resuming a collection stream from the token of another collection's
// event: mongod expects that event first
// (document_source_change_stream_ensure_resume_token_present.cpp) and fails
// with 280 "the resume token was not found" when an event of the stream's
// own collection comes instead; until then the stream just waits.
func TestChangeStreamResumeFromAnotherCollectionsToken(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	db := client.Database("db")
	other, err := db.Collection("old").Watch(c, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(c)
	db.Collection("old").InsertOne(c, bson.D{{Key: "_id", Value: 1}})
	next(t, other)
	tok := append(bson.Raw(nil), other.Current.Lookup("_id").Document()...)
	cs, err := db.Collection("new").Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok).SetMaxAwaitTime(20*time.Millisecond))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer cs.Close(c)
	for range 2 {
		if cs.TryNext(c) || cs.Err() != nil {
			t.Fatalf("before any event of its own: %v", cs.Err())
		}
	}
	db.Collection("new").InsertOne(c, bson.D{{Key: "_id", Value: 2}})
	c2, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	if cs.Next(c2) {
		t.Fatalf("resumed from a foreign token: %s", cs.Current)
	}
	var ce mongo.CommandError
	if !errors.As(cs.Err(), &ce) || ce.Code != 280 || ce.Name != "ChangeStreamFatalError" || !ce.HasErrorLabel("NonResumableChangeStreamError") {
		t.Fatalf("Err %v", cs.Err())
	}
	// Opened after the other collection's write exists, the aggregate
	// itself fails.
	_, err = db.Collection("new").Watch(c, mongo.Pipeline{}, options.ChangeStream().SetResumeAfter(tok))
	if !errors.As(err, &ce) || ce.Code != 280 {
		t.Fatalf("open after: %v", err)
	}
}

// updateLookup reads the document when the event is read: a later update
// shows, and a document deleted since gives fullDocument: null (present,
// null), as mongod's DocumentSourceLookupChangePostImage does.
func TestChangeStreamUpdateLookupAfterDelete(t *testing.T) {
	_, client := start(t)
	c := ctx(t)
	coll := client.Database("db").Collection("c")
	cs, err := coll.Watch(c, mongo.Pipeline{}, options.ChangeStream().SetFullDocument(options.UpdateLookup))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(c)
	coll.InsertOne(c, bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 1}})
	coll.UpdateOne(c, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 2}}}})
	coll.DeleteOne(c, bson.D{{Key: "_id", Value: 1}})
	next(t, cs) // insert: the inserted document itself
	upd := next(t, cs)
	fd, err := cs.Current.LookupErr("fullDocument")
	if upd.OperationType != "update" || err != nil || fd.Type != bson.TypeNull {
		t.Fatalf("update of a deleted document: %s", cs.Current)
	}
	if upd.UpdateDescription == nil || upd.UpdateDescription.UpdatedFields["n"] != int32(2) {
		t.Fatalf("updateDescription: %s", cs.Current)
	}
	if del := next(t, cs); del.OperationType != "delete" || del.DocumentKey["_id"] != int32(1) {
		t.Fatalf("%+v", del)
	}
	if _, err := cs.Current.LookupErr("fullDocument"); err == nil {
		t.Fatalf("a delete event has no fullDocument: %s", cs.Current)
	}
}

// A cluster-wide stream (aggregate 1 on admin, allChangesForCluster) shows
// every database's changes but the internal databases' and, as mongod's
// whole-cluster streams do, none of a system.* collection's (SERVER-34086,
// SERVER-35401).
func TestAClusterStreamLeavesOutSystemCollections(t *testing.T) {
	_, client := start(t)
	ctx := context.Background()
	cs, err := client.Watch(ctx, mongo.Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	for _, ns := range [][2]string{{"a", "system.js"}, {"a", "x"}, {"b", "y"}} {
		if _, err := client.Database(ns[0]).Collection(ns[1]).InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 2 && cs.Next(ctx) {
		db, _ := cs.Current.Lookup("ns", "db").StringValueOK()
		coll, _ := cs.Current.Lookup("ns", "coll").StringValueOK()
		got = append(got, db+"."+coll)
	}
	if strings.Join(got, " ") != "a.x b.y" {
		t.Fatalf("events of %v (err %v), want a.x b.y", got, cs.Err())
	}
}
