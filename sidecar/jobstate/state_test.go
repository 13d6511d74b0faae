package jobstate

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// epochLease is a lease that is held at a fixed epoch.
type epochLease int64

func (l epochLease) Epoch() int64                  { return int64(l) }
func (l epochLease) Lost() <-chan struct{}         { return nil }
func (l epochLease) Err() error                    { return nil }
func (l epochLease) Confirm(context.Context) error { return nil }

// testStore is a store over a fresh test server's state collection.
func testStore(t *testing.T) (context.Context, *Store, *mongo.Collection) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	db := client.Database("app")
	state := db.Collection("meilistream")
	s := New(state, db.Collection("meilistream_errors"), func(context.Context, int) error { return nil })
	return ctx, s, state
}

func TestClearedPositionKeepsItsEpochSoADeposedHolderCannotRewriteIt(t *testing.T) {
	ctx, e, state := testStore(t)
	tok, _ := bson.Marshal(bson.D{{Key: "_data", Value: "82AB"}})
	deposed, holder := epochLease(1), epochLease(2)

	if err := e.RecordPosition(ctx, "items", deposed, tok, time.Now(), bson.Timestamp{}); err != nil {
		t.Fatal(err)
	}
	if err := e.WriteCheckpoint(ctx, "items", deposed, &Checkpoint{Hash: "h1", Count: 10}); err != nil {
		t.Fatal(err)
	}
	// The new holder stamps, then clears both (an invalidation; a finished
	// reindex).
	if err := e.Stamp(ctx, "items", holder); err != nil {
		t.Fatal(err)
	}
	if err := e.ClearPosition(ctx, "items", holder); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteCheckpoint(ctx, "items", holder); err != nil {
		t.Fatal(err)
	}
	// The deposed holder's writes are refused: the documents still carry
	// the new epoch.
	if err := e.RecordPosition(ctx, "items", deposed, tok, time.Now(), bson.Timestamp{}); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed position write: want LEASE_LOST, got %v", err)
	}
	if err := e.WriteCheckpoint(ctx, "items", deposed, &Checkpoint{Hash: "h1"}); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed checkpoint write: want LEASE_LOST, got %v", err)
	}
	if err := e.Stamp(ctx, "items", deposed); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed stamp: want LEASE_LOST, got %v", err)
	}
	if p, err := e.ReadPosition(ctx, "items"); err != nil || p != nil {
		t.Fatalf("position after clear: %+v %v, want none", p, err)
	}
	if c, err := e.ReadCheckpoint(ctx, "items"); err != nil || c != nil {
		t.Fatalf("checkpoint after clear: %+v %v, want none", c, err)
	}
	var d bson.M
	if err := state.FindOne(ctx, bson.D{{Key: "_id", Value: posKey("items")}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d[fenceField] != int64(2) || d["token"] != nil {
		t.Fatalf("cleared position document %v: want leaseEpoch 2 and no token", d)
	}
	if js, err := ReadState(ctx, state, nil); err != nil || len(js) != 0 {
		t.Fatalf("ReadState of cleared documents: %+v %v, want no job", js, err)
	}
	// The holder itself writes on.
	if err := e.RecordPosition(ctx, "items", holder, tok, time.Now(), bson.Timestamp{}); err != nil {
		t.Fatal(err)
	}
	if p, err := e.ReadPosition(ctx, "items"); err != nil || p == nil || !bytes.Equal(p.Token, tok) {
		t.Fatalf("position: %+v %v", p, err)
	}
}

func TestStampCreatesTheStateSoADeposedHolderCannotCreateIt(t *testing.T) {
	ctx, e, _ := testStore(t)
	tok, _ := bson.Marshal(bson.D{{Key: "_data", Value: "82AB"}})
	if err := e.Stamp(ctx, "items", epochLease(5)); err != nil {
		t.Fatal(err)
	}
	if err := e.RecordPosition(ctx, "items", epochLease(4), tok, time.Now(), bson.Timestamp{}); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("want LEASE_LOST, got %v", err)
	}
	if p, _ := e.ReadPosition(ctx, "items"); p != nil {
		t.Fatalf("position %+v, want none", p)
	}
}
