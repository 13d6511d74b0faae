package jobstate

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func rawInt(n int32) bson.RawValue {
	t, b, _ := bson.MarshalValue(n)
	return bson.RawValue{Type: t, Value: b}
}

func TestListDocErrorsPagesNewestFirstWithTheirHash(t *testing.T) {
	ctx, s, _ := testStore(t)
	for i := range int32(5) {
		hash := "h-new"
		if i == 0 {
			hash = "" // written by a writer that did not know it
		}
		if err := s.RecordDocumentError(ctx, "books", rawInt(i), "TRANSFORM_FAILED", "bad "+string('a'+rune(i)), hash); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordDocumentError(ctx, "films", rawInt(1), "TRANSFORM_FAILED", "other job", "x"); err != nil {
		t.Fatal(err)
	}
	var all []DocError
	after, pages := "", 0
	for {
		page, err := ListDocErrors(ctx, s.errColl, "books", 2, after)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.Errors...)
		if page.Next == "" {
			break
		}
		if len(page.Errors) != 2 {
			t.Fatalf("a page before the last holds %d records, want 2", len(page.Errors))
		}
		after = page.Next
	}
	if pages != 3 || len(all) != 5 {
		t.Fatalf("%d pages, %d records; want 3 pages of 5 records", pages, len(all))
	}
	seen := map[int32]bool{}
	for i, e := range all {
		id := e.SourceID.Int32()
		if seen[id] {
			t.Errorf("record %d listed twice", id)
		}
		seen[id] = true
		if i > 0 && e.At.After(all[i-1].At) {
			t.Errorf("record %d (%v) after a newer one (%v): want newest first", id, e.At, all[i-1].At)
		}
		if e.Code != "TRANSFORM_FAILED" || e.Attempts != 1 || e.Message != "bad "+string('a'+rune(id)) {
			t.Errorf("record %d = %+v", id, e)
		}
		if want := map[bool]string{true: "", false: "h-new"}[id == 0]; e.Hash != want {
			t.Errorf("record %d hash %q, want %q", id, e.Hash, want)
		}
	}
	// A failure again updates the record, and a later one without a hash
	// does not keep a hash that no longer says which transform failed.
	if err := s.RecordDocError(ctx, "books", rawInt(3), "NOT_A_DOCUMENT", "again"); err != nil {
		t.Fatal(err)
	}
	page, err := ListDocErrors(ctx, s.errColl, "books", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Errors {
		if e.SourceID.Int32() != 3 {
			continue
		}
		if e.Attempts != 2 || e.Hash != "" || e.Code != "NOT_A_DOCUMENT" || e.At.Before(page.Errors[0].At) {
			t.Errorf("after a new failure: %+v, want 2 attempts, no hash, the newest", e)
		}
	}
	if _, err := ListDocErrors(ctx, s.errColl, "books", 2, "not-a-cursor"); err == nil || !strings.Contains(err.Error(), "bad page cursor") {
		t.Errorf("a bad cursor: %v", err)
	}
	if _, err := ListDocErrors(ctx, s.errColl, "books", 0, ""); err == nil {
		t.Errorf("a page of 0 records was accepted")
	}
}

func TestRecordedMessagesAreCutBetweenCharacters(t *testing.T) {
	msg := strings.Repeat("é", maxMessage) // 2 bytes each
	got := cutMessage(msg[1:], maxMessage)
	if !utf8.ValidString(strings.TrimSuffix(got, "...")[1:]) || !strings.HasSuffix(got, "...") || len(got) > maxMessage+3 {
		t.Errorf("cut message: %d bytes, valid %v", len(got), utf8.ValidString(got[1:]))
	}
	if got := cutMessage("short", maxMessage); got != "short" {
		t.Errorf("a short message was changed: %q", got)
	}
}
