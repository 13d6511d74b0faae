package meilitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/meilistream/meilistream/internal/meilitest"
)

func waitIdle(t *testing.T, srv *meilitest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

// rawAny sends a request and decodes any JSON answer.
func rawAny(t *testing.T, srv *meilitest.Server, method, path, body string) (int, any) {
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
	var v any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s %s: %s", method, path, b)
		}
	}
	return resp.StatusCode, v
}

func asJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// Each setting has its own route, /indexes/{uid}/settings/<kebab-name>,
// with GET, its update verb (PUT, or PATCH for the object settings) and
// DELETE, as make_setting_routes! in routes/indexes/settings.rs declares
// them; an update is a settingsUpdate task, null or DELETE resets, and the
// other verb is 405.
func TestPerSettingRoutes(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "books"}))
	for _, tc := range []struct{ route, verb, body, want, def string }{
		{"stop-words", "PUT", `["the","a"]`, `["a","the"]`, `[]`},
		{"synonyms", "PUT", `{"car":["auto"]}`, `{"car":["auto"]}`, `{}`},
		{"distinct-attribute", "PUT", `"sku"`, `"sku"`, `null`},
		{"search-cutoff-ms", "PUT", `150`, `150`, `null`},
		{"facet-search", "PUT", `false`, `false`, `true`},
		{"filterable-attributes", "PUT", `["genre"]`, `["genre"]`, `[]`},
		{"typo-tolerance", "PATCH", `{"enabled":false}`, `{"disableOnAttributes":[],"disableOnNumbers":false,"disableOnWords":[],"enabled":false,"minWordSizeForTypos":{"oneTypo":5,"twoTypos":9}}`, ``},
		{"pagination", "PATCH", `{"maxTotalHits":50}`, `{"maxTotalHits":50}`, `{"maxTotalHits":1000}`},
	} {
		path := "/indexes/books/settings/" + tc.route
		if code, v := rawAny(t, srv, tc.verb, path, tc.body); code != 202 || v.(map[string]any)["type"] != "settingsUpdate" {
			t.Fatalf("%s %s: %d %v", tc.verb, path, code, v)
		}
		waitIdle(t, srv)
		code, v := rawAny(t, srv, "GET", path, "")
		if got := asJSON(v); code != 200 || (got != tc.want && !strings.Contains(tc.want, "minWordSizeForTypos")) {
			t.Fatalf("GET %s after the update: %d %s, want %s", path, code, got, tc.want)
		}
		other := "PATCH"
		if tc.verb == "PATCH" {
			other = "PUT"
		}
		if code, _ := rawAny(t, srv, other, path, tc.body); code != 405 {
			t.Fatalf("%s %s: %d, want 405", other, path, code)
		}
		if code, _ := rawAny(t, srv, "DELETE", path, ""); code != 202 {
			t.Fatalf("DELETE %s: %d", path, code)
		}
		waitIdle(t, srv)
		if tc.def != "" {
			if _, v := rawAny(t, srv, "GET", path, ""); asJSON(v) != tc.def {
				t.Fatalf("GET %s after DELETE: %s, want %s", path, asJSON(v), tc.def)
			}
		}
	}
	// A wrong type: the setting's own error code, nothing enqueued.
	code, v := rawAny(t, srv, "PUT", "/indexes/books/settings/stop-words", `"the"`)
	if m, _ := v.(map[string]any); code != 400 || m["code"] != "invalid_settings_stop_words" {
		t.Fatalf("a string for stop words: %d %v", code, v)
	}
	// The update creates a missing index, as PATCH /settings does; GET of a
	// missing index is 404.
	if code, _ := rawAny(t, srv, "GET", "/indexes/nope/settings/stop-words", ""); code != 404 {
		t.Fatalf("GET on a missing index: %d", code)
	}
	rawAny(t, srv, "PUT", "/indexes/fresh/settings/sortable-attributes", `["year"]`)
	waitIdle(t, srv)
	if got, err := c.Index("fresh").GetSortableAttributes(ctx); err != nil || len(*got) != 1 {
		t.Fatalf("the index created by a setting route: %v %v", got, err)
	}
	// The clients' helpers work against them.
	succeeded(t, c)(c.Index("books").UpdateRankingRules(ctx, &[]string{"words", "sort"}))
	if rr, err := c.Index("books").GetRankingRules(ctx); err != nil || len(*rr) != 2 {
		t.Fatalf("ranking rules: %v %v", rr, err)
	}
	succeeded(t, c)(c.Index("books").ResetRankingRules(ctx))
	// chat needs its feature even on its own route; GET shows it anyway.
	if code, v := rawAny(t, srv, "PATCH", "/indexes/books/settings/chat", `{"description":"x"}`); code != 400 || v.(map[string]any)["code"] != "feature_not_enabled" {
		t.Fatalf("chat without the feature: %d %v", code, v)
	}
	if code, v := rawAny(t, srv, "GET", "/indexes/books/settings/chat", ""); code != 200 || v.(map[string]any)["documentTemplateMaxBytes"] != 400.0 {
		t.Fatalf("chat default: %d %v", code, v)
	}
}

