package meili_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/meili"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// write is an upsert of {"id": id, "title": title} for source _id id.
func write(id int64, title string) sink.Write {
	_, raw, _ := bson.MarshalValue(id)
	return sink.Write{SourceID: bson.RawValue{Type: bson.TypeInt64, Value: raw}, Doc: map[string]any{"id": id, "title": title}}
}

func rawJSON(s string) json.RawMessage { return json.RawMessage(s) }

// del is a delete of source _id id (a string).
func del(id string) sink.Write {
	_, raw, _ := bson.MarshalValue(id)
	return sink.Write{SourceID: bson.RawValue{Type: bson.TypeString, Value: raw}, Delete: true}
}

// front is a test Meilisearch behind a front end that can answer chosen
// requests itself: a proxy or a Meilisearch in a bad mood.
type front struct {
	meili *meilitest.Server
	URL   string

	mu      sync.Mutex
	answers []*canned
	seen    []*http.Request // requests that reached the front, answered or not
}

// canned answers the next n requests of a route ("METHOD /path", a
// trailing * matching any rest).
type canned struct {
	route  string
	n      int
	status int
	header map[string]string
	body   string
}

func startFront(t *testing.T, opts meilitest.Options) *front {
	t.Helper()
	srv, err := meilitest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	target, _ := url.Parse(srv.URL())
	proxy := httputil.NewSingleHostReverseProxy(target)
	f := &front{meili: srv}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, r.Clone(context.Background()))
		var c *canned
		for _, a := range f.answers {
			if a.n > 0 && a.matches(r) {
				a.n--
				c = a
				break
			}
		}
		f.mu.Unlock()
		if c == nil {
			proxy.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range c.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(c.status)
		_, _ = io.WriteString(w, c.body)
	}))
	t.Cleanup(hs.Close)
	f.URL = hs.URL
	return f
}

func (c *canned) matches(r *http.Request) bool {
	line := r.Method + " " + r.URL.Path
	if p, ok := strings.CutSuffix(c.route, "*"); ok {
		return strings.HasPrefix(line, p)
	}
	return line == c.route
}

func (f *front) answer(c canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.n == 0 {
		c.n = 1
	}
	f.answers = append(f.answers, &c)
}

func (f *front) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers, f.seen = nil, nil
}

