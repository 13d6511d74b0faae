package meili

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/meilisearch/meilisearch-go"
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
	// fetchDocs returns the whole documents of ids (index ids: strings
	// or integers), in the index's order, those it holds only.
	fetchDocs(ctx context.Context, uid string, ids []any) ([]json.RawMessage, error)
	getTask(ctx context.Context, uid int64) (*taskView, error)
	swapIndexes(ctx context.Context, a, b string, rename bool) (task int64, err error)
	// options are the client's deadlines and limits.
	options() Options
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

var _ api = (*meiliClient)(nil)

func (c *meiliClient) options() Options { return c.opts }

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
func (c *meiliClient) write(ctx context.Context, method, path string, body []byte) (int64, error) {
	b, err := c.do(ctx, request{method: method, path: path, body: body, want: http.StatusAccepted, timeout: c.opts.RequestTimeout})
	if err != nil {
		return 0, err
	}
	return summary(method, path, b)
}

func (c *meiliClient) getIndex(ctx context.Context, uid string) (string, error) {
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

func (c *meiliClient) createIndex(ctx context.Context, uid, pk string) (int64, error) {
	body, _ := json.Marshal(map[string]string{"uid": uid, "primaryKey": pk})
	return c.write(ctx, http.MethodPost, "/indexes", body)
}

func (c *meiliClient) deleteIndex(ctx context.Context, uid string) (int64, error) {
	return c.write(ctx, http.MethodDelete, indexPath(uid), nil)
}

func (c *meiliClient) getSettings(ctx context.Context, uid string) (json.RawMessage, error) {
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

func (c *meiliClient) updateSettings(ctx context.Context, uid string, settings json.RawMessage) (int64, error) {
	return c.write(ctx, http.MethodPatch, indexPath(uid)+"/settings", settings)
}

// addDocuments posts body as meilisearch-go's AddDocuments does, with a
// deadline that grows with its size.
func (c *meiliClient) addDocuments(ctx context.Context, uid, pk string, body []byte) (int64, bool, error) {
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

func (c *meiliClient) deleteDocuments(ctx context.Context, uid string, body []byte) (int64, error) {
	p := indexPath(uid) + "/documents/delete-batch"
	b, err := c.do(ctx, request{method: http.MethodPost, path: p, body: body, want: http.StatusAccepted, timeout: c.opts.uploadTimeout(len(body))})
	if err != nil {
		return 0, err
	}
	return summary(http.MethodPost, p, b)
}

func (c *meiliClient) fetchIDs(ctx context.Context, uid, pk string, offset, limit int64) ([]json.RawMessage, error) {
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

func (c *meiliClient) getTask(ctx context.Context, uid int64) (*taskView, error) {
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

func (c *meiliClient) swapIndexes(ctx context.Context, a, b string, rename bool) (int64, error) {
	body, _ := json.Marshal([]map[string]any{{"indexes": []string{a, b}, "rename": rename}})
	return c.write(ctx, http.MethodPost, "/swap-indexes", body)
}

// goAPI is the sink's api on a meilisearch-go client not made by
// NewClient (the engine's tests use one): the same requests, with the
// same deadlines, and meilisearch-go's errors turned into *Error.
type goAPI struct {
	sm   meilisearch.ServiceManager
	opts Options
}

var _ api = (*goAPI)(nil)

func (g *goAPI) options() Options { return g.opts }

// call runs fn under a deadline of d and turns its error into an *Error
// for method and path.
func (g *goAPI) call(ctx context.Context, d time.Duration, method, path string, fn func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := fn(rctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	e := &Error{Method: method, Path: path}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) {
		e.Timeout = d
		return e
	}
	var me *meilisearch.Error
	if !errors.As(err, &me) {
		e.Err = err
		return e
	}
	switch me.ErrCode {
	case meilisearch.APIError:
		e.Status, e.Code, e.Type, e.Message = me.StatusCode, string(me.APIError.Code), me.APIError.Type, cut(me.APIError.Message, maxMessage)
	case meilisearch.APIErrorWithoutMessage:
		e.Status, e.BodyLen = me.StatusCode, len(me.ResponseToString)
		if me.ResponseToString == "empty response" {
			e.BodyLen = 0
		}
	case meilisearch.CommunicationError, meilisearch.TimeoutError:
		inner := me.OriginError
		var ue *url.Error
		if errors.As(inner, &ue) {
			inner = ue.Err
		}
		e.Err = inner
	default:
		e.Status = me.StatusCode
		e.Err = errors.New("the answer could not be read")
	}
	return e
}

func (g *goAPI) getIndex(ctx context.Context, uid string) (pk string, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodGet, indexPath(uid), func(ctx context.Context) error {
		info, err := g.sm.GetIndex(ctx, uid)
		if err == nil {
			pk = info.PrimaryKey
		}
		return err
	})
	return pk, err
}

func (g *goAPI) createIndex(ctx context.Context, uid, pk string) (task int64, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodPost, "/indexes", func(ctx context.Context) error {
		ti, err := g.sm.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: uid, PrimaryKey: pk})
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, err
}

func (g *goAPI) deleteIndex(ctx context.Context, uid string) (task int64, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodDelete, indexPath(uid), func(ctx context.Context) error {
		ti, err := g.sm.DeleteIndex(ctx, uid)
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, err
}

func (g *goAPI) getSettings(ctx context.Context, uid string) (set json.RawMessage, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodGet, indexPath(uid)+"/settings", func(ctx context.Context) error {
		s, err := g.sm.Index(uid).GetSettings(ctx)
		if err == nil {
			set, err = json.Marshal(s)
		}
		return err
	})
	return set, err
}

// updateSettings goes through meilisearch-go's Settings struct, which
// drops keys it does not know and a false facetSearch (omitempty):
// NewClient's client sends them as written.
func (g *goAPI) updateSettings(ctx context.Context, uid string, settings json.RawMessage) (task int64, err error) {
	set := &meilisearch.Settings{}
	if err := json.Unmarshal(settings, set); err != nil {
		return 0, &Error{Method: http.MethodPatch, Path: indexPath(uid) + "/settings", Status: http.StatusBadRequest,
			Code: "bad_request", Type: "invalid_request", Message: "the settings are not Meilisearch settings: " + err.Error()}
	}
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodPatch, indexPath(uid)+"/settings", func(ctx context.Context) error {
		ti, err := g.sm.Index(uid).UpdateSettings(ctx, set)
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, err
}

// addDocuments: meilisearch-go copies a []byte body before it sends it,
// so body is free again whatever happens.
func (g *goAPI) addDocuments(ctx context.Context, uid, pk string, body []byte) (task int64, reusable bool, err error) {
	err = g.call(ctx, g.opts.uploadTimeout(len(body)), http.MethodPost, indexPath(uid)+"/documents", func(ctx context.Context) error {
		ti, err := g.sm.Index(uid).AddDocuments(ctx, body, &meilisearch.DocumentOptions{PrimaryKey: &pk})
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, true, err
}

func (g *goAPI) deleteDocuments(ctx context.Context, uid string, body []byte) (task int64, err error) {
	var ids []string
	if err := json.Unmarshal(body, &ids); err != nil {
		return 0, &Error{Method: http.MethodPost, Path: indexPath(uid) + "/documents/delete-batch", Err: err}
	}
	err = g.call(ctx, g.opts.uploadTimeout(len(body)), http.MethodPost, indexPath(uid)+"/documents/delete-batch", func(ctx context.Context) error {
		ti, err := g.sm.Index(uid).DeleteDocuments(ctx, ids, nil)
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, err
}

func (g *goAPI) fetchIDs(ctx context.Context, uid, pk string, offset, limit int64) (ids []json.RawMessage, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodPost, indexPath(uid)+"/documents/fetch", func(ctx context.Context) error {
		var res meilisearch.DocumentsResult
		if err := g.sm.Index(uid).GetDocuments(ctx, &meilisearch.DocumentsQuery{Offset: offset, Limit: limit, Fields: []string{pk}}, &res); err != nil {
			return err
		}
		for _, hit := range res.Results {
			ids = append(ids, json.RawMessage(hit[pk]))
		}
		if ids == nil {
			ids = []json.RawMessage{}
		}
		return nil
	})
	return ids, err
}

func (g *goAPI) getTask(ctx context.Context, uid int64) (t *taskView, err error) {
	err = g.call(ctx, g.opts.PollTimeout, http.MethodGet, "/tasks/"+strconv.FormatInt(uid, 10), func(ctx context.Context) error {
		task, err := g.sm.GetTask(ctx, uid)
		if err != nil {
			return err
		}
		t = &taskView{UID: task.UID, Status: string(task.Status), Type: string(task.Type)}
		if task.Error.Code != "" {
			t.Error = &taskError{Message: task.Error.Message, Code: string(task.Error.Code), Type: task.Error.Type}
		}
		return nil
	})
	return t, err
}

func (g *goAPI) swapIndexes(ctx context.Context, a, b string, rename bool) (task int64, err error) {
	err = g.call(ctx, g.opts.RequestTimeout, http.MethodPost, "/swap-indexes", func(ctx context.Context) error {
		ti, err := g.sm.SwapIndexes(ctx, []*meilisearch.SwapIndexesParams{{Indexes: []string{a, b}, Rename: rename}})
		if err == nil {
			task = ti.TaskUID
		}
		return err
	})
	return task, err
}

// isCode reports whether err is Meilisearch's error object with code.
func isCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
