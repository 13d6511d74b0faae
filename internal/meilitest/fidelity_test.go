package meilitest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/meilistream/meilistream/internal/meilitest"
)

// raw sends a request and decodes the JSON answer.
func raw(t *testing.T, srv *meilitest.Server, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, srv.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %s", method, path, b)
		}
	}
	return resp.StatusCode, m
}

func keys(m map[string]any) map[string]bool {
	k := map[string]bool{}
	for n := range m {
		k[n] = true
	}
	return k
}

// The summarized task of a 202 is exactly {taskUid, indexUid, status,
// type, enqueuedAt} (meilisearch-types tasks.rs TaskView /
// SummarizedTaskView); a global task's indexUid is null.
func TestSummarizedTaskShape(t *testing.T) {
	srv, _ := start(t, meilitest.Options{})
	code, m := raw(t, srv, "POST", "/indexes/a/documents", `[{"id":1}]`)
	want := []string{"taskUid", "indexUid", "status", "type", "enqueuedAt"}
	if code != 202 || len(m) != len(want) {
		t.Fatalf("%d %v", code, m)
	}
	for _, k := range want {
		if !keys(m)[k] {
			t.Fatalf("no %s in %v", k, m)
		}
	}
	if m["status"] != "enqueued" || m["type"] != "documentAdditionOrUpdate" || m["indexUid"] != "a" {
		t.Fatalf("%v", m)
	}
	if _, err := time.Parse(time.RFC3339Nano, m["enqueuedAt"].(string)); err != nil {
		t.Fatal(err)
	}
	code, m = raw(t, srv, "POST", "/swap-indexes", `[{"indexes":["a","b"]}]`)
	if code != 202 || m["indexUid"] != nil || !keys(m)["indexUid"] || m["type"] != "indexSwap" {
		t.Fatalf("%d %v", code, m)
	}
}

// Swapping with a missing index is accepted (202) and the task fails with
// index_not_found; every missing index is named, sorted, before a rename
// onto an existing index is reported (process_batch.rs Batch::IndexSwap).
// The details keep the swaps as sent, with rename.
func TestSwapFailureOrderAndDetails(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "live"}))
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "other"}))
	task := failed(t, c, "index_not_found")(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"live", "zeta"}}}))
	if task.Error.Message != "Index `zeta` not found." || task.Type != meilisearch.TaskTypeIndexSwap {
		t.Fatalf("%+v", task)
	}
	// A rename onto an existing index and two missing ones: not found
	// wins, sorted.
	task = failed(t, c, "index_not_found")(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{
		{Indexes: []string{"live", "other"}, Rename: true},
		{Indexes: []string{"zz", "mm"}},
	}))
	if task.Error.Message != "Indexes `mm`, `zz` not found." {
		t.Fatalf("%q", task.Error.Message)
	}
	_, m := raw(t, srv, "GET", "/tasks/"+itoa(task.UID), "")
	d, _ := m["details"].(map[string]any)
	sw, _ := d["swaps"].([]any)
	if len(sw) != 2 {
		t.Fatalf("details %v", m["details"])
	}
	first := sw[0].(map[string]any)
	if first["rename"] != true || len(first["indexes"].([]any)) != 2 {
		t.Fatalf("details %v", m["details"])
	}
	// Index deletion: type indexDeletion, details.deletedDocuments.
	succeeded(t, c)(c.Index("live").AddDocuments(ctx, []map[string]any{{"id": 1}, {"id": 2}}, nil))
	task = succeeded(t, c)(c.DeleteIndex(ctx, "live"))
	if task.Type != meilisearch.TaskTypeIndexDeletion || task.Details.DeletedDocuments != 2 || task.IndexUID != "live" {
		t.Fatalf("%+v", task)
	}
	failed(t, c, "index_not_found")(c.DeleteIndex(ctx, "live"))
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// chat and foreignKeys need experimental features (off by default):
// Meilisearch refuses them in PATCH settings with feature_not_enabled
// (routes/indexes/settings.rs validate_settings); null is a reset, allowed.
// GET settings shows them only while their feature is on (get_all).
// vectorStore is no setting of v1.50 (its Settings struct lists none).
func TestExperimentalSettingsRefused(t *testing.T) {
	srv, _ := start(t, meilitest.Options{})
	code, m := raw(t, srv, "PATCH", "/indexes/a/settings", `{"chat":{"description":"x"}}`)
	if code != 400 || m["code"] != "feature_not_enabled" || m["type"] != "invalid_request" {
		t.Fatalf("%d %v", code, m)
	}
	code, m = raw(t, srv, "PATCH", "/indexes/a/settings", `{"foreignKeys":[{"fieldName":"a","foreignIndexUid":"b"}]}`)
	if code != 400 || m["code"] != "feature_not_enabled" || !strings.Contains(m["message"].(string), "`foreign_keys`") {
		t.Fatalf("%d %v", code, m)
	}
	code, m = raw(t, srv, "PATCH", "/indexes/a/settings", `{"vectorStore":"experimental"}`)
	if code != 400 || m["code"] != "bad_request" {
		t.Fatalf("%d %v", code, m)
	}
	if code, m = raw(t, srv, "PATCH", "/indexes/a/settings", `{"chat":null}`); code != 202 {
		t.Fatalf("%d %v", code, m)
	}
	waitIdle(t, srv)
	if code, m = raw(t, srv, "GET", "/indexes/a/settings", ``); code != 200 || m["chat"] != nil || m["foreignKeys"] != nil {
		t.Fatalf("hidden while the features are off: %d %v", code, m)
	}
	if code, m = raw(t, srv, "PATCH", "/experimental-features", `{"chatCompletions":true,"foreignKeys":true}`); code != 200 || m["chatCompletions"] != true || m["metrics"] != false || m["legacySearch"] != nil {
		t.Fatalf("enable: %d %v", code, m)
	}
	if code, m = raw(t, srv, "PATCH", "/indexes/a/settings", `{"chat":{"description":"books"},"foreignKeys":[{"fieldName":"author","foreignIndexUid":"authors"}]}`); code != 202 {
		t.Fatalf("%d %v", code, m)
	}
	waitIdle(t, srv)
	code, m = raw(t, srv, "GET", "/indexes/a/settings", ``)
	chat, _ := m["chat"].(map[string]any)
	if code != 200 || chat["description"] != "books" || chat["documentTemplateMaxBytes"] != 400.0 || len(m["foreignKeys"].([]any)) != 1 {
		t.Fatalf("with the features on: %d %v", code, m)
	}
}

