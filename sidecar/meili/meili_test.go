package meili_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// The sink, on NewClient's client, posts batches as written, splits one
// over the payload limit and refuses a document alone over it; a 5xx or a
// dropped connection is FAILED, a wrong key CONFIG_INVALID.
func TestMeiliSinkPostsBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key", MaxPayloadBytes: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mc := meili.NewClient(srv.URL(), "key")
	job := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	dst := meili.NewSink(mc, job, sink.Unguarded, nil)
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	write := func(id int64, title string) sink.Write {
		_, raw, _ := bson.MarshalValue(id)
		v := bson.RawValue{Type: bson.TypeInt64, Value: raw}
		return sink.Write{SourceID: v, Doc: map[string]any{"id": id, "title": title, "tags": []any{"a", "é"}}}
	}
	send := func(b sink.Batch) ([]sink.DocFailure, error) {
		r, err := dst.Send(ctx, b)
		if err != nil {
			return nil, err
		}
		return dst.Wait(ctx, r)
	}

	t.Log("a batch is durable and reads back as written")
	var b sink.Batch
	for i := int64(1); i <= 20; i++ {
		b.Writes = append(b.Writes, write(i, fmt.Sprintf("title \"%d\"\n日本", i)))
	}
	if fails, err := send(b); err != nil || len(fails) > 0 {
		t.Fatalf("send: %v %v", fails, err)
	}
	var doc map[string]any
	if err := mc.Index("items").GetDocument(ctx, "7", nil, &doc); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(doc); string(got) != `{"id":7,"tags":["a","é"],"title":"title \"7\"\n日本"}` {
		t.Errorf("document 7 reads back as %s", got)
	}

	t.Log("a payload over the server's limit is split; a document alone over it is refused on its own")
	big := write(100, strings.Repeat("x", 5000))
	b = sink.Batch{Writes: []sink.Write{write(21, "a"), write(22, "b"), big, write(23, "c")}}
	fails, err := send(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(fails) != 1 || len(fails[0].Writes) != 1 || fails[0].Writes[0] != 2 || fails[0].Code != "payload_too_large" {
		t.Errorf("failures %+v, want the third write refused as payload_too_large", fails)
	}
	if err := mc.Index("items").GetDocument(ctx, "23", nil, &doc); err != nil {
		t.Errorf("document 23 after the split: %v", err)
	}

	t.Log("a 5xx and a dropped connection are FAILED (retried), nothing enqueued")
	for _, mode := range []meilitest.FailMode{meilitest.Fail5xx, meilitest.FailDrop} {
		srv.FailNextOn("POST /indexes/{uid}/documents", 1, mode)
		_, err := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(30, "z")}})
		var me *meili.Error
		if errs.CodeOf(err) != errs.Failed || !errors.As(err, &me) {
			t.Errorf("%s: error %v (code %s), want FAILED wrapping a *meili.Error", mode, err, errs.CodeOf(err))
		} else if mode == meilitest.Fail5xx && (me.Status != 503 || me.Code != "internal") {
			t.Errorf("%s: status %d code %q", mode, me.Status, me.Code)
		} else if mode == meilitest.FailDrop && me.Status != 0 {
			t.Errorf("%s: status %d, want none", mode, me.Status)
		}
	}
	if fails, err := send(sink.Batch{Writes: []sink.Write{write(30, "z")}}); err != nil || len(fails) > 0 {
		t.Fatalf("send after the failures: %v %v", fails, err)
	}

	t.Log("a wrong API key is CONFIG_INVALID")
	bad := meili.NewSink(meili.NewClient(srv.URL(), "wrong"), job, sink.Unguarded, nil)
	_, err = bad.Send(ctx, sink.Batch{Writes: []sink.Write{write(40, "k")}})
	if errs.CodeOf(err) != errs.ConfigInvalid {
		t.Errorf("wrong key: %v (code %s), want CONFIG_INVALID", err, errs.CodeOf(err))
	}
}

// Settings go to Meilisearch as written: a transform's, and a live index's
// copied into a reindex's index, every key kept (through meilisearch-go's
// Settings struct a false facetSearch was dropped, so a reindex turned it
// back on), and a misspelt key is refused at start, by name.
func TestSettingsGoToMeilisearchAsWritten(t *testing.T) {
	ctx, srv, mc := startMeili(t)
	settings := func(uid string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/indexes/"+uid+"/settings", nil)
		req.Header.Set("Authorization", "Bearer key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	declared := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id",
		Settings: map[string]any{"filterableAttributes": []any{"tags"}, "facetSearch": false}}
	if err := meili.NewSink(mc, declared, sink.Unguarded, nil).Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	live := settings("items")
	if live["facetSearch"] != false || fmt.Sprint(live["filterableAttributes"]) != "[tags]" {
		t.Fatalf("declared settings not applied as written: facetSearch %v, filterableAttributes %v", live["facetSearch"], live["filterableAttributes"])
	}

	// A job that declares none: its reindex copies the live index's.
	plain := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	staged, err := meili.NewSink(mc, plain, sink.Unguarded, nil).Stage(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer staged.Discard(ctx)
	if got := settings("items" + meili.ReindexSuffix); fmt.Sprint(got) != fmt.Sprint(live) {
		t.Fatalf("the reindex's index has settings\n%v\nthe live index\n%v", got, live)
	}

	misspelt := &jobdef.Job{Name: "other", Index: "other", PrimaryKey: "id",
		Settings: map[string]any{"filterableAtributes": []any{"tags"}}}
	err = meili.NewSink(mc, misspelt, sink.Unguarded, nil).Prepare(ctx)
	if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), "filterableAtributes") {
		t.Fatalf("want CONFIG_INVALID naming filterableAtributes, got %v", err)
	}
}

// A live index whose embedder has an API key cannot be copied by a swap
// reindex (Meilisearch returns the key redacted): the reindex refuses, by
// name, before it creates anything, and says what to do; in place it runs.
func TestReindexRefusesToCopyAnEmbedderKey(t *testing.T) {
	ctx, _, mc := startMeili(t)
	withKey := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id", Settings: map[string]any{
		"embedders": map[string]any{"plain": map[string]any{"source": "userProvided", "dimensions": 3},
			"remote": map[string]any{"source": "rest", "url": "http://127.0.0.1:9/embed", "apiKey": "secret",
				"request": map[string]any{"input": "{{text}}"}, "response": map[string]any{"embedding": "{{embedding}}"}}}}}
	if err := meili.NewSink(mc, withKey, sink.Unguarded, nil).Prepare(ctx); err != nil {
		t.Fatal(err)
	}

	plain := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	_, err := meili.NewSink(mc, plain, sink.Unguarded, nil).Stage(ctx, false)
	if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), `"remote"`) || !strings.Contains(err.Error(), "inplace") {
		t.Fatalf("want CONFIG_INVALID naming the embedder and the way out, got %v", err)
	}
	if _, err := mc.GetIndex(ctx, "items"+meili.ReindexSuffix); err == nil {
		t.Fatal("the reindex created its index before refusing")
	}

	inPlace := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id", Reindex: "inplace"}
	if _, err := meili.NewSink(mc, inPlace, sink.Unguarded, nil).Stage(ctx, false); err != nil {
		t.Fatalf("in place: %v", err)
	}
}

// startMeili starts a test Meilisearch with the master key "key" for the
// test, and returns a context bounding it and NewClient's client.
func startMeili(t *testing.T) (context.Context, *meilitest.Server, *meili.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return ctx, srv, meili.NewClient(srv.URL(), "key")
}
