package jobstate

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

func publish(t *testing.T, ctx context.Context, s *Store, seqs int, parallel int) {
	t.Helper()
	if err := s.EnsureSlotIndex(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < seqs; i++ {
		_, v, _ := bson.MarshalValue(int32(i))
		c := SharedChunk{Job: "items", Run: "r1", Seq: int64(i), Hash: "h1", Parallel: parallel,
			IDs: []bson.RawValue{{Type: bson.TypeInt32, Value: v}}}
		if err := s.PublishChunk(ctx, epochLease(1), c); err != nil {
			t.Fatal(err)
		}
	}
}

// lapse waits, by the server's clock, until the claims of job that held
// a lease of a millisecond have lapsed: until a claim reaps one.
func claimAfterLapse(t *testing.T, ctx context.Context, s *Store, owner string) *Claim {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := s.ClaimChunk(ctx, "items", "h1", owner, time.Minute, 0)
		if err != nil && !errors.Is(err, ErrSlotsBusy) {
			t.Fatal(err)
		}
		if c != nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("no claim was reaped")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClaimsTakeAtMostParallelSlotsAtOnce(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 5, 2)
	a, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || a == nil {
		t.Fatalf("first claim: %v %v", a, err)
	}
	b, err := s.ClaimChunk(ctx, "items", "h1", "b", time.Minute, 0)
	if err != nil || b == nil {
		t.Fatalf("second claim: %v %v", b, err)
	}
	if a.Seq == b.Seq || a.Slot == b.Slot {
		t.Fatalf("two claims share a chunk or a slot: %+v %+v", a, b)
	}
	c, err := s.ClaimChunk(ctx, "items", "h1", "c", time.Minute, 0)
	if !errors.Is(err, ErrSlotsBusy) || c != nil {
		t.Fatalf("a third claim with two slots: %+v %v", c, err)
	}
	// The invariant is the schema's: a claim of a held slot is refused
	// by the unique index whatever a process believes.
	_, err = s.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: chunkKey("items", "r1", 4)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "slot", Value: a.Slot}}}})
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("a second holder of slot %d: %v, want a duplicate key", a.Slot, err)
	}
	if err := s.SubmitClaim(ctx, a); err != nil {
		t.Fatal(err)
	}
	c, err = s.ClaimChunk(ctx, "items", "h1", "c", time.Minute, 0)
	if err != nil || c == nil || c.Seq == a.Seq {
		t.Fatalf("a claim after a slot was freed: %+v %v", c, err)
	}
}

// A claim in a given slot takes the next chunk in it when the slot is
// free, finds nothing (for ClaimChunk to say why) when another claim
// holds it or every chunk is taken, and claims nothing while paused.
func TestAClaimInASlotTakesItOnlyWhenFree(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 3, 2)
	a, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	if c, err := s.ClaimInSlot(ctx, "items", "h1", "b", a.Slot, time.Minute, 0); err != nil || c != nil {
		t.Fatalf("a claim in slot %d, held: %+v %v", a.Slot, c, err)
	}
	if err := s.SubmitClaim(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := s.ClaimInSlot(ctx, "items", "h1", "a", a.Slot, time.Minute, 0)
	if err != nil || b == nil || b.Slot != a.Slot || b.Seq == a.Seq {
		t.Fatalf("a claim in slot %d, given back: %+v %v", a.Slot, b, err)
	}
	if c, err := s.ClaimInSlot(ctx, "items", "h0", "old", 1-a.Slot, time.Minute, 0); err != nil || c != nil {
		t.Fatalf("a process with another transform claimed %+v (%v)", c, err)
	}
	if err := s.RecordPause(ctx, "items", epochLease(1), "cli"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ClaimInSlot(ctx, "items", "h1", "a", 1-a.Slot, time.Minute, 0); !errors.Is(err, ErrPaused) || c != nil {
		t.Fatalf("a claim of a paused job's chunk: %+v %v, want ErrPaused", c, err)
	}
	if err := s.ClearPause(ctx, "items", epochLease(1)); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ClaimInSlot(ctx, "items", "h1", "a", 2, time.Minute, 0); err != nil || c != nil {
		t.Fatalf("a claim in a slot past the run's parallel: %+v %v", c, err)
	}
	c, err := s.ClaimInSlot(ctx, "items", "h1", "a", 1-a.Slot, time.Minute, 0)
	if err != nil || c == nil {
		t.Fatalf("the last chunk: %+v %v", c, err)
	}
	if err := s.SubmitClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	if d, err := s.ClaimInSlot(ctx, "items", "h1", "a", c.Slot, time.Minute, 0); err != nil || d != nil {
		t.Fatalf("every chunk taken: %+v %v", d, err)
	}
}

func TestClaimsOfAnotherTransformHashFindNothing(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 2, 4)
	c, err := s.ClaimChunk(ctx, "items", "h0", "old", time.Minute, 0)
	if err != nil || c != nil {
		t.Fatalf("a process with another transform claimed %+v (%v)", c, err)
	}
}

