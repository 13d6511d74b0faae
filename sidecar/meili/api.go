package meili

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/meilistream/meilistream/sidecar/sink"
)

// api is what the sink asks of Meilisearch, one method a route. Every
// error is an *Error, or the cause of ctx's end as it is.
type api interface {
	// getIndex returns the index's primary key ("" when it has none yet).
	getIndex(ctx context.Context, uid string) (primaryKey string, err error)
	createIndex(ctx context.Context, uid, primaryKey string) (task int64, err error)
	deleteIndex(ctx context.Context, uid string) (task int64, err error)
	// getSettings returns the settings as Meilisearch sends them, every key
	// kept.
	getSettings(ctx context.Context, uid string) (json.RawMessage, error)
	// updateSettings sends settings (a JSON object) as they are.
	updateSettings(ctx context.Context, uid string, settings json.RawMessage) (task int64, err error)
	// addDocuments posts body (a JSON array of documents) and reports
	// whether body may be reused.
	addDocuments(ctx context.Context, uid, primaryKey string, body []byte) (task int64, reusable bool, err error)
	// deleteDocuments posts body (a JSON array of ids) to delete-batch.
	deleteDocuments(ctx context.Context, uid string, body []byte) (task int64, err error)
	// fetchIDs returns a page of the index's documents' primary keys.
	fetchIDs(ctx context.Context, uid, primaryKey string, offset, limit int64) ([]json.RawMessage, error)
	// fetchDocs returns the whole documents a fetch request asks for
	// (body: {"ids": [...], "limit": n}, index ids as JSON), in the
	// index's order, those it holds only.
	fetchDocs(ctx context.Context, uid string, body []byte) ([]json.RawMessage, error)
	getTask(ctx context.Context, uid int64) (*taskView, error)
	swapIndexes(ctx context.Context, a, b string, rename bool) (task int64, err error)
}

// taskView is what the sink reads of a task (GET /tasks/{uid},
// crates/meilisearch-types/src/task_view.rs).
type taskView struct {
	UID        int64      `json:"uid"`
	Status     string     `json:"status"`
	Type       string     `json:"type"`
	CanceledBy *int64     `json:"canceledBy"`
	Error      *taskError `json:"error"`
}

type taskError struct {
	Message string `json:"message"`
	Code    string `json:"code"`
	Type    string `json:"type"`
}

// Task statuses (crates/meilisearch-types/src/tasks/mod.rs, Status).
const (
	taskEnqueued   = "enqueued"
	taskProcessing = "processing"
	taskSucceeded  = "succeeded"
	taskCanceled   = "canceled"
)

func (t *taskView) err() taskError {
	if t.Error == nil {
		return taskError{}
	}
	return *t.Error
}

// guarded is a job's view of the client: the sink's requests, each made
// only once the job's guard (the lease's check) allows it, right before
// it goes.
type guarded struct {
	*Client
	guard sink.Guard
}

var _ api = guarded{}

// do is the client's do with the guard checked right before the request.
func (c guarded) do(ctx context.Context, rq request) ([]byte, error) {
	rq.guard = c.guard.Check
	return c.Client.do(ctx, rq)
}

func indexPath(uid string) string { return "/indexes/" + url.PathEscape(uid) }

// summary reads a summarized task (202 Accepted) for its uid.
func summary(method, path string, b []byte) (int64, error) {
	var st struct {
		TaskUID *int64 `json:"taskUid"`
	}
	if json.Unmarshal(b, &st) != nil || st.TaskUID == nil {
		return 0, &Error{Method: method, Path: pathOnly(path), Status: http.StatusAccepted,
			Err: errors.New("the answer is not a Meilisearch task summary")}
	}
	return *st.TaskUID, nil
}

// write sends a request answered 202 with a summarized task.
func (c guarded) write(ctx context.Context, method, path string, body []byte) (int64, error) {
	b, err := c.do(ctx, request{method: method, path: path, body: body, want: http.StatusAccepted, timeout: c.opts.RequestTimeout})
	if err != nil {
		return 0, err
	}
	return summary(method, path, b)
}

func (c guarded) getIndex(ctx context.Context, uid string) (string, error) {
	p := indexPath(uid)
	b, err := c.do(ctx, request{method: http.MethodGet, path: p, want: http.StatusOK, timeout: c.opts.RequestTimeout})
	if err != nil {
		return "", err
	}
	var ix struct {
		UID        *string `json:"uid"`
		PrimaryKey *string `json:"primaryKey"`
	}
	if json.Unmarshal(b, &ix) != nil || ix.UID == nil {
		return "", &Error{Method: http.MethodGet, Path: p, Status: http.StatusOK, Err: errors.New("the answer is not a Meilisearch index")}
	}
	if ix.PrimaryKey == nil {
		return "", nil
	}
	return *ix.PrimaryKey, nil
}