// POST /tasks/cancel and DELETE /tasks register a taskCancelation or
// taskDeletion (200, indexUid null) that runs before every other queued
// task: the cancelation cancels the selected tasks still enqueued (status
// canceled, canceledBy), the deletion removes the selected finished ones.
// Without a filter both are 400 missing_task_filters (routes/tasks.rs).
func TestCancelAndDeleteTasks(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	if code, v := rawAny(t, srv, "POST", "/tasks/cancel", ""); code != 400 || v.(map[string]any)["code"] != "missing_task_filters" {
		t.Fatalf("cancel without filters: %d %v", code, v)
	}
	if code, v := rawAny(t, srv, "DELETE", "/tasks", ""); code != 400 || v.(map[string]any)["code"] != "missing_task_filters" {
		t.Fatalf("delete without filters: %d %v", code, v)
	}
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "a", PrimaryKey: "id"})) // task 0
	srv.PauseTasks()
	info1, _ := c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 1}}, nil) // 1
	info2, _ := c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 2}}, nil) // 2
	code, v := rawAny(t, srv, "POST", "/tasks/cancel?uids=1&statuses=enqueued", "")
	m, _ := v.(map[string]any)
	if code != 200 || m["type"] != "taskCancelation" || m["indexUid"] != nil || m["taskUid"] != 3.0 {
		t.Fatalf("cancel: %d %v", code, v)
	}
	srv.ResumeTasks()
	waitIdle(t, srv)
	canceled, err := c.GetTask(ctx, info1.TaskUID)
	if err != nil || canceled.Status != meilisearch.TaskStatusCanceled || canceled.CanceledBy != 3 {
		t.Fatalf("task 1: %+v %v", canceled, err)
	}
	if ran, _ := c.GetTask(ctx, info2.TaskUID); ran.Status != meilisearch.TaskStatusSucceeded {
		t.Fatalf("task 2, not selected: %+v", ran)
	}
	cancel, _ := c.GetTask(ctx, 3)
	if cancel.Status != meilisearch.TaskStatusSucceeded || cancel.Details.MatchedTasks != 1 || cancel.Details.CanceledTasks != 1 || cancel.Details.OriginalFilter != "?uids=1&statuses=enqueued" {
		t.Fatalf("cancelation task: %+v", cancel)
	}
	// The cancelation ran before task 2 (it had priority), so the document
	// of task 1 never landed.
	if docs := srv.Documents("a"); len(docs) != 1 {
		t.Fatalf("documents after the cancel: %v", docs)
	}

	// Delete the finished document tasks: tasks 1 and 2 go, the queue's
	// are left alone.
	code, v = rawAny(t, srv, "DELETE", "/tasks?types=documentAdditionOrUpdate", "")
	if m, _ := v.(map[string]any); code != 200 || m["type"] != "taskDeletion" {
		t.Fatalf("delete: %d %v", code, v)
	}
	waitIdle(t, srv)
	for _, uid := range []int64{1, 2} {
		if _, err := c.GetTask(ctx, uid); err == nil || !strings.Contains(err.Error(), "task_not_found") {
			t.Fatalf("task %d after the deletion: %v", uid, err)
		}
	}
	del, _ := c.GetTask(ctx, 4)
	if del.Details.MatchedTasks != 2 || del.Details.DeletedTasks != 2 {
		t.Fatalf("deletion task: %+v", del.Details)
	}
	list, err := c.GetTasks(ctx, &meilisearch.TasksQuery{})
	if err != nil || list.Total != 3 {
		t.Fatalf("tasks left: %+v %v", list, err)
	}
}

