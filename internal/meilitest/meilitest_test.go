package meilitest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// start runs a server for one test and a client without retries (a 503
// would otherwise cost 6 s of backoff).
func start(t *testing.T, opts meilitest.Options) (*meilitest.Server, meilisearch.ServiceManager) {
	t.Helper()
	srv, err := meilitest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	var o []meilisearch.Option
	o = append(o, meilisearch.DisableRetries())
	if opts.MasterKey != "" {
		o = append(o, meilisearch.WithAPIKey(opts.MasterKey))
	}
	c := meilisearch.New(srv.URL(), o...)
	t.Cleanup(c.Close)
	return srv, c
}

func ctxT(t *testing.T) context.Context { return testutil.Context(t, 20*time.Second) }

// wait waits for a task and returns it, failing the test on a client error.
func wait(t *testing.T, c meilisearch.ServiceManager, info *meilisearch.TaskInfo, err error) *meilisearch.Task {
	t.Helper()
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if info.Status != meilisearch.TaskStatusEnqueued {
		t.Fatalf("summarized task status = %q, want enqueued", info.Status)
	}
	task, err := c.WaitForTask(ctxT(t), info.TaskUID, 5*time.Millisecond)
	if err != nil {
		t.Fatalf("wait for task %d: %v", info.TaskUID, err)
	}
	return task
}

// succeeded returns a function that waits for the task it is given and
// requires it to succeed: succeeded(t, c)(index.AddDocuments(...)).
func succeeded(t *testing.T, c meilisearch.ServiceManager) func(*meilisearch.TaskInfo, error) *meilisearch.Task {
	return func(info *meilisearch.TaskInfo, err error) *meilisearch.Task {
		t.Helper()
		return succeededTask(t, c, info, err)
	}
}

func succeededTask(t *testing.T, c meilisearch.ServiceManager, info *meilisearch.TaskInfo, err error) *meilisearch.Task {
	t.Helper()
	task := wait(t, c, info, err)
	if task.Status != meilisearch.TaskStatusSucceeded {
		t.Fatalf("task %d (%s) = %s: %s %s", task.UID, task.Type, task.Status, task.Error.Code, task.Error.Message)
	}
	return task
}

// failed is succeeded for a task that must fail with code.
func failed(t *testing.T, c meilisearch.ServiceManager, code string) func(*meilisearch.TaskInfo, error) *meilisearch.Task {
	return func(info *meilisearch.TaskInfo, err error) *meilisearch.Task {
		t.Helper()
		return failedTask(t, c, info, err, code)
	}
}

func failedTask(t *testing.T, c meilisearch.ServiceManager, info *meilisearch.TaskInfo, err error, code string) *meilisearch.Task {
	t.Helper()
	task := wait(t, c, info, err)
	if task.Status != meilisearch.TaskStatusFailed || string(task.Error.Code) != code {
		t.Fatalf("task %d = %s %q (%s), want failed %s", task.UID, task.Status, task.Error.Code, task.Error.Message, code)
	}
	if task.Error.Link != "https://docs.meilisearch.com/errors#"+code || task.Error.Type == "" {
		t.Fatalf("task error link/type = %q %q", task.Error.Link, task.Error.Type)
	}
	return task
}

func apiErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var me *meilisearch.Error
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want a *meilisearch.Error", err)
	}
	if me.StatusCode != status || string(me.APIError.Code) != code {
		t.Fatalf("err = %d %q (%s), want %d %s", me.StatusCode, me.APIError.Code, me.APIError.Message, status, code)
	}
}

type movie struct {
	ID    any    `json:"id,omitempty"`
	Title string `json:"title,omitempty"`
	Genre string `json:"genre,omitempty"`
	Year  int    `json:"year,omitempty"`
}

func fetchAll(t *testing.T, ix meilisearch.IndexManager, q *meilisearch.DocumentsQuery) []map[string]any {
	t.Helper()
	if q == nil {
		q = &meilisearch.DocumentsQuery{Limit: 1000}
	}
	var res meilisearch.DocumentsResult
	if err := ix.GetDocuments(ctxT(t), q, &res); err != nil {
		t.Fatalf("get documents: %v", err)
	}
	var docs []map[string]any
	if err := res.Results.DecodeInto(&docs); err != nil {
		t.Fatal(err)
	}
	return docs
}

