package meili_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// batchOf is a batch of one document with a title of size bytes.
func batchOf(id int64, size int) sink.Batch {
	_, raw, _ := bson.MarshalValue(id)
	v := bson.RawValue{Type: bson.TypeInt64, Value: raw}
	return sink.Batch{Writes: []sink.Write{{SourceID: v, Doc: map[string]any{"id": id, "title": strings.Repeat("x", size)}}}}
}

// A send that would take the job over its bounds of tasks or bytes
// enqueued in the index waits until Meilisearch has processed the oldest;
// one always goes when nothing is enqueued.
func TestTheSinkKeepsWhatIsEnqueuedUnderItsBounds(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  meili.Options
		size  int
		fit   int // sends that go at once
		after string
	}{
		{"tasks", meili.Options{MaxEnqueuedTasks: 3}, 10, 3, "three tasks"},
		{"bytes", meili.Options{MaxEnqueuedBytes: 2500}, 1000, 2, "two requests of about 1 KB"},
		{"one request larger than the bound alone", meili.Options{MaxEnqueuedBytes: 100}, 1000, 1, "one request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := meilitest.Start(meilitest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			mc := meili.NewClientWithOptions(srv.URL(), "", c.opts)
			defer mc.Close()
			dst := meili.NewSink(mc, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
			if err := dst.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			srv.PauseTasks()
			var receipts []sink.Receipt
			for i := 0; i < c.fit; i++ {
				r, err := dst.Send(ctx, batchOf(int64(i), c.size))
				if err != nil {
					t.Fatal(err)
				}
				receipts = append(receipts, r)
			}
			if tasks, bytes, _ := dst.Enqueued(); tasks != c.fit || bytes < int64(c.fit*c.size) {
				t.Fatalf("enqueued %d tasks, %d bytes after %s", tasks, bytes, c.after)
			}
			sent := make(chan error, 1)
			go func() {
				r, err := dst.Send(ctx, batchOf(100, c.size))
				receipts = append(receipts, r)
				sent <- err
			}()
			select {
			case err := <-sent:
				t.Fatalf("a send over the bound went at once (%v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			srv.ResumeTasks()
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			for _, r := range receipts {
				if fails, err := dst.Wait(ctx, r); err != nil || len(fails) > 0 {
					t.Fatalf("wait: %v %v", fails, err)
				}
			}
			if tasks, bytes, _ := dst.Enqueued(); tasks != 0 || bytes != 0 {
				t.Fatalf("enqueued %d tasks, %d bytes once every task is processed", tasks, bytes)
			}
			if n := len(srv.Documents("items")); n != c.fit+1 {
				t.Fatalf("the index holds %d documents, want %d", len(srv.Documents("items")), c.fit+1)
			}
		})
	}
}

// The staged index of a reindex has bounds of its own, and the job's
// queue is the sum of both.
func TestTheStagedIndexIsCountedApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mc := meili.NewClientWithOptions(srv.URL(), "", meili.Options{MaxEnqueuedTasks: 1})
	defer mc.Close()
	dst := meili.NewSink(mc, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id", Reindex: "swap"}, sink.Unguarded, nil)
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	staged, err := dst.Stage(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	srv.PauseTasks()
	if _, err := dst.Send(ctx, batchOf(1, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := staged.Send(ctx, batchOf(1, 10)); err != nil {
		t.Fatal(err)
	}
	if tasks, _, _ := dst.Enqueued(); tasks != 2 {
		t.Fatalf("the job's queue holds %d tasks, want 2 (one per index)", tasks)
	}
	srv.ResumeTasks()
}
