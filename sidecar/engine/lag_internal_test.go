package engine

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// A resume token of mongod (an insert event's, whose clusterTime was
// Timestamp(1741186978, 25)) gives its cluster time.
func TestTokenTimeReadsAMongodToken(t *testing.T) {
	tok, err := bson.Marshal(bson.D{{Key: "_data", Value: "8267C867A2000000192B042C0100296E5A1004D3284E04D8914467A2160201812E4C4C463C6F7065726174696F6E54797065003C696E736572740046646F63756D656E744B65790046645F6964006467C867A2FB1CBCD579F4E4DE000004"}})
	if err != nil {
		t.Fatal(err)
	}
	ts, ok := tokenTime(tok)
	if !ok || ts != (bson.Timestamp{T: 1741186978, I: 25}) {
		t.Fatalf("tokenTime: %v %v", ts, ok)
	}
	for _, bad := range []bson.D{{{Key: "_data", Value: "81"}}, {{Key: "other", Value: 1}}, {{Key: "_data", Value: "zz67C867A200000019"}}} {
		raw, _ := bson.Marshal(bad)
		if _, ok := tokenTime(raw); ok {
			t.Errorf("a token %v read as a time", bad)
		}
	}
}

// The unread lag compares the source's newest cluster time with what is
// durable: the recorded position, or what was read when nothing is
// pending; under two seconds it is the resolution, not a lag.
func TestUnreadLagIsTheSourceAheadOfWhatIsDurable(t *testing.T) {
	c := &lagClock{durable: bson.Timestamp{T: 100, I: 1}, read: bson.Timestamp{T: 130, I: 1}, latest: bson.Timestamp{T: 131, I: 4}}
	if got := c.unread(false); got != 31 {
		t.Errorf("work pending: %v, want 31 (the recorded position's)", got)
	}
	if got := c.unread(true); got != 0 {
		t.Errorf("nothing pending, read to a second before the newest: %v, want 0", got)
	}
	c.latest = bson.Timestamp{T: 140}
	if got := c.unread(true); got != 10 {
		t.Errorf("nothing pending, 10s unread: %v", got)
	}
	c.latest = bson.Timestamp{}
	if got := c.unread(false); got != 0 {
		t.Errorf("the source's time not known: %v", got)
	}
}