const (
	jsonCT = "application/json"
	nginx  = "<html>\r\n<head><title>%d</title></head>\r\n<body>\r\n<center><h1>%d</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)

func meiliErr(code, typ, msg string) string {
	return fmt.Sprintf(`{"message":%q,"code":%q,"type":%q,"link":"https://docs.meilisearch.com/errors#%s"}`, msg, code, typ, code)
}

func html(status int) (map[string]string, string) {
	return map[string]string{"Content-Type": "text/html"}, fmt.Sprintf(nginx, status, status)
}

// Every answer of Meilisearch, or of a proxy in front of it, on every route
// the sink calls, is retried with backoff (FAILED), refused per document,
// or stops the job with an error that says what to fix (CONFIG_INVALID,
// naming the variable when one is at fault): never retried for ever when
// it cannot succeed. The package doc's table, case by case.
func TestEveryAnswerIsClassified(t *testing.T) {
	f := startFront(t, meilitest.Options{MasterKey: "key"})
	client := meili.NewClientWithOptions(f.URL, "key", short)
	job := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	withSettings := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id", Settings: map[string]any{"rankingRules": []any{"words"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := meili.NewSink(client, job, sink.Unguarded, nil).Prepare(ctx); err != nil {
		t.Fatal(err)
	}

	// The operations, each reaching its route.
	ops := map[string]func(s sink.Sink) ([]sink.DocFailure, error){
		"prepare": func(s sink.Sink) ([]sink.DocFailure, error) { return nil, s.Prepare(ctx) },
		"settings": func(sink.Sink) ([]sink.DocFailure, error) {
			return nil, meili.NewSink(client, withSettings, sink.Unguarded, nil).Prepare(ctx)
		},
		"send": func(s sink.Sink) ([]sink.DocFailure, error) {
			r, err := s.Send(ctx, sink.Batch{Writes: []sink.Write{write(1, "a"), write(2, "b")}})
			if err != nil {
				return nil, err
			}
			return s.Wait(ctx, r)
		},
		"delete": func(s sink.Sink) ([]sink.DocFailure, error) {
			r, err := s.Send(ctx, sink.Batch{Writes: []sink.Write{del("x"), del("y")}})
			if err != nil {
				return nil, err
			}
			return s.Wait(ctx, r)
		},
		"keys": func(s sink.Sink) ([]sink.DocFailure, error) {
			return nil, s.Keys(ctx, func([]bson.RawValue) error { return nil })
		},
		"commit": func(s sink.Sink) ([]sink.DocFailure, error) {
			st, err := s.Stage(ctx, false)
			if err != nil {
				return nil, err
			}
			return nil, st.Commit(ctx)
		},
	}
	htmlH := func(status int) canned {
		h, b := html(status)
		return canned{status: status, header: h, body: b}
	}
	js := func(status int, code, typ string) canned {
		return canned{status: status, header: map[string]string{"Content-Type": jsonCT}, body: meiliErr(code, typ, "meilisearch says no")}
	}
	on := func(route string, c canned) canned { c.route = route; return c }
	const (
		retried  = "FAILED"
		keyBad   = "CONFIG_INVALID MEILISTREAM_MEILI_API_KEY"
		urlBad   = "CONFIG_INVALID MEILISTREAM_MEILI_URL"
		stops    = "CONFIG_INVALID"
		perDoc   = "refused"
		durable  = "ok"
		docsPath = "POST /indexes/items/documents"
	)
	cases := []struct {
		name, op string
		answer   canned
		want     string
	}{
		{"Meilisearch refusing a missing key", "prepare", on("GET /indexes/items", js(401, "missing_authorization_header", "auth")), keyBad},
		{"Meilisearch refusing the key", "send", on(docsPath, js(403, "invalid_api_key", "auth")), keyBad},
		{"a proxy refusing its credentials", "prepare", on("GET /indexes/items", htmlH(403)), keyBad},
		{"an empty 404: not Meilisearch's path", "prepare", on("GET /indexes/items", canned{status: 404}), urlBad},
		{"a proxy's 404 page", "send", on(docsPath, htmlH(404)), urlBad},
		{"a redirect (to https)", "send", on(docsPath, canned{status: 301, header: map[string]string{"Location": "https://example.invalid/indexes/items/documents"}}), urlBad},
		{"405: another server", "send", on(docsPath, canned{status: 405}), urlBad},
		{"501", "keys", on("POST /indexes/items/documents/fetch", htmlH(501)), urlBad},
		{"a 400 page: an HTTPS port spoken to in plain HTTP", "prepare", on("GET /indexes/items", htmlH(400)), urlBad},
		{"an invalid index uid", "prepare", on("GET /indexes/items", js(400, "invalid_index_uid", "invalid_request")), stops},
		{"Meilisearch's internal error", "send", on(docsPath, js(500, "internal", "internal")), retried},
		{"a proxy's 502", "send", on(docsPath, htmlH(502)), retried},
		{"a 503 with Retry-After", "delete", on("POST /indexes/items/documents/delete-batch",
			canned{status: 503, header: map[string]string{"Retry-After": "10", "Content-Type": jsonCT}, body: meiliErr("internal", "internal", "busy")}), retried},
		{"an empty 504", "keys", on("POST /indexes/items/documents/fetch", canned{status: 504}), retried},
		{"no space left on the device", "send", on(docsPath, js(422, "no_space_left_on_device", "system")), retried},
		{"a proxy's 408", "send", on(docsPath, htmlH(408)), retried},
		{"a 429", "prepare", on("GET /indexes/items", canned{status: 429}), retried},
		{"a body cut short (bad_request on documents)", "send", on(docsPath, js(400, "bad_request", "invalid_request")), retried},
		{"a malformed payload", "send", on(docsPath, js(400, "malformed_payload", "invalid_request")), perDoc},
		{"a proxy rewriting the content type", "send", on(docsPath, js(415, "invalid_content_type", "invalid_request")), stops},
		{"a 202 that is a proxy's page", "send", on(docsPath, htmlH(202)), retried},
		{"a 200 where a 202 is due", "send", on(docsPath, canned{status: 200, header: map[string]string{"Content-Type": jsonCT}, body: `{"taskUid":1}`}), retried},
		{"a 200 page for an index", "prepare", on("GET /indexes/items", htmlH(200)), retried},
		{"a task gone from the queue", "send", on("GET /tasks/*", js(404, "task_not_found", "invalid_request")), retried},
		{"a proxy's 404 for a task", "send", on("GET /tasks/*", htmlH(404)), urlBad},
		{"a key refused while polling", "send", on("GET /tasks/*", js(403, "invalid_api_key", "auth")), keyBad},
		{"a refused delete-batch", "delete", on("POST /indexes/items/documents/delete-batch", js(400, "bad_request", "invalid_request")), stops},
		{"a missing index while listing ids", "keys", on("POST /indexes/items/documents/fetch", js(404, "index_not_found", "invalid_request")), durable},
		{"a refused swap", "commit", on("POST /swap-indexes", js(400, "invalid_swap_indexes", "invalid_request")), stops},
		{"refused settings", "settings", on("PATCH /indexes/items/settings", js(400, "invalid_settings_ranking_rules", "invalid_request")), stops},
		{"settings too large for a proxy", "settings", on("PATCH /indexes/items/settings", htmlH(413)), stops},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.reset()
			f.answer(c.answer)
			fails, err := ops[c.op](meili.NewSink(client, job, sink.Unguarded, nil))
			got := string(errs.CodeOf(err))
			if s := errs.SettingOf(err); s != "" {
				got += " " + s
			}
			switch {
			case err == nil && len(fails) > 0 && len(fails[0].Writes) == 2:
				got = perDoc
			case err == nil && len(fails) == 0:
				got = durable
			}
			if got != c.want {
				t.Fatalf("%s answered %d: got %s (%v, failures %+v), want %s", c.op, c.answer.status, got, err, fails, c.want)
			}
			var me *meili.Error
			if err != nil && !errors.As(err, &me) {
				t.Errorf("the error does not hold the answer: %v", err)
			}
			if err != nil && me.Code == "" && me.BodyLen > 0 && strings.Contains(err.Error(), "nginx") {
				t.Errorf("the error copies the proxy's page: %v", err)
			}
		})
	}
}