// What the sink does to stage a reindex: GET the live settings and PATCH
// them onto a fresh index through meilisearch-go's Settings struct. The
// copy must succeed and read back the same.
func TestSettingsCopyRoundTrip(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	distinct := "sku"
	succeeded(t, c)(c.Index("live").UpdateSettings(ctx, &meilisearch.Settings{
		FilterableAttributes: []string{"a", "b"}, SortableAttributes: []string{"n"},
		SearchableAttributes: []string{"title", "body"}, DistinctAttribute: &distinct,
		StopWords: []string{"the"}, Synonyms: map[string][]string{"car": {"auto"}},
		Pagination: &meilisearch.Pagination{MaxTotalHits: 5000},
	}))
	set, err := c.Index("live").GetSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded(t, c)(c.Index("tmp").UpdateSettings(ctx, set))
	got, err := c.Index("tmp").GetSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(set)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("copy differs:\n%s\n%s", a, b)
	}
}

// An internal error fails the whole autobatched batch (every task, the
// same error, nothing applied); a document error fails only its task.
func TestInternalErrorFailsTheWholeBatch(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("b")
	srv.PauseTasks()
	var infos []*meilisearch.TaskInfo
	for i := range 3 {
		info, err := ix.AddDocuments(ctx, []map[string]any{{"id": i}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	srv.FailNextTask("internal", "disk on fire")
	srv.ResumeTasks()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		task, err := c.GetTask(ctx, info.TaskUID)
		if err != nil || task.Status != meilisearch.TaskStatusFailed || task.Error.Code != "internal" || task.Error.Message != "disk on fire" {
			t.Fatalf("task %d: %+v %v", info.TaskUID, task, err)
		}
	}
	if d := srv.Documents("b"); len(d) != 0 {
		t.Fatalf("documents after a failed batch: %v", d)
	}
	srv.PauseTasks()
	infos = infos[:0]
	for i := range 3 {
		info, _ := ix.AddDocuments(ctx, []map[string]any{{"id": i}}, nil)
		infos = append(infos, info)
	}
	srv.FailNextTask("invalid_document_id", "bad id")
	srv.ResumeTasks()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	var statuses []meilisearch.TaskStatus
	for _, info := range infos {
		task, _ := c.GetTask(ctx, info.TaskUID)
		statuses = append(statuses, task.Status)
	}
	if statuses[0] != meilisearch.TaskStatusFailed || statuses[1] != meilisearch.TaskStatusSucceeded || statuses[2] != meilisearch.TaskStatusSucceeded {
		t.Fatalf("document error: %v", statuses)
	}
}

// With _geo sortable or filterable, a bad _geo fails the task with
// invalid_document_geo_field and the messages of Meilisearch's own test
// (crates/meilisearch/tests/documents/add_documents.rs
// add_documents_invalid_geo_field); being an indexing error it fails every
// task of its batch. Without geo settings _geo is not checked.
func TestInvalidGeoField(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	pk := "id"
	succeeded(t, c)(c.Index("plain").AddDocuments(ctx, []map[string]any{{"id": "1", "_geo": "bad"}}, &meilisearch.DocumentOptions{PrimaryKey: &pk}))
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "test", PrimaryKey: "id"}))
	succeeded(t, c)(c.Index("test").UpdateSettings(ctx, &meilisearch.Settings{SortableAttributes: []string{"_geo"}}))
	for _, tc := range []struct {
		geo  any
		want string
	}{
		{"foobar", "Index `test`: The `_geo` field in the document with the id: `\"11\"` is not an object. Was expecting an object with the `_geo.lat` and `_geo.lng` fields but instead got `\"foobar\"`."},
		{map[string]any{}, "Index `test`: Could not find latitude nor longitude in the document with the id: `\"11\"`. Was expecting `_geo.lat` and `_geo.lng` fields."},
		{map[string]any{"doggos": "are good"}, "Index `test`: Could not find latitude nor longitude in the document with the id: `\"11\"`. Was expecting `_geo.lat` and `_geo.lng` fields."},
		{map[string]any{"lat": 12}, "Index `test`: Could not find longitude in the document with the id: `\"11\"`. Was expecting a `_geo.lng` field."},
		{map[string]any{"lng": true}, "Index `test`: Could not find latitude in the document with the id: `\"11\"`. Was expecting a `_geo.lat` field."},
		{map[string]any{"lat": false, "lng": true}, "Index `test`: Could not parse latitude nor longitude in the document with the id: `\"11\"`. Was expecting finite numbers but instead got `false` and `true`."},
		{map[string]any{"lat": "doggo", "lng": 1}, "Index `test`: Could not parse latitude in the document with the id: `\"11\"`. Was expecting a finite number but instead got `\"doggo\"`."},
	} {
		task := failed(t, c, "invalid_document_geo_field")(c.Index("test").AddDocuments(ctx, []map[string]any{{"id": "11", "_geo": tc.geo}}, nil))
		if task.Error.Message != tc.want || task.Details.IndexedDocuments != 0 {
			t.Errorf("_geo %v:\n got %q\nwant %q", tc.geo, task.Error.Message, tc.want)
		}
	}
	succeeded(t, c)(c.Index("test").AddDocuments(ctx, []map[string]any{{"id": "1", "_geo": nil}, {"id": "2", "_geo": map[string]any{"lat": "1", "lng": "1.5"}}}, nil))

	// One bad document fails its whole batch.
	srv.PauseTasks()
	var infos []*meilisearch.TaskInfo
	for i, geo := range []any{map[string]any{"lat": 1, "lng": 2}, "bad", map[string]any{"lat": 3, "lng": 4}} {
		info, err := c.Index("test").AddDocuments(ctx, []map[string]any{{"id": 10 + i, "_geo": geo}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	srv.ResumeTasks()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		task, _ := c.GetTask(ctx, info.TaskUID)
		if task.Status != meilisearch.TaskStatusFailed || task.Error.Code != "invalid_document_geo_field" {
			t.Fatalf("task %d of the batch: %+v", info.TaskUID, task)
		}
	}
	if n := len(srv.Documents("test")); n != 2 {
		t.Fatalf("%d documents after the failed batch", n)
	}
}