func TestIndexes(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)

	task := succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "movies", PrimaryKey: "id"}))
	if task.Type != meilisearch.TaskTypeIndexCreation || task.IndexUID != "movies" || task.Details.PrimaryKey != "id" {
		t.Fatalf("creation task = %+v", task)
	}
	if task.StartedAt.IsZero() || task.FinishedAt.IsZero() || task.Duration == "" {
		t.Fatalf("finished task lacks times: %+v", task)
	}
	ir, err := c.GetIndex(ctx, "movies")
	if err != nil || ir.UID != "movies" || ir.PrimaryKey != "id" || ir.CreatedAt.IsZero() {
		t.Fatalf("get index = %+v, %v", ir, err)
	}

	t.Run("creating an existing index fails its task", func(t *testing.T) {
		failed(t, c, "index_already_exists")(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "movies"}))
	})
	t.Run("an invalid uid is refused at once", func(t *testing.T) {
		_, err := c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "bad uid!"})
		apiErr(t, err, 400, "invalid_index_uid")
	})
	t.Run("a missing index is 404", func(t *testing.T) {
		_, err := c.GetIndex(ctx, "nope")
		apiErr(t, err, 404, "index_not_found")
	})
	t.Run("list is sorted and paged", func(t *testing.T) {
		succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "books"}))
		res, err := c.ListIndexes(ctx, &meilisearch.IndexesQuery{Limit: 1})
		if err != nil || res.Total != 2 || len(res.Results) != 1 || res.Results[0].UID != "books" {
			t.Fatalf("list = %+v, %v", res, err)
		}
	})
	t.Run("update primary key of an empty index", func(t *testing.T) {
		pk := "isbn"
		succeeded(t, c)(c.Index("books").UpdateIndex(ctx, &meilisearch.UpdateIndexRequestParams{PrimaryKey: pk}))
		ir, err := c.GetIndex(ctx, "books")
		if err != nil || ir.PrimaryKey != "isbn" {
			t.Fatalf("get index = %+v, %v", ir, err)
		}
	})
	t.Run("delete, and deleting a missing index fails its task", func(t *testing.T) {
		succeeded(t, c)(c.DeleteIndex(ctx, "books"))
		if _, err := c.GetIndex(ctx, "books"); err == nil {
			t.Fatal("index still there")
		}
		failed(t, c, "index_not_found")(c.DeleteIndex(ctx, "books"))
	})
}

