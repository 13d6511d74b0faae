package meili

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// The id walk yields every document the index holds for the whole walk,
// though documents are deleted and added between its pages: deletes
// before the offset shift the pages back, and new documents take the
// docids they freed (meilitest orders and gives docids as Meilisearch
// does), shifting them on. Paging by offset alone misses documents here.
func TestKeysWalkIsExactWhileTheIndexChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mc := NewClient(srv.URL(), "key")
	defer mc.Close()

	for _, c := range []struct {
		name string
		// change is what happens after page p is yielded: ids to delete
		// (of those yielded so far) and ids to add.
		change func(p int, yielded []int64) (del, add []int64)
	}{
		{"deletes behind the walk", func(p int, y []int64) ([]int64, []int64) {
			return []int64{y[0], y[1]}, nil
		}},
		{"deletes behind, and new documents in the freed places", func(p int, y []int64) ([]int64, []int64) {
			return []int64{y[0], y[1], y[2]}, []int64{int64(1000 + 2*p), int64(1001 + 2*p)}
		}},
		{"the anchor itself deleted", func(p int, y []int64) ([]int64, []int64) {
			return []int64{y[len(y)-1], y[0]}, nil
		}},
		{"the whole page before deleted", func(p int, y []int64) ([]int64, []int64) {
			if p != 2 {
				return nil, nil
			}
			return y, nil // every id yielded so far: no anchor left
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			uid := fmt.Sprintf("walk_%x", len(c.name))
			s := NewSink(mc, &jobdef.Job{Name: uid, Index: uid, PrimaryKey: "id"}, sink.Unguarded, nil).(*Sink)
			if err := s.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			write := func(del, add []int64) {
				var ws []sink.Write
				for _, id := range del {
					ws = append(ws, sink.Write{SourceID: rawInt(id), Delete: true})
				}
				for _, id := range add {
					ws = append(ws, sink.Write{SourceID: rawInt(id), Doc: map[string]any{"id": id}})
				}
				if len(ws) == 0 {
					return
				}
				r, err := s.Send(ctx, sink.Batch{Writes: ws})
				if err != nil {
					t.Fatal(err)
				}
				if fails, err := s.Wait(ctx, r); err != nil || len(fails) > 0 {
					t.Fatal(fails, err)
				}
			}
			var initial []int64
			for i := int64(1); i <= 40; i++ {
				initial = append(initial, i)
			}
			write(nil, initial)

			var yielded []int64
			deleted := map[int64]bool{}
			got := map[int64]int{}
			p := 0
			err := s.walkKeys(ctx, 4, func(ids []bson.RawValue) error {
				for _, id := range ids {
					n := id.AsInt64()
					got[n]++
					yielded = append(yielded, n)
				}
				p++
				var live []int64
				for _, n := range yielded {
					if !deleted[n] {
						live = append(live, n)
					}
				}
				if len(live) < 4 {
					return nil
				}
				del, add := c.change(p, live)
				for _, n := range del {
					deleted[n] = true
				}
				write(del, add)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range initial {
				if !deleted[n] && got[n] == 0 {
					t.Errorf("document %d was held all along and never yielded (yielded %v)", n, yielded)
				}
			}
			for n, k := range got {
				if k > 1 && c.name != "the whole page before deleted" {
					t.Errorf("document %d yielded %d times", n, k)
				}
			}
		})
	}
}

func rawInt(n int64) bson.RawValue {
	typ, b, _ := bson.MarshalValue(n)
	return bson.RawValue{Type: typ, Value: b}
}

// An index nobody changes is walked in one read per page: the anchor of
// each page is where the page before ended.
func TestKeysWalkOfAStillIndexReadsEachPageOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mc := NewClient(srv.URL(), "key")
	defer mc.Close()
	s := NewSink(mc, &jobdef.Job{Name: "still", Index: "still", PrimaryKey: "id"}, sink.Unguarded, nil).(*Sink)
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	var ws []sink.Write
	for i := int64(1); i <= 41; i++ {
		ws = append(ws, sink.Write{SourceID: rawInt(i), Doc: map[string]any{"id": i}})
	}
	r, err := s.Send(ctx, sink.Batch{Writes: ws})
	if err != nil {
		t.Fatal(err)
	}
	if fails, err := s.Wait(ctx, r); err != nil || len(fails) > 0 {
		t.Fatal(fails, err)
	}
	before := srv.Requests("POST /indexes/{uid}/documents/fetch")
	n := 0
	if err := s.walkKeys(ctx, 4, func(ids []bson.RawValue) error { n += len(ids); return nil }); err != nil {
		t.Fatal(err)
	}
	if reads := srv.Requests("POST /indexes/{uid}/documents/fetch") - before; n != 41 || reads != 11 {
		t.Errorf("walked %d ids in %d reads, want 41 in 11", n, reads)
	}
}