// A task Meilisearch fails is judged by its error: a document's fault is
// a refusal of the task's writes (the engine bisects), whatever the code
// of type invalid_request; a primary key conflict stops the job; an
// internal error or a canceled task is retried.
func TestFailedTasksAreClassified(t *testing.T) {
	f := startFront(t, meilitest.Options{MasterKey: "key"})
	client := meili.NewClientWithOptions(f.URL, "key", roomy)
	job := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dst := meili.NewSink(client, job, sink.Unguarded, nil)
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	batch := sink.Batch{Writes: []sink.Write{write(1, "a"), write(2, "b")}}
	for _, c := range []struct{ code, want string }{
		{"invalid_document_fields", "refused invalid_document_fields"},
		{"vector_embedding_error", "refused vector_embedding_error"},
		{"a_code_of_a_newer_meilisearch", "refused a_code_of_a_newer_meilisearch"},
		{"index_primary_key_already_exists", "CONFIG_INVALID"},
		{"internal", "FAILED"},
		{"io_error", "FAILED"},
	} {
		f.meili.FailNextTask(c.code, "meilitest: "+c.code)
		r, err := dst.Send(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		fails, err := dst.Wait(ctx, r)
		got := string(errs.CodeOf(err))
		if err == nil && len(fails) == 1 && len(fails[0].Writes) == 2 {
			got = "refused " + fails[0].Code
		}
		if got != c.want {
			t.Errorf("a task failed with %s: got %q (%v, %+v), want %q", c.code, got, err, fails, c.want)
		}
	}

	// A task canceled by someone else is sent again.
	f.meili.PauseTasks()
	r, err := dst.Send(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, f.meili.URL()+"/tasks/cancel?statuses=enqueued", nil)
	req.Header.Set("Authorization", "Bearer key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f.meili.ResumeTasks()
	if _, err := dst.Wait(ctx, r); errs.CodeOf(err) != errs.Failed || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("a canceled task: %v, want FAILED", err)
	}

	// An administrative task refused is the settings' fault; an internal
	// error is retried.
	withSettings := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id", Settings: map[string]any{"rankingRules": []any{"words"}}}
	f.meili.FailNextTask("invalid_settings_embedders", "meilitest: bad embedder")
	if err := meili.NewSink(client, withSettings, sink.Unguarded, nil).Prepare(ctx); errs.CodeOf(err) != errs.ConfigInvalid {
		t.Errorf("a settings task refused: %v, want CONFIG_INVALID", err)
	}
	f.meili.FailNextTask("internal", "meilitest: crash")
	if err := meili.NewSink(client, withSettings, sink.Unguarded, nil).Prepare(ctx); errs.CodeOf(err) != errs.Failed {
		t.Errorf("a settings task failed internally: %v, want FAILED", err)
	}
}

// A 429's Retry-After holds the client's next request until it passes;
// the error carries it for the engine.
func TestRetryAfterIsHonoured(t *testing.T) {
	f := startFront(t, meilitest.Options{MasterKey: "key"})
	client := meili.NewClientWithOptions(f.URL, "key", short)
	dst := meili.NewSink(client, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.answer(canned{route: "GET /indexes/items", status: 429, header: map[string]string{"Retry-After": "1"}})
	err := dst.Prepare(ctx)
	var me *meili.Error
	if errs.CodeOf(err) != errs.Failed || !errors.As(err, &me) || me.RetryAfter() != time.Second {
		t.Fatalf("prepare: %v, want FAILED with a Retry-After of 1s", err)
	}
	began := time.Now()
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < 900*time.Millisecond {
		t.Fatalf("the next request went after %s, before the Retry-After", d)
	}
}

// A batch whose body a proxy refuses as too large (its HTML 413) is split
// in halves, sent in order, and lands whole; a document too large alone is
// refused on its own; the size learnt holds for the job's later batches,
// which are cut before sending. Deletes are split alike.
func TestAProxy413SplitsTheBatch(t *testing.T) {
	f := startFront(t, meilitest.Options{MasterKey: "key", ProxyBodyLimit: 4000})
	client := meili.NewClientWithOptions(f.URL, "key", short)
	job := &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}
	dst := meili.NewSink(client, job, sink.Unguarded, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(b sink.Batch) []sink.DocFailure {
		t.Helper()
		r, err := dst.Send(ctx, b)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		fails, err := dst.Wait(ctx, r)
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return fails
	}
	if err := dst.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	var b sink.Batch
	for i := int64(1); i <= 40; i++ {
		b.Writes = append(b.Writes, write(i, fmt.Sprintf("%03d %s", i, strings.Repeat("x", 480))))
	}
	b.Writes[17] = write(18, strings.Repeat("y", 5000)) // alone over the proxy's limit
	fails := send(b)
	if len(fails) != 1 || len(fails[0].Writes) != 1 || fails[0].Writes[0] != 17 || fails[0].Code != "payload_too_large" {
		t.Fatalf("failures %+v, want write 17 refused as payload_too_large", fails)
	}
	if strings.Contains(fails[0].Message, "nginx") {
		t.Errorf("the refusal copies the proxy's page: %s", fails[0].Message)
	}
	docs := f.meili.Documents("items")
	if len(docs) != 39 {
		t.Fatalf("%d documents in the index, want 39", len(docs))
	}
	for i, d := range docs { // sorted by id
		want := int64(i + 1)
		if want >= 18 {
			want++
		}
		if fmt.Sprint(d["id"]) != fmt.Sprint(want) {
			t.Fatalf("document %d is %v, want id %d", i, d["id"], want)
		}
	}

	// The next batch is cut under the size learnt: no 413 again.
	f.reset()
	b = sink.Batch{}
	for i := int64(100); i < 140; i++ {
		b.Writes = append(b.Writes, write(i, strings.Repeat("z", 480)))
	}
	if fails := send(b); len(fails) > 0 {
		t.Fatalf("failures %+v", fails)
	}
	posts := 0
	for _, r := range f.seen {
		if r.Method == http.MethodPost {
			posts++
			if r.ContentLength > 4000 || r.ContentLength <= 0 {
				t.Errorf("a body of %d bytes went after the 413s taught 4000", r.ContentLength)
			}
		}
	}
	if posts < 5 {
		t.Errorf("%d posts for 20 kB of documents under a 4000-byte limit", posts)
	}

	// Deletes of long ids: split alike.
	var ids []string
	b = sink.Batch{}
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("%03d%s", i, strings.Repeat("k", 400))
		ids = append(ids, id)
		b.Writes = append(b.Writes, sink.Write{SourceID: del(id).SourceID, Doc: map[string]any{"id": id}})
	}
	if fails := send(b); len(fails) > 0 {
		t.Fatalf("failures %+v", fails)
	}
	for i := range b.Writes {
		b.Writes[i] = del(ids[i])
	}
	if fails := send(b); len(fails) > 0 {
		t.Fatalf("delete failures %+v", fails)
	}
	if n := len(f.meili.Documents("items")); n != 39+40 {
		t.Fatalf("%d documents after the deletes, want %d", n, 39+40)
	}
}

// A result nested deeper than Meilisearch indexes (a field under
// serde_json's recursion limit of 128) would fail its whole batch with an
// internal error, retried for ever: it is refused before sending, on its
// own, and the rest of the batch lands. 128 levels, the document counted,
// still go.
func TestATooDeepDocumentIsRefusedBeforeSending(t *testing.T) {
	ctx, srv, mc := startMeili(t)
	dst := meili.NewSink(mc, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
	nested := func(id int64, levels int) sink.Write {
		w := write(id, "")
		// {"id":N,"v":[[...]]}: the document, then levels-1 arrays.
		w.Doc = rawJSON(fmt.Sprintf(`{"id":%d,"v":%s1%s}`, id, strings.Repeat("[", levels-1), strings.Repeat("]", levels-1)))
		return w
	}
	b := sink.Batch{Writes: []sink.Write{write(1, "a"), nested(2, 129), nested(3, 128), write(4, "d")}}
	r, err := dst.Send(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	fails, err := dst.Wait(ctx, r)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if len(fails) != 1 || len(fails[0].Writes) != 1 || fails[0].Writes[0] != 1 || fails[0].Code != meili.CodeTooDeep {
		t.Fatalf("failures %+v, want write 1 refused as %s", fails, meili.CodeTooDeep)
	}
	if n := len(srv.Documents("items")); n != 3 {
		t.Fatalf("%d documents, want 3", n)
	}
}

// Meilisearch refusing a payload as malformed names every document of the
// request (the engine bisects); alone, the one at fault.
func TestAMalformedPayloadIsADocumentRefusal(t *testing.T) {
	ctx, _, mc := startMeili(t)
	dst := meili.NewSink(mc, &jobdef.Job{Name: "items", Index: "items", PrimaryKey: "id"}, sink.Unguarded, nil)
	bad := write(2, "")
	bad.Doc = rawJSON(`{"id":2,"v":}`)
	for _, b := range []sink.Batch{
		{Writes: []sink.Write{write(1, "a"), bad, write(3, "c")}},
		{Writes: []sink.Write{bad}},
	} {
		r, err := dst.Send(ctx, b)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		fails, err := dst.Wait(ctx, r)
		if err != nil || len(fails) != 1 || len(fails[0].Writes) != len(b.Writes) || fails[0].Code != "malformed_payload" {
			t.Fatalf("%d writes: failures %+v, %v; want all refused as malformed_payload", len(b.Writes), fails, err)
		}
	}
}

// No error of the client shows the URL's credentials (userinfo, query
// string) or the API key, whatever went wrong: no answer, a proxy's page
// echoing the request, Meilisearch's message, a timeout. They still reach
// the server with every request.
func TestErrorsNeverShowSecrets(t *testing.T) {
	const pw, qkey, key = "s3cretpw", "q5ecretval", "m4sterkey"
	var mu sync.Mutex
	var got []*http.Request
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		echoed := r.Method + " " + r.URL.String() + " " + r.Header.Get("Authorization")
		switch {
		case strings.HasPrefix(r.URL.Path, "/indexes/json"):
			w.Header().Set("Content-Type", jsonCT)
			w.WriteHeader(500)
			fmt.Fprint(w, meiliErr("internal", "internal", echoed))
		case strings.HasPrefix(r.URL.Path, "/indexes/slow"):
			time.Sleep(time.Second)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			fmt.Fprint(w, "<html>"+echoed+"</html>")
		}
	}))
	defer echo.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	withSecrets := func(base string) string {
		u, _ := url.Parse(base)
		return "http://user:" + pw + "@" + u.Host + "/?token=" + qkey
	}
	for _, c := range []struct{ base, index string }{
		{echo.URL, "html"}, {echo.URL, "json"}, {echo.URL, "slow"}, {closed.URL, "items"},
	} {
		client := meili.NewClientWithOptions(withSecrets(c.base), key, short)
		dst := meili.NewSink(client, &jobdef.Job{Name: "items", Index: c.index, PrimaryKey: "id"}, sink.Unguarded, nil)
		_, sendErr := dst.Send(ctx, sink.Batch{Writes: []sink.Write{write(1, "a")}})
		_, healthErr := client.Health(ctx)
		for _, err := range []error{dst.Prepare(ctx), sendErr, healthErr} {
			if err == nil {
				t.Fatalf("%s: no error", c.index)
			}
			text := err.Error()
			for _, secret := range []string{pw, qkey, key} {
				if strings.Contains(text, secret) {
					t.Errorf("%s: the error shows %q: %s", c.index, secret, text)
				}
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, r := range got {
		if r.URL.Query().Get("token") != qkey || r.Header.Get("Authorization") != "Bearer "+key {
			t.Fatalf("a request went without the URL's query or the key: %s %s", r.Method, r.URL.Path)
		}
	}
}