func (c guarded) createIndex(ctx context.Context, uid, pk string) (int64, error) {
	body, _ := json.Marshal(map[string]string{"uid": uid, "primaryKey": pk})
	return c.write(ctx, http.MethodPost, "/indexes", body)
}

func (c guarded) deleteIndex(ctx context.Context, uid string) (int64, error) {
	return c.write(ctx, http.MethodDelete, indexPath(uid), nil)
}

func (c guarded) getSettings(ctx context.Context, uid string) (json.RawMessage, error) {
	p := indexPath(uid) + "/settings"
	b, err := c.do(ctx, request{method: http.MethodGet, path: p, want: http.StatusOK, timeout: c.opts.RequestTimeout})
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, &Error{Method: http.MethodGet, Path: p, Status: http.StatusOK, Err: errors.New("the answer is not JSON")}
	}
	return b, nil
}

func (c guarded) updateSettings(ctx context.Context, uid string, settings json.RawMessage) (int64, error) {
	return c.write(ctx, http.MethodPatch, indexPath(uid)+"/settings", settings)
}

// addDocuments posts body as meilisearch-go's AddDocuments does, with a
// deadline that grows with its size.
func (c guarded) addDocuments(ctx context.Context, uid, pk string, body []byte) (int64, bool, error) {
	p := indexPath(uid) + "/documents?" + url.Values{"primaryKey": {pk}}.Encode()
	tb := &trackedBody{closed: make(chan struct{})}
	tb.Reset(body)
	b, err := c.do(ctx, request{method: http.MethodPost, path: p, body: body, tracked: tb,
		want: http.StatusAccepted, timeout: c.opts.uploadTimeout(len(body))})
	free := func() bool {
		select {
		case <-tb.closed:
			return !tb.rewound.Load()
		default:
			return false
		}
	}
	if err != nil {
		return 0, free(), err
	}
	task, err := summary(http.MethodPost, p, b)
	return task, free(), err
}

func (c guarded) deleteDocuments(ctx context.Context, uid string, body []byte) (int64, error) {
	p := indexPath(uid) + "/documents/delete-batch"
	b, err := c.do(ctx, request{method: http.MethodPost, path: p, body: body, want: http.StatusAccepted, timeout: c.opts.uploadTimeout(len(body))})
	if err != nil {
		return 0, err
	}
	return summary(http.MethodPost, p, b)
}

func (c guarded) fetchIDs(ctx context.Context, uid, pk string, offset, limit int64) ([]json.RawMessage, error) {
	p := indexPath(uid) + "/documents/fetch"
	body, _ := json.Marshal(map[string]any{"offset": offset, "limit": limit, "fields": []string{pk}})
	b, err := c.do(ctx, request{method: http.MethodPost, path: p, body: body, want: http.StatusOK, timeout: c.opts.RequestTimeout})
	if err != nil {
		return nil, err
	}
	results := resultsOf(b)
	if results == nil {
		return nil, &Error{Method: http.MethodPost, Path: p, Status: http.StatusOK, Err: errors.New("the answer is not a page of documents")}
	}
	ids := make([]json.RawMessage, 0, len(results))
	for _, d := range results {
		raw, _ := memberOf(d, pk) // nil when missing: the caller skips it
		ids = append(ids, raw)
	}
	return ids, nil
}

func (c guarded) getTask(ctx context.Context, uid int64) (*taskView, error) {
	p := "/tasks/" + strconv.FormatInt(uid, 10)
	b, err := c.do(ctx, request{method: http.MethodGet, path: p, want: http.StatusOK, timeout: c.opts.PollTimeout})
	if err != nil {
		return nil, err
	}
	t := &taskView{}
	if json.Unmarshal(b, t) != nil || t.Status == "" {
		return nil, &Error{Method: http.MethodGet, Path: p, Status: http.StatusOK, Err: errors.New("the answer is not a Meilisearch task")}
	}
	return t, nil
}

func (c guarded) swapIndexes(ctx context.Context, a, b string, rename bool) (int64, error) {
	body, _ := json.Marshal([]map[string]any{{"indexes": []string{a, b}, "rename": rename}})
	return c.write(ctx, http.MethodPost, "/swap-indexes", body)
}

// isCode reports whether err is Meilisearch's error object with code.
func isCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