// A cancelation that selects the batch being processed stops it, as
// Meilisearch's scheduler does (must_stop_processing): its tasks end
// canceled, never applied.
func TestCancelInterruptsTheProcessingBatch(t *testing.T) {
	srv, c := start(t, meilitest.Options{TaskDelay: 2 * time.Second})
	ctx := ctxT(t)
	info, err := c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		task, _ := c.GetTask(ctx, info.TaskUID)
		if task != nil && task.Status == meilisearch.TaskStatusProcessing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never started processing: %+v", task)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.CancelTasks(ctx, &meilisearch.CancelTasksQuery{UIDS: []int64{info.TaskUID}}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, srv)
	task, _ := c.GetTask(ctx, info.TaskUID)
	if task.Status != meilisearch.TaskStatusCanceled {
		t.Fatalf("the processing task: %+v", task)
	}
	if docs := srv.Documents("a"); len(docs) != 0 {
		t.Fatalf("a canceled addition was applied: %v", docs)
	}
}

// GET /batches and GET /batches/{uid} show the batches the tasks were
// processed in (BatchView: uid, progress, details, stats, duration,
// startedAt, finishedAt, batchStrategy); consecutive document writes to an
// index share one.
func TestBatches(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "a", PrimaryKey: "id"}))
	srv.PauseTasks()
	c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 1}, {"id": 2}}, nil)
	c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 3}}, nil)
	srv.ResumeTasks()
	waitIdle(t, srv)
	res, err := c.GetBatches(ctx, nil)
	if err != nil || res.Total != 2 || len(res.Results) != 2 {
		t.Fatalf("batches: %+v %v", res, err)
	}
	docs := res.Results[0]
	if docs.UID != 1 || docs.Stats.TotalNbTasks != 2 || docs.Stats.Status["succeeded"] != 2 || docs.Stats.Types["documentAdditionOrUpdate"] != 2 ||
		docs.Stats.IndexedUIDs["a"] != 2 || docs.Details["receivedDocuments"] != 3.0 || docs.BatchStrategy == "" || docs.Duration == "" {
		t.Fatalf("the documents batch: %+v %+v", docs, docs.Stats)
	}
	one, err := c.GetBatch(ctx, 0)
	if err != nil || one.Stats.Types["indexCreation"] != 1 || one.FinishedAt.IsZero() {
		t.Fatalf("batch 0: %+v %v", one, err)
	}
	if _, err := c.GetBatch(ctx, 9); err == nil || !strings.Contains(err.Error(), "batch_not_found") {
		t.Fatalf("batch 9: %v", err)
	}
	if only, err := c.GetBatches(ctx, &meilisearch.BatchesQuery{Types: []string{"indexCreation"}}); err != nil || only.Total != 1 || only.Results[0].UID != 0 {
		t.Fatalf("batches of index creations: %+v %v", only, err)
	}
	if code, v := rawAny(t, srv, "GET", "/tasks/2", ""); code != 200 || v.(map[string]any)["batchUid"] != 1.0 {
		t.Fatalf("task 2: %v", v)
	}
}

// GET /experimental-features lists every runtime feature; PATCH changes
// the ones given and answers the whole set (routes/features.rs).
func TestExperimentalFeatures(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	got, err := c.ExperimentalFeatures().Get(ctx)
	if err != nil || got.ChatCompletions || got.Metrics {
		t.Fatalf("defaults: %+v %v", got, err)
	}
	upd, err := c.ExperimentalFeatures().SetChatCompletions(true).SetMetrics(true).Update(ctx)
	if err != nil || !upd.ChatCompletions || !upd.Metrics || upd.ForeignKeys {
		t.Fatalf("update: %+v %v", upd, err)
	}
	if got, _ := c.ExperimentalFeatures().Get(ctx); !got.ChatCompletions {
		t.Fatalf("after the update: %+v", got)
	}
}

// nested builds {"id":1,"v":{"v":...{}}} with levels containers in all,
// the document itself counted.
func nested(levels int) string {
	return `{"id":1,"v":` + strings.Repeat(`{"v":`, levels-2) + `{}` + strings.Repeat(`}`, levels-2) + `}`
}