func TestDocuments(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("movies")
	pk := "id"

	// The index does not exist: the first write creates it.
	task := succeeded(t, c)(ix.AddDocuments(ctx, []movie{
		{ID: "m1", Title: "Alien", Genre: "horror", Year: 1979},
		{ID: "m2", Title: "Heat", Genre: "crime", Year: 1995},
		{ID: 3, Title: "Ran", Genre: "drama", Year: 1985},
	}, &meilisearch.DocumentOptions{PrimaryKey: &pk}))
	if task.Details.ReceivedDocuments != 3 || task.Details.IndexedDocuments != 3 || task.Type != meilisearch.TaskTypeDocumentAdditionOrUpdate {
		t.Fatalf("addition task = %+v", task)
	}
	if ir, err := c.GetIndex(ctx, "movies"); err != nil || ir.PrimaryKey != "id" {
		t.Fatalf("index = %+v, %v", ir, err)
	}

	t.Run("fetch with fields is a projection", func(t *testing.T) {
		docs := fetchAll(t, ix, &meilisearch.DocumentsQuery{Limit: 10, Fields: []string{"title"}})
		want := []map[string]any{{"title": "Alien"}, {"title": "Heat"}, {"title": "Ran"}}
		if fmt.Sprint(docs) != fmt.Sprint(want) {
			t.Fatalf("docs = %v", docs)
		}
	})
	t.Run("ids keep their JSON type", func(t *testing.T) {
		var d map[string]any
		if err := ix.GetDocument(ctx, "3", nil, &d); err != nil {
			t.Fatal(err)
		}
		if d["id"] != float64(3) {
			t.Fatalf("id = %#v", d["id"])
		}
		if err := ix.GetDocument(ctx, "m1", &meilisearch.DocumentQuery{Fields: []string{"year"}}, &d); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a missing document is 404", func(t *testing.T) {
		var d map[string]any
		apiErr(t, ix.GetDocument(ctx, "zz", nil, &d), 404, "document_not_found")
	})
	t.Run("offset and limit page, total counts all", func(t *testing.T) {
		var res meilisearch.DocumentsResult
		if err := ix.GetDocuments(ctx, &meilisearch.DocumentsQuery{Offset: 1, Limit: 1}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Total != 3 || len(res.Results) != 1 || res.Offset != 1 || res.Limit != 1 {
			t.Fatalf("res = %+v", res)
		}
	})
	t.Run("PUT merges top-level fields", func(t *testing.T) {
		succeeded(t, c)(ix.UpdateDocuments(ctx, []map[string]any{{"id": "m1", "title": "Aliens"}}, nil))
		d := srv.Documents("movies")
		if d[1]["id"] != "m1" || d[1]["title"] != "Aliens" || d[1]["genre"] != "horror" {
			t.Fatalf("after PUT: %v", d)
		}
	})
	t.Run("POST replaces the whole document", func(t *testing.T) {
		succeeded(t, c)(ix.AddDocuments(ctx, []map[string]any{{"id": "m1", "title": "Alien 3"}}, nil))
		d := srv.Documents("movies")
		if _, ok := d[1]["genre"]; ok || d[1]["title"] != "Alien 3" {
			t.Fatalf("after POST: %v", d)
		}
	})
	t.Run("skipCreation ignores new ids", func(t *testing.T) {
		succeeded(t, c)(ix.UpdateDocuments(ctx, []map[string]any{{"id": "new1", "title": "x"}, {"id": "m2", "year": 1996}},
			&meilisearch.DocumentOptions{SkipCreation: true}))
		d := srv.Documents("movies")
		if len(d) != 3 || d[2]["year"] != float64(1996) {
			t.Fatalf("after skipCreation: %v", d)
		}
	})
	t.Run("ndjson", func(t *testing.T) {
		succeeded(t, c)(ix.AddDocumentsNdjson(ctx, []byte("{\"id\":\"n1\",\"title\":\"A\"}\n{\"id\":\"n2\",\"title\":\"B\"}\n"), nil))
		if n := len(srv.Documents("movies")); n != 5 {
			t.Fatalf("%d documents", n)
		}
	})
	t.Run("csv", func(t *testing.T) {
		succeeded(t, c)(ix.AddDocumentsCsv(ctx, []byte("id,title,year:number\nc1,Csv,2001\n"), nil))
		var d map[string]any
		if err := ix.GetDocument(ctx, "c1", nil, &d); err != nil || d["year"] != float64(2001) {
			t.Fatalf("csv doc = %v, %v", d, err)
		}
	})
	t.Run("delete one, delete batch, delete all", func(t *testing.T) {
		task := succeeded(t, c)(ix.DeleteDocument(ctx, "n1", nil))
		if task.Type != meilisearch.TaskTypeDocumentDeletion || task.Details.DeletedDocuments != 1 {
			t.Fatalf("delete one = %+v", task.Details)
		}
		task = succeeded(t, c)(ix.DeleteDocuments(ctx, []string{"n2", "c1", "nothere"}, nil))
		if task.Details.ProvidedIds != 3 || task.Details.DeletedDocuments != 2 {
			t.Fatalf("delete batch = %+v", task.Details)
		}
		if d := srv.Documents("movies"); len(d) != 3 {
			t.Fatalf("after deletes: %v", d)
		}
		task = succeeded(t, c)(ix.DeleteAllDocuments(ctx, nil))
		if task.Details.DeletedDocuments != 3 || len(srv.Documents("movies")) != 0 {
			t.Fatalf("delete all = %+v, %v", task.Details, srv.Documents("movies"))
		}
		if ir, err := c.GetIndex(ctx, "movies"); err != nil || ir.PrimaryKey != "id" {
			t.Fatalf("index after delete all = %+v, %v", ir, err)
		}
	})
	t.Run("a write to a missing index's documents fails its task", func(t *testing.T) {
		failed(t, c, "index_not_found")(c.Index("ghost").DeleteDocuments(ctx, []string{"a"}, nil))
	})
}

func TestDocumentErrors(t *testing.T) {
	srv, c := start(t, meilitest.Options{MaxPayloadBytes: 10 << 20})
	ctx := ctxT(t)
	ix := c.Index("docs")
	succeeded(t, c)(ix.AddDocuments(ctx, []map[string]any{{"id": "ok", "v": 1}}, nil))

	t.Run("an invalid id fails the whole task and writes nothing", func(t *testing.T) {
		task := failed(t, c, "invalid_document_id")(ix.AddDocuments(ctx, []map[string]any{{"id": "good"}, {"id": "foo & bar"}}, nil))
		want := "Document identifier `\"foo & bar\"` is invalid. A document identifier can be of type integer or string, only composed of alphanumeric characters (a-z A-Z 0-9), hyphens (-) and underscores (_), and can not be more than 511 bytes."
		if task.Error.Message != want || task.Error.Type != "invalid_request" {
			t.Fatalf("error = %+v", task.Error)
		}
		if task.Details.ReceivedDocuments != 2 || task.Details.IndexedDocuments != 0 {
			t.Fatalf("details = %+v", task.Details)
		}
		if d := srv.Documents("docs"); len(d) != 1 {
			t.Fatalf("documents = %v", d)
		}
	})
	t.Run("ids: 511 bytes ok, 512 not, floats not", func(t *testing.T) {
		succeeded(t, c)(ix.AddDocuments(ctx, []map[string]any{{"id": strings.Repeat("a", 511)}, {"id": -5}}, nil))
		failed(t, c, "invalid_document_id")(ix.AddDocuments(ctx, []map[string]any{{"id": strings.Repeat("a", 512)}}, nil))
		failed(t, c, "invalid_document_id")(ix.AddDocuments(ctx, []map[string]any{{"id": 1.5}}, nil))
	})
	t.Run("a missing id fails the task", func(t *testing.T) {
		task := failed(t, c, "missing_document_id")(ix.AddDocuments(ctx, []map[string]any{{"title": "x"}}, nil))
		if task.Error.Message != "Document doesn't have a `id` attribute: `{\"title\":\"x\"}`." {
			t.Fatalf("message = %q", task.Error.Message)
		}
	})
	t.Run("a different primaryKey fails the task", func(t *testing.T) {
		pk := "title"
		failed(t, c, "index_primary_key_already_exists")(ix.AddDocuments(ctx, []map[string]any{{"id": "a", "title": "x"}}, &meilisearch.DocumentOptions{PrimaryKey: &pk}))
	})
	t.Run("primary key inference", func(t *testing.T) {
		succeeded(t, c)(c.Index("inf1").AddDocuments(ctx, []map[string]any{{"BookId": 1, "t": "a"}}, nil))
		if ir, _ := c.GetIndex(ctx, "inf1"); ir == nil || ir.PrimaryKey != "BookId" {
			t.Fatalf("inferred = %+v", ir)
		}
		failed(t, c, "index_primary_key_no_candidate_found")(c.Index("inf2").AddDocuments(ctx, []map[string]any{{"t": "a"}}, nil))
		failed(t, c, "index_primary_key_multiple_candidates_found")(c.Index("inf3").AddDocuments(ctx, []map[string]any{{"id": 1, "object_id": 2}}, nil))
		if _, err := c.GetIndex(ctx, "inf2"); err == nil {
			t.Fatal("a failed first write created the index")
		}
	})
	t.Run("malformed and empty payloads are refused at once", func(t *testing.T) {
		_, err := ix.AddDocumentsNdjson(ctx, []byte("{\"id\": 1,}"), nil)
		apiErr(t, err, 400, "malformed_payload")
		_, err = ix.AddDocumentsNdjson(ctx, []byte(""), nil)
		apiErr(t, err, 400, "missing_payload")
	})
	t.Run("a payload over the limit is 413", func(t *testing.T) {
		big := []map[string]any{{"id": "big", "blob": strings.Repeat("x", 11<<20)}}
		_, err := ix.AddDocuments(ctx, big, nil)
		apiErr(t, err, 413, "payload_too_large")
		var me *meilisearch.Error
		errors.As(err, &me)
		if !strings.HasSuffix(me.APIError.Message, "The maximum accepted payload size is 10 MiB.") {
			t.Fatalf("message = %q", me.APIError.Message)
		}
	})
}

func TestDeleteByFilter(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("m")
	succeeded(t, c)(ix.AddDocuments(ctx, []map[string]any{
		{"id": 1, "color": "Blue", "n": 1, "tags": []string{"a", "b"}},
		{"id": 2, "color": "red", "n": 5},
		{"id": 3, "color": "blue", "n": 10, "tags": []string{"c"}},
		{"id": 4, "n": 7},
	}, nil))

	t.Run("an attribute that is not filterable fails the task", func(t *testing.T) {
		task := failed(t, c, "invalid_document_filter")(ix.DeleteDocumentsByFilter(ctx, "color = blue", nil))
		want := "Index `m`: Attribute `color` is not filterable. This index does not have configured filterable attributes.\n1:6 color = blue"
		if task.Error.Message != want {
			t.Fatalf("message = %q", task.Error.Message)
		}
	})
	succeeded(t, c)(ix.UpdateSettings(ctx, &meilisearch.Settings{FilterableAttributes: []string{"color", "n", "tags", "id"}}))
	t.Run("a bad filter is refused at once", func(t *testing.T) {
		_, err := ix.DeleteDocumentsByFilter(ctx, "color ~ blue", nil)
		apiErr(t, err, 400, "invalid_document_filter")
	})
	t.Run("equality ignores case", func(t *testing.T) {
		task := succeeded(t, c)(ix.DeleteDocumentsByFilter(ctx, "color = blue", nil))
		if task.Details.DeletedDocuments != 2 || task.Details.OriginalFilter != `"color = blue"` {
			t.Fatalf("details = %+v", task.Details)
		}
	})
	t.Run("IN, comparisons and the array form", func(t *testing.T) {
		docs := fetchAll(t, ix, &meilisearch.DocumentsQuery{Limit: 10, Filter: "n > 4 AND id IN [2, 9]"})
		if len(docs) != 1 || docs[0]["id"] != float64(2) {
			t.Fatalf("filtered = %v", docs)
		}
		succeeded(t, c)(ix.DeleteDocumentsByFilter(ctx, []any{"n >= 5", []string{"id = 2", "color NOT EXISTS"}}, nil))
		if d := srv.Documents("m"); len(d) != 0 {
			t.Fatalf("left = %v", d)
		}
	})
}

func TestSearch(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("books")
	succeeded(t, c)(ix.UpdateSettings(ctx, &meilisearch.Settings{FilterableAttributes: []string{"genre"}, SortableAttributes: []string{"year"}}))
	succeeded(t, c)(ix.AddDocuments(ctx, []movie{
		{ID: 1, Title: "The Hobbit", Genre: "fantasy", Year: 1937},
		{ID: 2, Title: "Dune Messiah", Genre: "sf", Year: 1969},
		{ID: 3, Title: "Dune", Genre: "sf", Year: 1965},
		{ID: 4, Title: "Hobbits of the Shire", Genre: "essay", Year: 2001},
	}, nil))
	hitIDs := func(res *meilisearch.SearchResponse) []int {
		var hs []movie
		if err := res.Hits.DecodeInto(&hs); err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, h := range hs {
			ids = append(ids, int(h.ID.(float64)))
		}
		return ids
	}
	res, err := ix.Search(ctx, "dune", &meilisearch.SearchRequest{Limit: 10})
	if err != nil || res.EstimatedTotalHits != 2 || fmt.Sprint(hitIDs(res)) != "[2 3]" {
		t.Fatalf("search dune = %+v, %v", res, err)
	}
	res, err = ix.Search(ctx, "hobbit", &meilisearch.SearchRequest{Limit: 10, Sort: []string{"year:desc"}})
	if err != nil || fmt.Sprint(hitIDs(res)) != "[4 1]" {
		t.Fatalf("prefix search hobbit = %v, %v", hitIDs(res), err)
	}
	res, err = ix.Search(ctx, "", &meilisearch.SearchRequest{Limit: 1, Filter: "genre = SF"})
	if err != nil || res.EstimatedTotalHits != 2 || len(res.Hits) != 1 {
		t.Fatalf("filtered placeholder search = %+v, %v", res, err)
	}
	_, err = ix.Search(ctx, "", &meilisearch.SearchRequest{Filter: "year = 1"})
	apiErr(t, err, 400, "invalid_search_filter")
	_, err = c.Index("nope").Search(ctx, "x", &meilisearch.SearchRequest{})
	apiErr(t, err, 404, "index_not_found")
}

func TestSettings(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("s")
	// Settings on a missing index create it.
	task := succeeded(t, c)(ix.UpdateSettings(ctx, &meilisearch.Settings{
		FilterableAttributes: []string{"a"}, SearchableAttributes: []string{"title"}, RankingRules: []string{"words", "sort"},
	}))
	if task.Type != meilisearch.TaskTypeSettingsUpdate {
		t.Fatalf("type = %s", task.Type)
	}
	st, err := ix.GetSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.FilterableAttributes, []string{"a"}) || !slices.Equal(st.SearchableAttributes, []string{"title"}) ||
		!slices.Equal(st.DisplayedAttributes, []string{"*"}) || !slices.Equal(st.RankingRules, []string{"words", "sort"}) ||
		st.Pagination == nil || st.Pagination.MaxTotalHits != 1000 {
		t.Fatalf("settings = %+v", st)
	}
	// What GetSettings returns can be sent back as is (a reindex copies the
	// live index's settings this way).
	succeeded(t, c)(c.Index("copy").UpdateSettings(ctx, st))
	cp, err := c.Index("copy").GetSettings(ctx)
	if err != nil || !slices.Equal(cp.SearchableAttributes, []string{"title"}) || cp.TypoTolerance == nil || !cp.TypoTolerance.Enabled {
		t.Fatalf("copied settings = %+v, %v", cp, err)
	}
	succeeded(t, c)(ix.ResetSettings(ctx))
	st, err = ix.GetSettings(ctx)
	if err != nil || len(st.FilterableAttributes) != 0 || len(st.RankingRules) != 7 {
		t.Fatalf("after reset = %+v, %v", st, err)
	}
}

