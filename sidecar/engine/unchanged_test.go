package engine

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

func desc(t *testing.T, keys ...string) bson.Raw {
	t.Helper()
	set := bson.D{}
	for _, k := range keys {
		set = append(set, bson.E{Key: k, Value: 1})
	}
	b, err := bson.Marshal(bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: bson.A{}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func idOf(t *testing.T, n int32) bson.RawValue {
	t.Helper()
	b, err := bson.Marshal(bson.D{{Key: "_id", Value: n}})
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(b).Lookup("_id")
}

// An update that replaced earlier changes of its document in the batch is
// judged with all of them: the destination holds the version before the
// first.
func TestACoalescedUpdateIsJudgedWithEveryChangeItReplaced(t *testing.T) {
	doc := bson.Raw{5, 0, 0, 0, 0}
	reads := transform.Result{Reads: &transform.Reads{Fields: []string{"title"}}}
	update := func(keys ...string) Item {
		return Item{Doc: doc, ID: idOf(t, 1), Op: transform.OpUpdate, Upd: desc(t, keys...)}
	}
	cases := []struct {
		name    string
		changes []Item
		spared  bool
	}{
		{"one update of an unread field", []Item{update("views")}, true},
		{"one update of a read field", []Item{update("title")}, false},
		{"an unread field after a read one", []Item{update("title"), update("views")}, false},
		{"unread fields three times", []Item{update("views"), update("views"), update("likes")}, true},
		{"an update after an insert", []Item{{Doc: doc, ID: idOf(t, 1), Op: transform.OpInsert}, update("views")}, false},
		{"an update after a replace, then another", []Item{{Doc: doc, ID: idOf(t, 1), Op: transform.OpReplace}, update("views"), update("views")}, false},
		{"an update whose lookup found nothing, then one", []Item{{ID: idOf(t, 1), Op: transform.OpUpdate, Upd: desc(t, "views")}, update("views")}, true},
		{"an update without a description, then one", []Item{{Doc: doc, ID: idOf(t, 1), Op: transform.OpUpdate}, update("views")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := c.changes[0]
			for _, next := range c.changes[1:] {
				it = Coalesce(it, next)
			}
			u := &Unchanged{}
			if got := u.unchanged(&it, reads); got != c.spared {
				t.Errorf("spared %v, want %v (coalesced %d)", got, c.spared, len(it.coalesced))
			}
			if n := u.n.Load(); (n == 1) != c.spared {
				t.Errorf("counted %d", n)
			}
		})
	}
	// A delete replacing an update is a delete, never judged.
	if it := Coalesce(update("views"), Item{ID: idOf(t, 1)}); it.Doc != nil || it.coalesced != nil {
		t.Errorf("a delete after an update: %+v", it)
	}
}

func TestADocumentWithAnErrorRecordOrNoReadsIsNeverSpared(t *testing.T) {
	doc := bson.Raw{5, 0, 0, 0, 0}
	it := Item{Doc: doc, ID: idOf(t, 7), Op: transform.OpUpdate, Upd: desc(t, "views")}
	reads := transform.Result{Reads: &transform.Reads{Fields: []string{"title"}}}
	set := keepSet(nil, "items", nil, nil)
	u := &Unchanged{records: set}
	if !u.unchanged(&it, reads) {
		t.Fatal("a clean document is not spared")
	}
	set.Add(it.ID)
	if u.unchanged(&it, reads) {
		t.Error("a document with an error record is spared")
	}
	var none *Unchanged
	if none.unchanged(&it, reads) {
		t.Error("spared without a judge (a reindex running, skipUnchanged off)")
	}
	if (&Unchanged{}).unchanged(&it, transform.Result{}) {
		t.Error("spared without reads (the identity, a job without skipUnchanged)")
	}
	for _, r := range []*transform.Reads{{Fields: []string{"title"}, Context: true}, {Fields: []string{"title"}, Unknown: true}, {All: true}} {
		if (&Unchanged{}).unchanged(&it, transform.Result{Reads: r}) {
			t.Errorf("spared with reads %+v", r)
		}
	}
}
