package jobstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

type fence int64

func (f fence) Epoch() int64 { return int64(f) }
func (f fence) Err() error   { return nil }

func TestPauseIsRecordedFencedAndCleared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, client := testutil.StartMongo(t, mongotest.Options{})
	state := client.Database("app").Collection("meilistream")
	s := New(state, nil, func(context.Context, int) error { return nil })

	if p, err := s.ReadPause(ctx, "books"); err != nil || p != nil {
		t.Fatalf("before any pause: %+v (%v), want none", p, err)
	}
	if err := s.RecordPause(ctx, "books", fence(2), "pod-a"); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPause(ctx, state, "books")
	if err != nil || p == nil || p.PausedBy != "pod-a" || p.PausedAt.IsZero() {
		t.Fatalf("after the pause: %+v (%v), want paused by pod-a with its time", p, err)
	}
	if p, _ := s.ReadPause(ctx, "authors"); p != nil {
		t.Fatalf("another job reads as paused: %+v", p)
	}

	t.Run("a deposed holder cannot resume it", func(t *testing.T) {
		err := s.ClearPause(ctx, "books", fence(1))
		if !errors.Is(err, errs.ErrLeaseLost) {
			t.Fatalf("clear at an earlier epoch: %v, want LEASE_LOST", err)
		}
		if p, _ := s.ReadPause(ctx, "books"); p == nil {
			t.Fatal("the pause went with a deposed holder's clear")
		}
	})
	t.Run("the holder resumes it, and pausing again works", func(t *testing.T) {
		if err := s.ClearPause(ctx, "books", fence(3)); err != nil {
			t.Fatal(err)
		}
		if p, err := s.ReadPause(ctx, "books"); err != nil || p != nil {
			t.Fatalf("after resume: %+v (%v), want none", p, err)
		}
		if err := s.RecordPause(ctx, "books", fence(3), "pod-b"); err != nil {
			t.Fatal(err)
		}
		if p, _ := s.ReadPause(ctx, "books"); p == nil || p.PausedBy != "pod-b" {
			t.Fatalf("paused again: %+v, want by pod-b", p)
		}
	})
}

func TestRequestOfKeepsKindModeAndNote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, client := testutil.StartMongo(t, mongotest.Options{})
	state := client.Database("app").Collection("meilistream")
	s := New(state, nil, func(context.Context, int) error { return nil })

	id, err := RequestOf(ctx, state, "books", "cli:1:a", time.Minute, ReindexKind, "inplace", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.ClaimRetry(ctx, "books", "pod-a", 1)
	if err != nil || r == nil || r.ID != id || r.Kind != ReindexKind || r.Mode != "inplace" || r.Started.IsZero() {
		t.Fatalf("claimed %+v (%v), want %s, a reindex in place, with its start time", r, err, id)
	}
	r.State, r.Note = RequestDone, "started"
	if err := s.FinishRetry(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRequest(ctx, state, "books", id)
	if err != nil || got.State != RequestDone || got.Note != "started" || got.Done.IsZero() {
		t.Fatalf("answered: %+v (%v), want done with its note and time", got, err)
	}
}