func TestAuth(t *testing.T) {
	srv, c := start(t, meilitest.Options{MasterKey: "masterKey"})
	ctx := ctxT(t)
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "a"}))

	anon := meilisearch.New(srv.URL(), meilisearch.DisableRetries())
	defer anon.Close()
	if !anon.IsHealthy() {
		t.Fatal("/health must be open")
	}
	_, err := anon.GetIndex(ctx, "a")
	apiErr(t, err, 401, "missing_authorization_header")
	wrong := meilisearch.New(srv.URL(), meilisearch.DisableRetries(), meilisearch.WithAPIKey("nope"))
	defer wrong.Close()
	_, err = wrong.Index("a").AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	apiErr(t, err, 403, "invalid_api_key")
	if _, err := c.Version(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSwapIndexes(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.Index("live").AddDocuments(ctx, []map[string]any{{"id": "old"}}, nil))
	succeeded(t, c)(c.Index("live_tmp").UpdateSettings(ctx, &meilisearch.Settings{FilterableAttributes: []string{"x"}}))
	succeeded(t, c)(c.Index("live_tmp").AddDocuments(ctx, []map[string]any{{"id": "new1"}, {"id": "new2"}}, nil))
	task := succeeded(t, c)(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"live", "live_tmp"}}}))
	if task.Type != meilisearch.TaskTypeIndexSwap || task.IndexUID != "" || len(task.Details.Swaps) != 1 {
		t.Fatalf("swap task = %+v", task)
	}
	if docs := fetchAll(t, c.Index("live"), nil); len(docs) != 2 {
		t.Fatalf("live = %v", docs)
	}
	if st, _ := c.Index("live").GetSettings(ctx); st == nil || !slices.Equal(st.FilterableAttributes, []string{"x"}) {
		t.Fatalf("settings did not move: %+v", st)
	}
	if docs := fetchAll(t, c.Index("live_tmp"), nil); len(docs) != 1 || docs[0]["id"] != "old" {
		t.Fatalf("live_tmp = %v", docs)
	}
	// Earlier tasks follow their index.
	first, err := c.GetTask(ctx, 0)
	if err != nil || first.IndexUID != "live_tmp" {
		t.Fatalf("task 0 = %+v, %v", first, err)
	}

	t.Run("a missing index fails the task and changes nothing", func(t *testing.T) {
		failed(t, c, "index_not_found")(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{
			{Indexes: []string{"live", "live_tmp"}}, {Indexes: []string{"x1", "x2"}}}))
		if docs := fetchAll(t, c.Index("live"), nil); len(docs) != 2 {
			t.Fatalf("live = %v", docs)
		}
	})
	t.Run("duplicates and wrong lengths are refused at once", func(t *testing.T) {
		_, err := c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"a", "b"}}, {Indexes: []string{"b", "c"}}})
		apiErr(t, err, 400, "invalid_swap_duplicate_index_found")
		_, err = c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"a"}}})
		apiErr(t, err, 400, "invalid_swap_indexes")
	})
	t.Run("rename", func(t *testing.T) {
		succeeded(t, c)(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"live_tmp", "renamed"}, Rename: true}}))
		if _, err := c.GetIndex(ctx, "live_tmp"); err == nil {
			t.Fatal("live_tmp still exists")
		}
		failed(t, c, "index_already_exists")(c.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{"live", "renamed"}, Rename: true}}))
	})
}

