package transform_test

import (
	"bytes"
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// judged runs an update, from before to after (whose updateDescription is
// ud), through j as the engine does (the reads of the call on after
// decide) and returns whether it is judged unchanged and whether the two
// results are the same.
func judged(t *testing.T, j *transform.Job, before, after bson.Raw, ud bson.Raw) (skipped, equal bool, old, cur string) {
	t.Helper()
	ctx := context.Background()
	oldRes, oldErr := j.Apply(ctx, before, transform.OpUpdate, ud)
	newRes, newErr := j.Apply(ctx, after, transform.OpUpdate, ud)
	skipped = newErr == nil && newRes.Reads.UnchangedBy(ud)
	old, cur = outcomeText(oldRes, oldErr), outcomeText(newRes, newErr)
	return skipped, old == cur, old, cur
}

// outcomeText is a result as the destination would get it, or its error.
func outcomeText(r transform.Result, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case r.Skip:
		return "skip"
	case r.Raw != nil:
		return bson.Raw(r.Raw).String()
	}
	return string(bytes.Clone(r.JSON))
}

// A field deleted after the document was enumerated is read: its
// presence reached the result through the enumeration.
func TestAFieldDeletedAfterAnEnumerationIsRead(t *testing.T) {
	before := marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}})
	cases := []struct {
		name, src, field string
	}{
		{"a search job keeping the keys it saw", `module.exports = { transform(doc) {
			const present = Object.keys(doc); delete doc.secret; return {title: doc.title, present: present.join(",")};
		} };`, "secret"},
		{"a mirror job counting the keys", `module.exports = { mirror: "m", transform(doc) {
			doc.nkeys = Object.keys(doc).length; delete doc.email; return doc;
		} };`, "email"},
		{"for...in, then delete", `module.exports = { transform(doc) {
			let n = 0; for (const k in doc) n++; delete doc.secret; return {n: n};
		} };`, "secret"},
		{"JSON.stringify, then delete", `module.exports = { transform(doc) {
			const s = JSON.stringify(doc); delete doc.secret; return {s: s};
		} };`, "secret"},
		{"a spread copy, then delete", `module.exports = { transform(doc) {
			const c = {...doc}; delete doc.secret; return {n: Object.keys(c).length};
		} };`, "secret"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := loadJob(t, c.src)
			after := marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}, {Key: c.field, Value: "x"}})
			for what, ud := range map[string]bson.Raw{"adding": updated(t, []string{c.field})} {
				skipped, equal, old, cur := judged(t, j, before, after, ud)
				if equal {
					t.Fatalf("the example does not show the bug: both results are %s", cur)
				}
				if skipped {
					t.Errorf("%s %s is judged unchanged, but the result went from %s to %s", what, c.field, old, cur)
				}
			}
			// And the other way: removing it.
			if skipped, equal, old, cur := judged(t, j, after, before, updated(t, nil, c.field)); skipped && !equal {
				t.Errorf("removing %s is judged unchanged, but the result went from %s to %s", c.field, old, cur)
			}
		})
	}
	// Deleted before anything saw the keys, it still reaches nothing.
	j := loadJob(t, `module.exports = { transform(doc) { delete doc.secret; return {present: Object.keys(doc).join(",")}; } };`)
	after := marshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "title", Value: "T"}, {Key: "secret", Value: "x"}})
	if skipped, equal, old, cur := judged(t, j, before, after, updated(t, []string{"secret"})); !skipped || !equal {
		t.Errorf("a field deleted before the enumeration: skipped %v, results %s and %s", skipped, old, cur)
	}
}