func TestAPausedJobsChunksAreNotClaimedUntilResumed(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 2, 4)
	if err := s.RecordPause(ctx, "items", epochLease(1), "cli"); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if !errors.Is(err, ErrPaused) || c != nil {
		t.Fatalf("a claim of a paused job's chunk: %+v %v, want ErrPaused", c, err)
	}
	if err := s.ClearPause(ctx, "items", epochLease(1)); err != nil {
		t.Fatal(err)
	}
	if c, err = s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0); err != nil || c == nil {
		t.Fatalf("a claim once resumed: %+v %v", c, err)
	}
}

func TestALapsedClaimIsReapedAndItsResultIgnored(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 1, 1)
	stalled, err := s.ClaimChunk(ctx, "items", "h1", "stalled", time.Millisecond, 0)
	if err != nil || stalled == nil {
		t.Fatalf("claim: %v %v", stalled, err)
	}
	// Another process claims the same chunk once the lease lapsed by the
	// server's clock (the only slot: the stalled claim is reaped).
	next := claimAfterLapse(t, ctx, s, "next")
	if next.Seq != stalled.Seq || next.Token == stalled.Token {
		t.Fatalf("takeover: %+v after %+v", next, stalled)
	}
	// The stalled claimant wakes: each of its fenced writes misses.
	if err := s.RenewClaim(ctx, stalled, time.Minute); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("renew after takeover: %v", err)
	}
	r := &ChunkResult{Writes: []ChunkWrite{{ID: stalled.IDs[0], JSON: []byte(`{"id":0,"v":"old"}`)}}}
	if err := s.WriteChunkResult(ctx, stalled, r); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("result after takeover: %v", err)
	}
	if got, err := s.ReadChunkResult(ctx, "items", "r1", 0, stalled.Token); err != nil || got != nil {
		t.Fatalf("the taken-over claim's result is kept: %+v %v", got, err)
	}
	if err := s.SubmitClaim(ctx, stalled); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("submit after takeover: %v", err)
	}
	// The new claim's result is what the holder reads.
	r.Writes[0].JSON = []byte(`{"id":0,"v":"new"}`)
	if err := s.WriteChunkResult(ctx, next, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadChunkResult(ctx, "items", "r1", 0, next.Token)
	if err != nil || got == nil || string(got.Writes[0].JSON) != `{"id":0,"v":"new"}` {
		t.Fatalf("result: %+v %v", got, err)
	}
	if err := s.SubmitClaim(ctx, next); err != nil {
		t.Fatal(err)
	}
	// Applied: the holder deletes the chunk and its results.
	if err := s.DeleteChunk(ctx, "items", "r1", 0); err != nil {
		t.Fatal(err)
	}
	if n, m, err := s.ChunkCounts(ctx, "items"); err != nil || n != 0 || m != 0 {
		t.Fatalf("left after the delete: %d chunks, %d results (%v)", n, m, err)
	}
}

