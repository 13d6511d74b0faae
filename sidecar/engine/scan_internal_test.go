package engine

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func rawOf(t *testing.T, v any) bson.RawValue {
	t.Helper()
	typ, b, err := bson.MarshalValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return bson.RawValue{Type: typ, Value: b}
}

func TestScanCursorTokenRoundTrips(t *testing.T) {
	at := bson.NewDateTimeFromTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for name, c := range map[string]scanCursor{
		"none yet":                 {},
		"a date and int":           {Key: rawOf(t, at), ID: rawOf(t, int32(7))},
		"a number and a string id": {Key: rawOf(t, 12.5), ID: rawOf(t, "x")},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := scanCursorOf(c.token())
			if !ok || cmpCursor(got, c) != 0 || got.none() != c.none() {
				t.Fatalf("token %s read back as %+v (ok %v), want %+v", c.token(), got, ok, c)
			}
		})
	}
	t.Run("a change stream's resume token is no cursor", func(t *testing.T) {
		tok, _ := bson.Marshal(bson.D{{Key: "_data", Value: "8200000001"}})
		if isScanToken(tok) || isScanToken(nil) {
			t.Fatal("a resume token taken for a scan cursor")
		}
	})
}

func TestCursorsOrderByKeyThenID(t *testing.T) {
	d := func(ms int64) bson.RawValue { return rawOf(t, bson.DateTime(ms)) }
	cases := []struct {
		name string
		a, b scanCursor
		want int
	}{
		{"an earlier date first", scanCursor{d(1), rawOf(t, 9)}, scanCursor{d(2), rawOf(t, 1)}, -1},
		{"on one key, the smaller _id first", scanCursor{d(5), rawOf(t, 1)}, scanCursor{d(5), rawOf(t, 2)}, -1},
		{"numbers by value across types", scanCursor{rawOf(t, int32(3)), rawOf(t, 1)}, scanCursor{rawOf(t, 2.5), rawOf(t, 1)}, 1},
		{"none before anything", scanCursor{}, scanCursor{d(0), rawOf(t, 0)}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := cmpCursor(c.a, c.b); sign(got) != c.want {
				t.Fatalf("cmpCursor = %d, want sign %d", got, c.want)
			}
			if got := cmpCursor(c.b, c.a); sign(got) != -c.want {
				t.Fatalf("reversed: cmpCursor = %d, want sign %d", got, -c.want)
			}
		})
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestOverlapIsReadByTheKeysType(t *testing.T) {
	s := &scanner{overlapMs: 10000, overlapUnits: 10}
	if v, ok := s.minusOverlap(rawOf(t, bson.DateTime(60000))); !ok || v != bson.DateTime(50000) {
		t.Fatalf("a date less 10s: %v %v", v, ok)
	}
	if v, ok := s.minusOverlap(rawOf(t, int64(100))); !ok || v != 90.0 {
		t.Fatalf("a number less 10 units: %v %v", v, ok)
	}
	s = &scanner{}
	if _, ok := s.minusOverlap(rawOf(t, bson.DateTime(60000))); ok {
		t.Fatal("no overlap still moved the start")
	}
}

func TestAnUnchangedReReadIsNotHandedOverAgain(t *testing.T) {
	s := &scanner{overlapMs: 1000, place: place{seen: map[string]seenDoc{}}}
	p := &s.place
	doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: bson.DateTime(5000)}})
	key := rawOf(t, bson.DateTime(5000))
	if !s.changed(p, doc, key) {
		t.Fatal("a first read judged unchanged")
	}
	if s.changed(p, doc, key) {
		t.Fatal("the same bytes read again judged changed")
	}
	other, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: bson.DateTime(5000)}, {Key: "x", Value: 1}})
	if !s.changed(p, other, key) {
		t.Fatal("a changed document judged unchanged")
	}
	s.prune(p, bson.DateTime(6000))
	if len(s.seen) != 0 {
		t.Fatalf("the window below its start is still remembered: %v", s.seen)
	}
}

func TestAPassNeverStartsInTheFuture(t *testing.T) {
	future := bson.NewDateTimeFromTime(time.Now().Add(24 * time.Hour))
	for _, s := range []*scanner{{overlapMs: 10000}, {}} {
		v, ok := s.minusOverlap(rawOf(t, future))
		if !ok {
			t.Fatalf("overlap %d ms: a cursor in the future starts a pass at it", s.overlapMs)
		}
		if got := v.(bson.DateTime).Time(); got.After(time.Now()) {
			t.Fatalf("overlap %d ms: a pass starts at %s, in the future", s.overlapMs, got)
		}
	}
}

func TestRelatedCursorsRideInTheToken(t *testing.T) {
	main := scanCursor{Key: rawOf(t, bson.DateTime(1)), ID: rawOf(t, 1)}
	users := &place{name: "us.ers", tokenName: "us.ers", cursor: scanCursor{Key: rawOf(t, bson.DateTime(2)), ID: rawOf(t, "u")}}
	none := &place{name: "tags", tokenName: "tags"}
	tok := main.token(users, none)
	if got := relatedCursorOf(tok, "us.ers"); cmpCursor(got, users.cursor) != 0 {
		t.Fatalf("related cursor read back as %+v from %s", got, tok)
	}
	if got := relatedCursorOf(tok, "tags"); !got.none() {
		t.Fatalf("a related collection without a cursor read back as %+v", got)
	}
	if got, _ := scanCursorOf(tok); cmpCursor(got, main) != 0 {
		t.Fatalf("the job's cursor read back as %+v", got)
	}
}