// How deep documents may nest follows Meilisearch: a payload that is one
// object is parsed under serde_json's recursion limit (the 128th container
// is refused, malformed_payload); an array or NDJSON payload is read as raw
// values, which serde_json skips without a depth limit (this server stops
// at 10000 levels), but indexing parses each searchable or faceted field
// under the same limit, so a field nested 128 containers deep fails the
// task with an internal error, and an unindexed one does not.
func TestDocumentNestingLimits(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	post := func(uid, ct, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL()+"/indexes/"+uid+"/documents", strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	task := func(m map[string]any) *meilisearch.Task {
		t.Helper()
		waitIdle(t, srv)
		tk, err := c.GetTask(ctxT(t), int64(m["taskUid"].(float64)))
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	if code, m := post("deep", "application/json", nested(127)); code != 202 || task(m).Status != meilisearch.TaskStatusSucceeded {
		t.Fatalf("one object, 127 levels: %d %v", code, m)
	}
	code, m := post("deep", "application/json", nested(128))
	if code != 400 || m["code"] != "malformed_payload" || !strings.Contains(m["message"].(string), "recursion limit exceeded") {
		t.Fatalf("one object, 128 levels: %d %v", code, m)
	}
	if code, m := post("deep", "application/json", "["+nested(128)+"]"); code != 202 || task(m).Status != meilisearch.TaskStatusSucceeded {
		t.Fatalf("an array, 128 levels (its field 127): %d %v", code, m)
	}
	for _, p := range []struct{ ct, body string }{
		{"application/json", "[" + nested(129) + "]"},
		{"application/json", "[" + nested(600) + "]"},
		{"application/x-ndjson", nested(600) + "\n"},
	} {
		code, m := post("deep", p.ct, p.body)
		if code != 202 {
			t.Fatalf("%s, %d bytes: %d %v", p.ct, len(p.body), code, m)
		}
		// The field's value opens a container every 5 bytes ({"v":): the
		// 128th at byte 635, serde_json's column 636.
		tk := task(m)
		if tk.Status != meilisearch.TaskStatusFailed || tk.Error.Code != "internal" ||
			tk.Error.Message != "Index `deep`: internal: recursion limit exceeded at line 1 column 636." {
			t.Fatalf("%s, %d bytes: task %s %s %q", p.ct, len(p.body), tk.Status, tk.Error.Code, tk.Error.Message)
		}
	}
	// A field neither searchable nor faceted is never parsed.
	succeeded(t, c)(c.Index("shallow").UpdateSettings(ctxT(t), &meilisearch.Settings{SearchableAttributes: []string{"id"}}))
	if code, m := post("shallow", "application/json", "["+nested(600)+"]"); code != 202 || task(m).Status != meilisearch.TaskStatusSucceeded {
		t.Fatalf("an unindexed field, 600 levels: %d %v", code, m)
	}
	if code, m := post("deep", "application/json", "["+nested(10003)+"]"); code != 400 || m["code"] != "malformed_payload" {
		t.Fatalf("an array, 10003 levels: %d %v", code, m)
	}
}

// A proxy with a body limit in front of the server (ProxyBodyLimit)
// answers a larger body 413 with its HTML page, whatever the route, and
// Meilisearch never sees it; smaller bodies go through.
func TestProxyBodyLimit(t *testing.T) {
	srv, c := start(t, meilitest.Options{ProxyBodyLimit: 1000})
	small := `[{"id":1,"t":"a"}]`
	big := `[{"id":2,"t":"` + strings.Repeat("x", 1000) + `"}]`
	for _, chunked := range []bool{false, true} {
		post := func(body string) (int, string, string) {
			t.Helper()
			var rd io.Reader = strings.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // unknown length: sent chunked
			}
			req, _ := http.NewRequest("POST", srv.URL()+"/indexes/p/documents", rd)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
		}
		if code, _, b := post(small); code != 202 {
			t.Fatalf("chunked %v: a small body: %d %s", chunked, code, b)
		}
		code, ct, b := post(big)
		if code != 413 || ct != "text/html" || !strings.Contains(b, "<title>413 Request Entity Too Large</title>") {
			t.Fatalf("chunked %v: a large body: %d %s %s", chunked, code, ct, b)
		}
	}
	waitIdle(t, srv)
	if tasks, err := c.GetTasks(ctxT(t), &meilisearch.TasksQuery{}); err != nil || tasks.Total != 2 {
		t.Fatalf("tasks: %+v %v (want the two small bodies only)", tasks, err)
	}
	if srv.Requests("POST /indexes/{uid}/documents") != 4 {
		t.Fatalf("requests: %d, want 4 counted", srv.Requests("POST /indexes/{uid}/documents"))
	}
}

// GET /documents and POST /documents/fetch take sort criteria on sortable
// attributes (Meilisearch 1.16+, milli's recursive_sort), refusing others
// with invalid_document_sort.
func TestFetchDocumentsSorted(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.Index("b").AddDocuments(ctx, []map[string]any{
		{"id": 1, "year": 2001, "t": "b"}, {"id": 2, "year": 1999, "t": "a"}, {"id": 3, "year": 2001, "t": "a"}, {"id": 4, "t": "z"},
	}, nil))
	code, v := rawAny(t, srv, "GET", "/indexes/b/documents?sort=year:asc", "")
	if m, _ := v.(map[string]any); code != 400 || m["code"] != "invalid_document_sort" || !strings.Contains(m["message"].(string), "Attribute `year` is not sortable") {
		t.Fatalf("sort on an attribute not sortable: %d %v", code, v)
	}
	succeeded(t, c)(c.Index("b").UpdateSortableAttributes(ctx, &[]string{"year", "t"}))
	ids := func(v any) string {
		var out []string
		for _, d := range v.(map[string]any)["results"].([]any) {
			out = append(out, asJSON(d.(map[string]any)["id"]))
		}
		return strings.Join(out, ",")
	}
	if _, v := rawAny(t, srv, "GET", "/indexes/b/documents?sort=year:desc,t:asc", ""); ids(v) != "3,1,2,4" {
		t.Fatalf("GET sorted by year desc, t asc: %s", ids(v))
	}
	if _, v := rawAny(t, srv, "POST", "/indexes/b/documents/fetch", `{"sort":["t:asc","year:asc"],"limit":2,"offset":1}`); ids(v) != "3,1" {
		t.Fatalf("fetch sorted by t, year: %s", ids(v))
	}
	if code, _ := rawAny(t, srv, "POST", "/indexes/b/documents/fetch", `{"sort":["year"]}`); code != 400 {
		t.Fatalf("a criterion without asc/desc: %d", code)
	}
}