func TestAReleasedClaimIsClaimableAtOnceAndEarlierRunsAreDeleted(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 1, 1)
	a, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	if err := s.ReleaseClaim(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := s.ClaimChunk(ctx, "items", "h1", "b", time.Minute, 0)
	if err != nil || b == nil || b.Seq != a.Seq {
		t.Fatalf("claim after release: %+v %v", b, err)
	}
	if err := s.WriteChunkResult(ctx, b, &ChunkResult{Skipped: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteChunks(ctx, "items", "r2"); err != nil {
		t.Fatal(err)
	}
	if n, m, err := s.ChunkCounts(ctx, "items"); err != nil || n != 0 || m != 0 {
		t.Fatalf("left of an earlier run: %d chunks, %d results (%v)", n, m, err)
	}
}

// A result larger than one document takes is written in parts and read
// back whole, in order; a first part read alone says it is not the whole
// result; only a write that alone passes the bound makes it too large.
func TestAResultLargerThanADocumentIsWrittenInParts(t *testing.T) {
	ctx, s, state := testStore(t)
	publish(t, ctx, s, 1, 1)
	c, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	r := &ChunkResult{Skipped: 2}
	for i := 0; i < 5; i++ {
		_, id, _ := bson.MarshalValue(int32(i))
		doc := bytes.Repeat([]byte{'a' + byte(i)}, MaxChunkResultBytes/2)
		r.Writes = append(r.Writes, ChunkWrite{ID: bson.RawValue{Type: bson.TypeInt32, Value: id}, JSON: doc})
	}
	r.Errors = []ChunkError{{ID: c.IDs[0], Op: "reindex", Code: "TRANSFORM_FAILED", Message: "boom"}}
	if err := s.WriteChunkResult(ctx, c, r); err != nil {
		t.Fatal(err)
	}
	if n, err := state.Database().Collection(ChunksCollection(state.Name())).CountDocuments(ctx, bson.D{}); err != nil || n < 3 {
		t.Fatalf("%d result documents (%v): want the result in parts", n, err)
	}
	got, err := s.ReadChunkResult(ctx, "items", "r1", 0, c.Token)
	if err != nil || got == nil || got.TooLarge || len(got.Writes) != 5 || got.Skipped != 2 || len(got.Errors) != 1 {
		t.Fatalf("read back %d writes, %d errors, skipped %d, too large %v (%v)", len(got.Writes), len(got.Errors), got.Skipped, got.TooLarge, err)
	}
	for i, w := range got.Writes {
		if w.ID.Int32() != int32(i) || !bytes.Equal(w.JSON, r.Writes[i].JSON) {
			t.Fatalf("write %d read back as id %v, %d bytes", i, w.ID, len(w.JSON))
		}
	}
	// The first part alone, as a holder reading one document sees it.
	first, err := state.Database().Collection(ChunksCollection(state.Name())).FindOne(ctx, bson.D{{Key: "_id", Value: bson.D{
		{Key: "job", Value: "items"}, {Key: "run", Value: "r1"}, {Key: "seq", Value: int64(0)}, {Key: "token", Value: c.Token}}}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if tl, _ := first.Lookup("tooLarge").BooleanOK(); !tl {
		t.Fatal("the first part of a result in parts does not say it is not the whole result")
	}

	// One write that alone passes the bound.
	if err := s.SubmitClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, s, 2, 1)
	c2, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || c2 == nil {
		t.Fatal(c2, err)
	}
	big := &ChunkResult{Writes: []ChunkWrite{{ID: c2.IDs[0], JSON: make([]byte, MaxChunkResultBytes)}}}
	if err := s.WriteChunkResult(ctx, c2, big); err != nil {
		t.Fatal(err)
	}
	got, err = s.ReadChunkResult(ctx, "items", c2.Run, c2.Seq, c2.Token)
	if err != nil || got == nil || !got.TooLarge || len(got.Writes) != 0 {
		t.Fatalf("result: %+v %v", got, err)
	}
}

func TestAChunkResultReadsBackAsWritten(t *testing.T) {
	ctx, s, _ := testStore(t)
	publish(t, ctx, s, 1, 1)
	c, err := s.ClaimChunk(ctx, "items", "h1", "a", time.Minute, 0)
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	mirror, _ := bson.Marshal(bson.D{{Key: "_id", Value: 2}, {Key: "t", Value: "m"}})
	_, two, _ := bson.MarshalValue(int32(2))
	_, three, _ := bson.MarshalValue("three")
	want := &ChunkResult{
		Writes: []ChunkWrite{
			{ID: c.IDs[0], JSON: []byte(`{"id":0}`)},
			{ID: bson.RawValue{Type: bson.TypeInt32, Value: two}, Doc: mirror},
			{ID: bson.RawValue{Type: bson.TypeString, Value: three}, Delete: true},
		},
		Errors:  []ChunkError{{ID: c.IDs[0], Op: "reindex", Code: "TRANSFORM_FAILED", Message: "boom"}},
		Skipped: 3,
	}
	if err := s.WriteChunkResult(ctx, c, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadChunkResult(ctx, "items", "r1", 0, c.Token)
	if err != nil || got == nil {
		t.Fatal(got, err)
	}
	if len(got.Writes) != 3 || string(got.Writes[0].JSON) != `{"id":0}` || !bytes.Equal(got.Writes[1].Doc, mirror) ||
		!got.Writes[2].Delete || got.Writes[2].ID.StringValue() != "three" || got.Skipped != 3 ||
		len(got.Errors) != 1 || got.Errors[0].Code != "TRANSFORM_FAILED" || got.Errors[0].Message != "boom" {
		t.Fatalf("read back %+v, wrote %+v", got, want)
	}
}
