package engine

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/jobdef"
)

// TestUnreachedNamesTheDependenciesWhoseOldDependentsAreUnknown: a
// related change leaves dependents unfound exactly when the dependency's
// key is not _id, the stream has no pre-image, and the key's old value may
// differ from the new.
func TestUnreachedNamesTheDependenciesWhoseOldDependentsAreUnknown(t *testing.T) {
	deps := []jobdef.Dependency{
		{Database: "app", Collection: "users", Key: "email", Field: "authorEmail"},
		{Database: "app", Collection: "users", Key: "_id", Field: "authorId"},
		{Database: "app", Collection: "users", Key: "profile.handle", Field: "handle"},
		{Database: "app", Collection: "tags", Key: "slug", Field: "tagSlugs"},
	}
	doc := rawDoc(t, bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "a@x"}})
	before := rawDoc(t, bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "b@x"}})
	upd := func(set bson.D, removed ...string) bson.Raw {
		rm := bson.A{}
		for _, r := range removed {
			rm = append(rm, r)
		}
		return rawDoc(t, bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: rm}})
	}
	for _, tc := range []struct {
		name        string
		op          string
		doc, before bson.Raw
		upd         bson.Raw
		want        []string
	}{
		{"an insert has no old value", "insert", doc, nil, nil, nil},
		{"a pre-image gives the old value", "delete", nil, before, nil, nil},
		{"a delete without one", "delete", nil, nil, nil, []string{"authorEmail", "handle"}},
		{"a replace without one", "replace", doc, nil, nil, []string{"authorEmail", "handle"}},
		{"an update of another field", "update", doc, nil, upd(bson.D{{Key: "name", Value: "x"}}), nil},
		{"an update of the key", "update", doc, nil, upd(bson.D{{Key: "email", Value: "a@x"}}), []string{"authorEmail"}},
		{"an update above a dotted key", "update", doc, nil, upd(bson.D{{Key: "profile", Value: bson.D{}}}), []string{"handle"}},
		{"an update below a dotted key", "update", doc, nil, upd(bson.D{{Key: "profile.handle.x", Value: 1}}), []string{"handle"}},
		{"an update beside a dotted key", "update", doc, nil, upd(bson.D{{Key: "profile.name", Value: 1}, {Key: "emails", Value: 1}}), nil},
		{"a removed key", "update", doc, nil, upd(bson.D{}, "email"), []string{"authorEmail"}},
		{"an update whose document is gone", "update", nil, nil, upd(bson.D{{Key: "name", Value: "x"}}), []string{"authorEmail", "handle"}},
		{"an unreadable update description", "update", doc, nil, nil, []string{"authorEmail", "handle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unreached(deps, "app.users", tc.op, tc.doc, tc.before, tc.upd)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("unreached = %v, want %v", got, tc.want)
			}
		})
	}
}

func rawDoc(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