// localizedAttributes takes only the locales Meilisearch knows
// (locales.rs make_locale!); POST /indexes/{uid}/compact is an
// indexCompaction task.
func TestLocalesAndCompaction(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	code, v := rawAny(t, srv, "PATCH", "/indexes/l/settings", `{"localizedAttributes":[{"attributePatterns":["*_ja"],"locales":["jpn","xx"]}]}`)
	if m, _ := v.(map[string]any); code != 400 || m["code"] != "invalid_settings_localized_attributes" || !strings.Contains(m["message"].(string), "Unsupported locale `xx`") {
		t.Fatalf("an unknown locale: %d %v", code, v)
	}
	succeeded(t, c)(c.Index("l").UpdateLocalizedAttributes(ctx, []*meilisearch.LocalizedAttributes{{Locales: []string{"ja", "cmn"}, AttributePatterns: []string{"*_ja"}}}))
	task := succeeded(t, c)(c.Index("l").Compact(ctx))
	if task.Type != "indexCompaction" {
		t.Fatalf("compaction task: %+v", task)
	}
	if _, v := rawAny(t, srv, "GET", "/tasks/"+itoa(task.UID), ""); v.(map[string]any)["details"].(map[string]any)["preCompactionSize"] == nil {
		t.Fatalf("compaction details: %v", v)
	}
	if info, err := c.Index("none").Compact(ctx); err != nil {
		t.Fatal(err)
	} else if done, _ := c.WaitForTask(ctx, info.TaskUID, 0); done.Status != meilisearch.TaskStatusFailed || done.Error.Code != "index_not_found" {
		t.Fatalf("compacting a missing index: %+v", done)
	}
}

// Embedders are shown as Meilisearch shows them: API keys redacted
// (hide_secret), a rest embedder's defaults filled in.
func TestEmbeddersView(t *testing.T) {
	srv, _ := start(t, meilitest.Options{})
	rawAny(t, srv, "PATCH", "/indexes/e/settings", `{"embedders":{"r":{"source":"rest","url":"https://x","apiKey":"My super secret value you will never guess","dimensions":4,"request":"{{text}}","response":"{{embedding}}"},"u":{"source":"userProvided","dimensions":3}}}`)
	waitIdle(t, srv)
	_, v := rawAny(t, srv, "GET", "/indexes/e/settings/embedders", "")
	r := v.(map[string]any)["r"].(map[string]any)
	if r["apiKey"] != "My suXXXXXX..." || r["documentTemplateMaxBytes"] != 400.0 || !strings.HasSuffix(r["documentTemplate"].(string), "{{ field.value }}\n{% endif %}{% endfor %}") || asJSON(r["headers"]) != "{}" {
		t.Fatalf("rest embedder: %v", r)
	}
	if u := asJSON(v.(map[string]any)["u"]); u != `{"dimensions":3,"source":"userProvided"}` {
		t.Fatalf("userProvided embedder: %s", u)
	}
}
