package engine

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// A document read again for a retry or a repair fails under its own name
// in the logs, though the transform sees it as a reindex's (it was read
// from the collection, not from an event).
func TestDocErrorNamesWhyTheDocumentWasReadAgain(t *testing.T) {
	src := `module.exports = { transform(doc, ctx) { if (doc.bad) throw new Error("bad " + ctx.operation); return doc; } };`
	job, err := transform.LoadFile("items.js", []byte(src), transform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "bad", Value: true}})
	id := bson.Raw(raw).Lookup("_id")
	for _, c := range []struct {
		again string
		op    transform.Operation
		want  string
	}{
		{"", transform.OpInsert, "insert"},
		{"", transform.OpReindex, "reindex"},
		{OpRetry, transform.OpReindex, "retry"},
		{OpRepair, transform.OpReindex, "repair"},
	} {
		_, _, bad, err := Transform(context.Background(), job, []Item{{Doc: raw, ID: id, Op: c.op, Again: c.again}}, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) != 1 {
			t.Fatalf("again %q: %d failures, want 1", c.again, len(bad))
		}
		if got := bad[0].OpLabel(); got != c.want {
			t.Errorf("again %q, op %s: logged as op=%s, want op=%s", c.again, c.op, got, c.want)
		}
		if msg := bad[0].Err.Error(); !strings.Contains(msg, "bad "+string(c.op)) {
			t.Errorf("again %q: the transform saw %q, want ctx.operation %q", c.again, msg, c.op)
		}
	}
}