func TestTasks(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	srv.PauseTasks()
	var last *meilisearch.TaskInfo
	for i := range 5 {
		info, err := c.Index("t").AddDocuments(ctx, []map[string]any{{"id": i}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.TaskUID != int64(i) || info.IndexUID != "t" {
			t.Fatalf("summarized = %+v", info)
		}
		last = info
	}
	res, err := c.GetTasks(ctx, &meilisearch.TasksQuery{Statuses: []meilisearch.TaskStatus{meilisearch.TaskStatusEnqueued}, Limit: 2})
	if err != nil || res.Total != 5 || len(res.Results) != 2 || res.Results[0].UID != 4 || res.From != 4 || res.Next != 2 {
		t.Fatalf("enqueued tasks = %+v, %v", res, err)
	}
	task, err := c.GetTask(ctx, last.TaskUID)
	if err != nil || task.Status != meilisearch.TaskStatusEnqueued || !task.StartedAt.IsZero() {
		t.Fatalf("paused task = %+v, %v", task, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := srv.WaitIdle(wctx); err == nil {
		t.Fatal("WaitIdle returned while paused")
	}
	cancel()
	// A document error fails just that task (an internal one would fail
	// the whole batch: TestInternalErrorFailsTheWholeBatch).
	srv.FailNextTask("missing_document_id", "simulated")
	srv.ResumeTasks()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	task, _ = c.GetTask(ctx, 0)
	if task.Status != meilisearch.TaskStatusFailed || task.Error.Code != "missing_document_id" || task.Error.Type != "invalid_request" || task.Error.Message != "simulated" {
		t.Fatalf("FailNextTask: %+v", task)
	}
	if d := srv.Documents("t"); len(d) != 4 {
		t.Fatalf("documents = %v", d)
	}
	res, err = c.GetTasks(ctx, &meilisearch.TasksQuery{
		Statuses:  []meilisearch.TaskStatus{meilisearch.TaskStatusSucceeded},
		Types:     []meilisearch.TaskType{meilisearch.TaskTypeDocumentAdditionOrUpdate},
		IndexUIDS: []string{"t"}, UIDS: []int64{0, 1, 2},
	})
	if err != nil || res.Total != 2 || res.Results[0].UID != 2 || res.Results[1].UID != 1 {
		t.Fatalf("filtered tasks = %+v, %v", res, err)
	}
	_, err = c.GetTask(ctx, 99)
	apiErr(t, err, 404, "task_not_found")
}

func TestOrderWithinIndexAcrossBatches(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("o")
	srv.PauseTasks()
	// add, update, delete, re-add of one id, batched together: the last
	// write wins as if applied one by one.
	steps := []func() (*meilisearch.TaskInfo, error){
		func() (*meilisearch.TaskInfo, error) {
			return ix.AddDocuments(ctx, []map[string]any{{"id": "x", "v": 1, "keep": true}}, nil)
		},
		func() (*meilisearch.TaskInfo, error) {
			return ix.UpdateDocuments(ctx, []map[string]any{{"id": "x", "v": 2}}, nil)
		},
		func() (*meilisearch.TaskInfo, error) {
			return ix.AddDocuments(ctx, []map[string]any{{"id": "bad id"}}, nil)
		},
		func() (*meilisearch.TaskInfo, error) { return ix.DeleteDocuments(ctx, []string{"x"}, nil) },
		func() (*meilisearch.TaskInfo, error) {
			return ix.AddDocuments(ctx, []map[string]any{{"id": "x", "v": 3}}, nil)
		},
		func() (*meilisearch.TaskInfo, error) {
			return ix.UpdateDocuments(ctx, []map[string]any{{"id": "x", "w": 4}}, nil)
		},
	}
	for _, s := range steps {
		if _, err := s(); err != nil {
			t.Fatal(err)
		}
	}
	srv.ResumeTasks()
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	d := srv.Documents("o")
	if len(d) != 1 || d[0]["v"] != float64(3) || d[0]["w"] != float64(4) || d[0]["keep"] != nil {
		t.Fatalf("documents = %v", d)
	}
	task, _ := c.GetTask(ctx, 2)
	if task.Status != meilisearch.TaskStatusFailed {
		t.Fatalf("bad task = %+v", task)
	}
}

func TestFailNextAndRequests(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("f")

	srv.FailNext(1, meilitest.Fail5xx)
	_, err := ix.AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	apiErr(t, err, 503, "internal")

	srv.FailNext(1, meilitest.FailDrop)
	_, err = ix.AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	var me *meilisearch.Error
	if !errors.As(err, &me) || me.ErrCode != meilisearch.CommunicationError {
		t.Fatalf("dropped: %v", err)
	}

	srv.FailNextOn("POST /indexes/{uid}/documents", 1, meilitest.Fail5xx)
	if !c.IsHealthy() {
		t.Fatal("health failed")
	}
	_, err = ix.AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	apiErr(t, err, 503, "internal")
	if _, err := ix.AddDocumentsInBatches(ctx, []map[string]any{{"id": 1}, {"id": 2}, {"id": 3}}, 2, nil); err != nil {
		t.Fatal(err)
	}
	if n := srv.Requests("POST /indexes/{uid}/documents"); n != 5 {
		t.Fatalf("POST documents requests = %d, want 5", n)
	}
	if n := srv.Requests("GET /health"); n != 1 {
		t.Fatalf("health requests = %d", n)
	}
}

// Test50kDocuments is the test server's speed check: 50,000 small documents
// in batches of 5,000, read back page by page.
func Test50kDocuments(t *testing.T) {
	srv, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("big")
	const n = 50000
	docs := make([]map[string]any, n)
	for i := range docs {
		docs[i] = map[string]any{"id": fmt.Sprintf("d%05d", i), "title": "document number " + fmt.Sprint(i), "n": i}
	}
	began := time.Now()
	infos, err := ix.AddDocumentsInBatches(ctx, docs, 5000, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		succeededTask(t, c, &info, nil)
	}
	var got []string
	for off := int64(0); ; off += 10000 {
		var res meilisearch.DocumentsResult
		if err := ix.GetDocuments(ctx, &meilisearch.DocumentsQuery{Offset: off, Limit: 10000, Fields: []string{"id"}}, &res); err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Results {
			got = append(got, strings.Trim(string(h["id"]), `"`))
		}
		if len(res.Results) < 10000 {
			break
		}
	}
	t.Logf("50k documents written and read back in %v", time.Since(began))
	if len(got) != n || !sort.StringsAreSorted(got) {
		t.Fatalf("read back %d documents", len(got))
	}
	if len(srv.Documents("big")) != n {
		t.Fatal("Documents disagrees")
	}
}

func TestCompressedRequests(t *testing.T) {
	for _, enc := range []meilisearch.ContentEncoding{meilisearch.GzipEncoding, meilisearch.DeflateEncoding, meilisearch.BrotliEncoding} {
		t.Run(string(enc), func(t *testing.T) {
			srv, _ := start(t, meilitest.Options{})
			c := meilisearch.New(srv.URL(), meilisearch.DisableRetries(), meilisearch.WithContentEncoding(enc, meilisearch.DefaultCompression))
			defer c.Close()
			ctx := ctxT(t)
			succeeded(t, c)(c.Index("z").AddDocuments(ctx, []map[string]any{{"id": 1, "t": "x"}}, nil))
			if docs := fetchAll(t, c.Index("z"), nil); len(docs) != 1 {
				t.Fatalf("docs = %v", docs)
			}
		})
	}
}

func TestStatsRenameAndMetadata(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	pk := "id"
	task := succeeded(t, c)(c.Index("a").AddDocuments(ctx, []map[string]any{{"id": 1, "x": 1}, {"id": 2, "y": 2, "x": 3}},
		&meilisearch.DocumentOptions{PrimaryKey: &pk, TaskCustomMetadata: "batch-7"}))
	if task.CustomMetadata != "batch-7" {
		t.Fatalf("customMetadata = %q", task.CustomMetadata)
	}
	st, err := c.GetStats(ctx, nil)
	if err != nil || st.Indexes["a"].NumberOfDocuments != 2 || st.Indexes["a"].FieldDistribution["x"] != 2 || st.LastUpdate.IsZero() {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	is, err := c.Index("a").GetStats(ctx, nil)
	if err != nil || is.NumberOfDocuments != 2 || is.IsIndexing {
		t.Fatalf("index stats = %+v, %v", is, err)
	}

	succeeded(t, c)(c.Index("a").UpdateIndex(ctx, &meilisearch.UpdateIndexRequestParams{UID: "b"}))
	if _, err := c.GetIndex(ctx, "a"); err == nil {
		t.Fatal("a still exists after rename")
	}
	if docs := fetchAll(t, c.Index("b"), nil); len(docs) != 2 {
		t.Fatalf("b = %v", docs)
	}
	res, err := c.Index("b").GetTasks(ctx, &meilisearch.TasksQuery{Reverse: true})
	if err != nil || len(res.Results) != 1 || res.Results[0].UID != 0 || res.Results[0].IndexUID != "b" {
		t.Fatalf("tasks of b = %+v, %v", res, err)
	}
}

func TestTaskDelayShowsProcessing(t *testing.T) {
	srv, c := start(t, meilitest.Options{TaskDelay: 300 * time.Millisecond})
	ctx := ctxT(t)
	info, err := c.Index("d").AddDocuments(ctx, []map[string]any{{"id": 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		task, err := c.GetTask(ctx, info.TaskUID)
		if err != nil {
			t.Fatal(err)
		}
		if task.Status == meilisearch.TaskStatusProcessing {
			if task.StartedAt.IsZero() || !task.FinishedAt.IsZero() {
				t.Fatalf("processing task = %+v", task)
			}
			break
		}
		if task.Status != meilisearch.TaskStatusEnqueued || time.Now().After(deadline) {
			t.Fatalf("never saw processing; last %s", task.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	succeededTask(t, c, info, nil)
}

func TestTrailingSlashes(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	succeeded(t, c)(c.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: "x"}))
	// The client builds paths by concatenation; a uid with a trailing
	// slash still reaches the index, as Meilisearch trims it.
	if _, err := c.GetIndex(ctx, "x/"); err != nil {
		t.Fatal(err)
	}
}

// Documents come back in internal docid order: a replaced document keeps
// its docid, a new one takes the smallest a deleted one freed in an
// earlier batch (milli's AvailableIds, crates/milli/src/update/
// available_ids.rs), else the next; clearing the index starts again at 0.
func TestFetchOrderIsDocidOrderWithFreedDocidsGivenAgain(t *testing.T) {
	_, c := start(t, meilitest.Options{})
	ctx := ctxT(t)
	ix := c.Index("order")
	pk := "id"
	ids := func() []any {
		var out []any
		for _, d := range fetchAll(t, ix, nil) {
			out = append(out, d["id"])
		}
		return out
	}
	succeeded(t, c)(ix.AddDocuments(ctx, []movie{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}, &meilisearch.DocumentOptions{PrimaryKey: &pk}))
	succeeded(t, c)(ix.DeleteDocuments(ctx, []string{"b", "c"}, nil))
	succeeded(t, c)(ix.AddDocuments(ctx, []movie{{ID: "e"}, {ID: "a", Title: "again"}, {ID: "f"}, {ID: "g"}}, nil))
	if got, want := fmt.Sprint(ids()), "[a e f d g]"; got != want {
		t.Errorf("order %s, want %s (e and f in the docids b and c freed, a kept its own)", got, want)
	}
	succeeded(t, c)(ix.DeleteAllDocuments(ctx, nil))
	succeeded(t, c)(ix.AddDocuments(ctx, []movie{{ID: "z"}, {ID: "y"}}, nil))
	if got, want := fmt.Sprint(ids()), "[z y]"; got != want {
		t.Errorf("after clearing: %s, want %s", got, want)
	}
}
