package jobstate

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/mongotest"
)

func TestRetryRequestIsTakenOnceAnsweredAndBounded(t *testing.T) {
	forEachForm(t, testRetryRequestIsTakenOnceAnsweredAndBounded)
}

func testRetryRequestIsTakenOnceAnsweredAndBounded(t *testing.T, srv *mongotest.Server, client *mongo.Client, form capability.Form) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := client.Database("app").Collection("meilistream")
	s := New(state, nil, func(context.Context, int) error { return nil })
	s.SetForm(form)

	first, err := RequestRetry(ctx, state, "books", "cli:1:a", time.Minute, form)
	if err != nil {
		t.Fatal(err)
	}
	srv.AdvanceClock(time.Millisecond) // requestedAt orders them
	second, err := RequestRetry(ctx, state, "books", "cli:2:b", time.Minute, form)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.ClaimRetry(ctx, "authors", "pod-a", 3); err != nil || r != nil {
		t.Fatalf("another job's holder took %+v (%v)", r, err)
	}

	// The oldest first, once.
	r, err := s.ClaimRetry(ctx, "books", "pod-a", 3)
	if err != nil || r == nil || r.ID != first || r.State != RequestRunning || r.Holder != "pod-a" || r.Epoch != 3 {
		t.Fatalf("claimed %+v (%v), want %s running under pod-a at epoch 3", r, err, first)
	}
	r2, err := s.ClaimRetry(ctx, "books", "pod-a", 3)
	if err != nil || r2 == nil || r2.ID != second {
		t.Fatalf("second claim %+v (%v), want %s", r2, err, second)
	}
	if r3, err := s.ClaimRetry(ctx, "books", "pod-a", 3); err != nil || r3 != nil {
		t.Fatalf("third claim %+v (%v), want none", r3, err)
	}

	t.Run("a running request of a holder that went away is taken by the next", func(t *testing.T) {
		r, err := s.ClaimRetry(ctx, "books", "pod-b", 4)
		if err != nil || r == nil || r.ID != first || r.Epoch != 4 {
			t.Fatalf("claim at a later epoch: %+v (%v), want %s again", r, err, first)
		}
		// The deposed holder's answer no longer lands.
		stale := &RetryRequest{Job: "books", ID: first, Epoch: 3, State: RequestFailed, Code: "LEASE_LOST", Error: "lost"}
		if err := s.FinishRetry(ctx, stale); err != nil {
			t.Fatal(err)
		}
		got, err := ReadRequest(ctx, state, "books", first)
		if err != nil || got.State != RequestRunning || got.Holder != "pod-b" {
			t.Fatalf("after the deposed answer: %+v (%v), want still running under pod-b", got, err)
		}
		done := &RetryRequest{Job: "books", ID: first, Epoch: 4, State: RequestDone, Retried: 5, Written: 3, Gone: 1, Failed: 1, Duration: 1500 * time.Millisecond}
		if err := s.FinishRetry(ctx, done); err != nil {
			t.Fatal(err)
		}
		got, err = ReadRequest(ctx, state, "books", first)
		if err != nil || got.State != RequestDone || got.Retried != 5 || got.Written != 3 || got.Gone != 1 || got.Failed != 1 || got.Duration != 1500*time.Millisecond {
			t.Fatalf("answered: %+v (%v)", got, err)
		}
	})

	t.Run("a taken request cannot be withdrawn, a pending one can", func(t *testing.T) {
		if ok, err := WithdrawRequest(ctx, state, "books", second); err != nil || ok {
			t.Fatalf("withdrew a taken request: %v %v", ok, err)
		}
		id, err := RequestRetry(ctx, state, "books", "cli:3:c", time.Minute, form)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := WithdrawRequest(ctx, state, "books", id); err != nil || !ok {
			t.Fatalf("withdraw a pending request: %v %v", ok, err)
		}
		if got, err := ReadRequest(ctx, state, "books", id); err != nil || got != nil {
			t.Fatalf("withdrawn request still there: %+v %v", got, err)
		}
	})

	t.Run("expired requests are neither taken nor kept", func(t *testing.T) {
		id, err := RequestRetry(ctx, state, "books", "cli:4:d", time.Second, form)
		if err != nil {
			t.Fatal(err)
		}
		srv.AdvanceClock(2 * time.Minute)
		if r, err := s.ClaimRetry(ctx, "books", "pod-b", 5); err != nil || r != nil {
			t.Fatalf("took an expired request: %+v %v", r, err)
		}
		if err := s.DropExpiredRequests(ctx, "books"); err != nil {
			t.Fatal(err)
		}
		n, err := state.CountDocuments(ctx, bson.D{{Key: "_id.retry", Value: "books"}})
		if err != nil || n != 0 {
			t.Fatalf("%d requests left after expiry (%v); %s among them", n, err, id)
		}
	})
}
