package meili_test

import (
	"encoding/json"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// Fetch reads documents back by their source _ids, whatever the _id's
// type, aligned with the ids asked for (nil for one the index lacks),
// through NewClient's client; Keys walks the same ids back.
func TestFetchReadsDocumentsBackBySourceID(t *testing.T) {
	ctx, _, nc := startMeili(t)
	for name, mc := range map[string]*meili.Client{"NewClient": nc} {
		t.Run(name, func(t *testing.T) {
			job := &jobdef.Job{Name: "f" + name[:3], Index: "fetch_" + name[:3], PrimaryKey: "id"}
			dst := meili.NewSink(mc, job, sink.Unguarded, nil)
			if err := dst.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			oid, _ := bson.ObjectIDFromHex("65a1b2c3d4e5f60718293a4b")
			ids := []bson.RawValue{testutil.RawValue(t, int64(7)), testutil.RawValue(t, "sku-1"), testutil.RawValue(t, oid), testutil.RawValue(t, "needs encoding!")}
			var writes []sink.Write
			for i, id := range ids {
				key, err := jobdef.IndexID(id)
				if err != nil {
					t.Fatal(err)
				}
				writes = append(writes, sink.Write{SourceID: id, Doc: map[string]any{"id": key, "n": i}})
			}
			r, err := dst.Send(ctx, sink.Batch{Writes: writes})
			if err != nil {
				t.Fatal(err)
			}
			if fails, err := dst.Wait(ctx, r); err != nil || len(fails) > 0 {
				t.Fatal(fails, err)
			}
			asked := append([]bson.RawValue{testutil.RawValue(t, int64(8))}, ids...)
			got, err := dst.Fetch(ctx, asked)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(asked) || got[0] != nil {
				t.Fatalf("Fetch = %q, want %d documents, the first nil", got, len(asked))
			}
			for i, d := range got[1:] {
				var doc struct{ N int }
				if err := json.Unmarshal(d, &doc); err != nil || doc.N != i {
					t.Errorf("Fetch of %v = %s, want n %d", ids[i], d, i)
				}
			}
			var walked int
			if err := dst.Keys(ctx, func(page []bson.RawValue) error { walked += len(page); return nil }); err != nil || walked != len(ids) {
				t.Fatalf("Keys walked %d ids (%v), want %d", walked, err, len(ids))
			}
		})
	}
}

// A read back matches documents to the ids asked for by their primary
// key's JSON text, and by the _id it stands for when the key was written
// in another form (the string "7" for the integer 7, one id to
// Meilisearch); an id asked for twice gets its document at both places.
func TestFetchMatchesAKeyWrittenInAnotherFormAndAnIDAskedTwice(t *testing.T) {
	ctx, _, mc := startMeili(t)
	job := &jobdef.Job{Name: "forms", Index: "fetch_forms", PrimaryKey: "id"}
	dst := meili.NewSink(mc, job, sink.Unguarded, nil)
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	id7, sku := testutil.RawValue(t, int64(7)), testutil.RawValue(t, "sku-1")
	r, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{
		{SourceID: id7, Doc: map[string]any{"id": "7", "n": 7}},
		{SourceID: sku, Doc: map[string]any{"id": "sku-1", "n": 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if fails, err := dst.Wait(ctx, r); err != nil || len(fails) > 0 {
		t.Fatal(fails, err)
	}
	got, err := dst.Fetch(ctx, []bson.RawValue{sku, id7, sku, id7})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{1, 7, 1, 7}
	if len(got) != len(want) {
		t.Fatalf("Fetch = %q, want %d documents", got, len(want))
	}
	for i, d := range got {
		var doc struct{ N int }
		if err := json.Unmarshal(d, &doc); err != nil || doc.N != want[i] {
			t.Errorf("Fetch's document %d = %s, want n %d", i, d, want[i])
		}
	}
}
