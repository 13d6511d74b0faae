package meili

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// ReindexSuffix names the temporary index of a swap reindex: <uid>__reindex.
const ReindexSuffix = "__reindex"

// Sink writes a search job into its Meilisearch index. A batch is at
// most two tasks (one document addition, one delete-batch: the keys of a
// batch are distinct, so their order does not matter); durable means every
// task succeeded.
type Sink struct {
	client  meilisearch.ServiceManager
	direct  *meiliClient // client as NewClient made it, or nil
	job     *transform.Job
	uid     string // the index written
	live    string // the job's index
	pk      string
	inPlace bool // staged in place (the live index)
	staged  bool
	log     hclog.Logger
}

var (
	_ sink.Sink   = (*Sink)(nil)
	_ sink.Staged = (*Sink)(nil)
)

// NewSink returns the sink of a search job: index job.Index, primary
// key job.PrimaryKey. The client is shared (it is safe for concurrent use);
// give it meilisearch.DisableRetries() or not as you like: the engine
// retries 5xx and connection errors itself.
func NewSink(client meilisearch.ServiceManager, job *transform.Job, logger hclog.Logger) sink.Sink {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	pk := job.PrimaryKey
	if pk == "" {
		pk = transform.DefaultPrimaryKey
	}
	uid := job.Index
	if uid == "" {
		uid = job.Name
	}
	direct, _ := client.(*meiliClient)
	return &Sink{client: client, direct: direct, job: job, uid: uid, live: uid, pk: pk, log: logger.With("index", uid)}
}

// getSettings returns uid's settings as Meilisearch sends them (GET
// /indexes/{uid}/settings), every key kept.
func (s *Sink) getSettings(ctx context.Context, uid string) (json.RawMessage, error) {
	if s.direct == nil {
		set, err := s.client.Index(uid).GetSettings(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(set)
	}
	return s.direct.call(ctx, http.MethodGet, "/indexes/"+uid+"/settings", "GetSettings", nil, http.StatusOK)
}

// updateSettings sends settings (a JSON object) to uid as they are (PATCH
// /indexes/{uid}/settings). Through meilisearch-go's Settings struct a key
// it does not know would be dropped, and a false facetSearch too
// (omitempty): a reindex would then reset the live index's facetSearch, and
// a misspelt key in a transform's settings would be ignored instead of
// refused. A client not made by NewClient (tests) still goes through
// the struct.
func (s *Sink) updateSettings(ctx context.Context, uid string, settings json.RawMessage) (*meilisearch.TaskInfo, error) {
	if s.direct == nil {
		set := &meilisearch.Settings{}
		if err := json.Unmarshal(settings, set); err != nil {
			return nil, errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "settings are not Meilisearch settings")
		}
		return s.client.Index(uid).UpdateSettings(ctx, set)
	}
	b, err := s.direct.call(ctx, http.MethodPatch, "/indexes/"+uid+"/settings", "UpdateSettings", settings, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	ti := &meilisearch.TaskInfo{}
	if err := json.Unmarshal(b, ti); err != nil {
		return nil, fmt.Errorf("update settings of %s: %w", uid, err)
	}
	return ti, nil
}

// classify turns a meilisearch-go error into the engine's: CONFIG_INVALID
// for what retrying cannot fix (auth, a bad index uid), FAILED (retried)
// otherwise.
func (s *Sink) classify(err error, what string) error {
	if err == nil {
		return nil
	}
	var me *meilisearch.Error
	if errors.As(err, &me) {
		switch me.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return &errs.Error{Code: errs.ConfigInvalid, Job: s.job.Name, Err: err, Setting: "MEILISTREAM_MEILI_API_KEY",
				Msg: what + ": Meilisearch refused the API key (MEILISTREAM_MEILI_API_KEY)"}
		}
		switch string(me.APIError.Code) {
		case "invalid_index_uid":
			return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: invalid index uid %q", what, s.uid)
		}
	}
	return errs.Wrap(errs.Failed, s.job.Name, err, "%s", what)
}

func apiCode(err error) string {
	var me *meilisearch.Error
	if errors.As(err, &me) {
		return string(me.APIError.Code)
	}
	return ""
}

// waitTask polls a task until it finishes, retrying transient errors until
// ctx ends. Polls start at 2ms and back off to 50ms: a batch's latency is
// mostly this wait.
func (s *Sink) waitTask(ctx context.Context, uid int64) (*meilisearch.Task, error) {
	delay := 2 * time.Millisecond
	failures := 0
	for {
		t, err := s.client.GetTask(ctx, uid)
		if err == nil {
			failures = 0
			if t.Status != meilisearch.TaskStatusEnqueued && t.Status != meilisearch.TaskStatusProcessing {
				return t, nil
			}
		} else {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			var me *meilisearch.Error
			if errors.As(err, &me) && me.StatusCode >= 400 && me.StatusCode < 500 {
				return nil, s.classify(err, fmt.Sprintf("read task %d", uid))
			}
			failures++
			if failures == 1 || failures%50 == 0 {
				s.log.Warn("reading a task failed; retrying", "task", uid, "error", err)
			}
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, context.Cause(ctx)
		case <-timer.C:
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// waitOK waits for an administrative task and requires success, except for
// the codes in ok.
func (s *Sink) waitOK(ctx context.Context, ti *meilisearch.TaskInfo, what string, ok ...string) error {
	t, err := s.waitTask(ctx, ti.TaskUID)
	if err != nil {
		return err
	}
	if t.Status == meilisearch.TaskStatusSucceeded {
		return nil
	}
	for _, c := range ok {
		if string(t.Error.Code) == c {
			return nil
		}
	}
	return errs.New(errs.Failed, s.job.Name, "%s: task %d %s: %s: %s", what, t.UID, t.Status, t.Error.Code, t.Error.Message)
}

// Prepare creates the index with its primary key when missing and applies
// the settings the transform declares; otherwise it leaves settings alone.
func (s *Sink) Prepare(ctx context.Context) error {
	if s.staged {
		return nil
	}
	if err := s.ensureIndex(ctx, s.uid); err != nil {
		return err
	}
	if s.job.Settings != nil {
		return s.applySettings(ctx, s.uid, nil)
	}
	return nil
}

func (s *Sink) ensureIndex(ctx context.Context, uid string) error {
	info, err := s.client.GetIndex(ctx, uid)
	if err == nil {
		if info.PrimaryKey != "" && info.PrimaryKey != s.pk {
			return errs.New(errs.ConfigInvalid, s.job.Name, "index %q has primary key %q but the job's is %q (primaryKey in the transform file)", uid, info.PrimaryKey, s.pk)
		}
		return nil
	}
	if apiCode(err) != "index_not_found" {
		return s.classify(err, "read index "+uid)
	}
	ti, err := s.client.CreateIndex(ctx, &meilisearch.IndexConfig{Uid: uid, PrimaryKey: s.pk})
	if err != nil {
		return s.classify(err, "create index "+uid)
	}
	return s.waitOK(ctx, ti, "create index "+uid, "index_already_exists")
}

// applySettings sets uid's settings: the job's declared ones, else from
// (copied from another index, as Meilisearch sent them).
func (s *Sink) applySettings(ctx context.Context, uid string, from json.RawMessage) error {
	set, what := from, "copy the settings of "+s.live+" to "+uid
	if s.job.Settings != nil {
		b, err := json.Marshal(s.job.Settings)
		if err != nil {
			return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "settings")
		}
		set, what = b, "apply the transform's settings to "+uid
	}
	if set == nil {
		return nil
	}
	ti, err := s.updateSettings(ctx, uid, set)
	var me *meilisearch.Error
	if errors.As(err, &me) && me.StatusCode == http.StatusBadRequest {
		// An unknown key, a value of the wrong shape: Meilisearch's message
		// names it, and only the settings can fix it.
		return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: Meilisearch refused them: %s", what, me.APIError.Message)
	}
	if errs.CodeOf(err) == errs.ConfigInvalid {
		return err
	}
	if err != nil {
		return s.classify(err, what)
	}
	if err := s.waitOK(ctx, ti, what); err != nil {
		return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "apply settings")
	}
	return nil
}

// meiliTask is one task of a sent batch and the batch positions it holds.
type meiliTask struct {
	uid       int64
	positions []int
	delete    bool
}

type meiliReceipt struct {
	tasks  []meiliTask
	failed []sink.DocFailure // refused at send time (a single document too large)
}

// Send enqueues b's upserts as one document addition and its deletes as
// one delete-batch.
func (s *Sink) Send(ctx context.Context, b sink.Batch) (sink.Receipt, error) {
	var (
		ups, dels []int
		ids       []string
	)
	for i := range b.Writes {
		if b.Writes[i].Delete {
			dels = append(dels, i)
		} else {
			ups = append(ups, i)
		}
	}
	r := &meiliReceipt{}
	if len(ups) > 0 {
		if err := s.sendDocs(ctx, b, ups, r); err != nil {
			return nil, err
		}
	}
	if len(dels) > 0 {
		ids = make([]string, 0, len(dels))
		for _, i := range dels {
			id, err := transform.IndexID(b.Writes[i].SourceID)
			if err != nil {
				continue // never written: nothing to delete
			}
			switch v := id.(type) {
			case string:
				ids = append(ids, v)
			case int64:
				ids = append(ids, strconv.FormatInt(v, 10))
			default:
				ids = append(ids, fmt.Sprint(v))
			}
		}
		ti, err := s.client.Index(s.uid).DeleteDocuments(ctx, ids, nil)
		if err != nil {
			return nil, s.classify(err, "delete documents")
		}
		r.tasks = append(r.tasks, meiliTask{uid: ti.TaskUID, positions: dels, delete: true})
	}
	return r, nil
}

// sendDocs enqueues the documents at positions as one addition; a payload
// Meilisearch finds too large is split in halves (one document too large
// is refused as a document failure).
func (s *Sink) sendDocs(ctx context.Context, b sink.Batch, positions []int, r *meiliReceipt) error {
	body, positions := s.encodeDocs(b, positions, r)
	if len(positions) == 0 {
		releaseBody(body)
		return nil
	}
	var (
		task int64
		err  error
	)
	if s.direct != nil {
		var reusable bool
		task, reusable, err = s.direct.addDocuments(ctx, s.uid, s.pk, body)
		if reusable {
			releaseBody(body)
		}
	} else {
		pk := s.pk
		var ti *meilisearch.TaskInfo
		ti, err = s.client.Index(s.uid).AddDocuments(ctx, body, &meilisearch.DocumentOptions{PrimaryKey: &pk})
		if err == nil {
			task = ti.TaskUID
		}
		// meilisearch-go copies a []byte body before it sends it: body
		// is free again.
		releaseBody(body)
	}
	if err != nil {
		if apiCode(err) == "payload_too_large" {
			if len(positions) == 1 {
				r.failed = append(r.failed, sink.DocFailure{Writes: positions, Code: "payload_too_large", Message: "the document alone is larger than Meilisearch's payload limit"})
				return nil
			}
			h := len(positions) / 2
			if err := s.sendDocs(ctx, b, positions[:h], r); err != nil {
				return err
			}
			return s.sendDocs(ctx, b, positions[h:], r)
		}
		return s.classify(err, "add documents")
	}
	r.tasks = append(r.tasks, meiliTask{uid: task, positions: positions})
	return nil
}

// bodies holds the buffers request bodies are encoded into (*[]byte), so a
// batch does not allocate (and the runtime zero and later return to the
// kernel) a body of hundreds of kilobytes each time.
var bodies sync.Pool

// maxPooledBody is the largest body buffer kept for reuse.
const maxPooledBody = 32 << 20

func takeBody(n int) []byte {
	if p, ok := bodies.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

// releaseBody gives buf back for reuse; the caller no longer uses it.
func releaseBody(buf []byte) {
	if cap(buf) > maxPooledBody || cap(buf) == 0 {
		return
	}
	bodies.Put(&buf)
}

// encodeDocs renders the documents at positions as one JSON array; a
// document that cannot be rendered is refused on its own (r.failed). It
// returns the positions encoded. The body comes from takeBody: give it back
// with releaseBody once sent.
func (s *Sink) encodeDocs(b sink.Batch, positions []int, r *meiliReceipt) ([]byte, []int) {
	buf := takeBody(len(positions) * 768)
	buf = append(buf, '[')
	sent := make([]int, 0, len(positions))
	for _, i := range positions {
		mark := len(buf)
		if len(sent) > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = transform.AppendJSON(buf, b.Writes[i].Doc); err != nil {
			buf = buf[:mark]
			r.failed = append(r.failed, sink.DocFailure{Writes: []int{i}, Code: "not_json", Message: err.Error()})
			continue
		}
		sent = append(sent, i)
	}
	buf = append(buf, ']')
	return buf, sent
}

// documentCode says whether a failed task's code is about a document (the
// per-document error path) rather than the index or the server.
func documentCode(code string) bool {
	switch code {
	case "missing_document_id", "max_fields_limit_exceeded", "payload_too_large", "malformed_payload":
		return true
	}
	return strings.HasPrefix(code, "invalid_document") || strings.HasPrefix(code, "invalid_vector")
}

// Wait waits for r's tasks. A document addition that failed for a document
// reason is one DocFailure naming all its documents (Meilisearch fails the
// whole task); primary key conflicts are CONFIG_INVALID; other failures are
// FAILED (the engine sends the batch again).
func (s *Sink) Wait(ctx context.Context, rc sink.Receipt) ([]sink.DocFailure, error) {
	r, ok := rc.(*meiliReceipt)
	if !ok || r == nil {
		return nil, nil
	}
	fails := append([]sink.DocFailure(nil), r.failed...)
	for _, mt := range r.tasks {
		t, err := s.waitTask(ctx, mt.uid)
		if err != nil {
			return nil, err
		}
		if t.Status == meilisearch.TaskStatusSucceeded {
			continue
		}
		code := string(t.Error.Code)
		switch {
		case mt.delete && code == "index_not_found":
			// Nothing to delete from.
		case documentCode(code):
			fails = append(fails, sink.DocFailure{Writes: mt.positions, Code: code, Message: t.Error.Message})
		case strings.HasPrefix(code, "index_primary_key"):
			return nil, errs.New(errs.ConfigInvalid, s.job.Name, "index %q: %s: %s", s.uid, code, t.Error.Message)
		default:
			return nil, errs.New(errs.Failed, s.job.Name, "index %q: task %d %s: %s: %s", s.uid, t.UID, t.Status, code, t.Error.Message)
		}
	}
	return fails, nil
}

// Keys pages through the index's ids (its primary key only) and yields the
// source _ids they stand for.
func (s *Sink) Keys(ctx context.Context, fn func(ids []bson.RawValue) error) error {
	const page = 1000
	idx := s.client.Index(s.uid)
	for offset := int64(0); ; offset += page {
		var res meilisearch.DocumentsResult
		err := idx.GetDocuments(ctx, &meilisearch.DocumentsQuery{Offset: offset, Limit: page, Fields: []string{s.pk}}, &res)
		if err != nil {
			if apiCode(err) == "index_not_found" {
				return nil
			}
			return s.classify(err, "list documents")
		}
		ids := make([]bson.RawValue, 0, len(res.Results))
		for _, hit := range res.Results {
			raw, ok := hit[s.pk]
			if !ok {
				continue
			}
			var v any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				continue
			}
			id, err := transform.ParseIndexID(v)
			if err != nil {
				s.log.Warn("index holds an id meilistream does not write; leaving it", "id", string(raw))
				continue
			}
			ids = append(ids, id)
		}
		if err := fn(ids); err != nil {
			return err
		}
		if int64(len(res.Results)) < page {
			return nil
		}
	}
}

// Stage returns the target of a reindex: with reindex: inplace the live
// index; otherwise <uid>__reindex, fresh (created with the job's primary
// key and the live index's settings, or the declared ones) or, when resume
// is true, as it is (ErrNoStage if it is gone).
func (s *Sink) Stage(ctx context.Context, resume bool) (sink.Staged, error) {
	if s.job.Reindex == "inplace" {
		c := *s
		c.staged, c.inPlace = true, true
		return &c, nil
	}
	tmp := s.live + ReindexSuffix
	c := *s
	c.staged, c.uid, c.log = true, tmp, s.log.With("staged", tmp)
	if resume {
		if _, err := s.client.GetIndex(ctx, tmp); err != nil {
			if apiCode(err) == "index_not_found" {
				return nil, sink.ErrNoStage
			}
			return nil, s.classify(err, "read index "+tmp)
		}
		return &c, nil
	}
	var from json.RawMessage
	if s.job.Settings == nil {
		set, err := s.getSettings(ctx, s.live)
		switch {
		case err == nil:
			from = set
		case apiCode(err) == "index_not_found":
		default:
			return nil, s.classify(err, "read settings of "+s.live)
		}
		if name := embedderWithKey(from); name != "" {
			return nil, errs.New(errs.ConfigInvalid, s.job.Name,
				"the embedder %q of index %s has an API key, which Meilisearch returns redacted, so a reindex cannot copy it into a new index: "+
					"give the job reindex: \"inplace\" (the index keeps its settings), or declare its settings, embedders included, in the transform file", name, s.live)
		}
	}
	if err := c.dropIndex(ctx, tmp); err != nil {
		return nil, err
	}
	if err := c.ensureIndex(ctx, tmp); err != nil {
		return nil, err
	}
	if err := c.applySettings(ctx, tmp, from); err != nil {
		return nil, err
	}
	return &c, nil
}

// embedderWithKey returns the name of an embedder in settings (as GET
// /indexes/{uid}/settings returns them) that has an API key, its own or a
// composite's sub-embedder's; "" when none has. Meilisearch redacts those
// keys when it returns them ("Do not use the redacted API key when updating
// settings", its settings reference), so copied they would break the
// embedder in the new index.
func embedderWithKey(settings json.RawMessage) string {
	var s struct {
		Embedders map[string]map[string]json.RawMessage `json:"embedders"`
	}
	if json.Unmarshal(settings, &s) != nil {
		return ""
	}
	hasKey := func(e map[string]json.RawMessage) bool {
		var k string
		return json.Unmarshal(e["apiKey"], &k) == nil && k != ""
	}
	names := slices.Sorted(maps.Keys(s.Embedders))
	for _, name := range names {
		e := s.Embedders[name]
		if hasKey(e) {
			return name
		}
		for _, sub := range []string{"searchEmbedder", "indexingEmbedder"} {
			var se map[string]json.RawMessage
			if json.Unmarshal(e[sub], &se) == nil && hasKey(se) {
				return name
			}
		}
	}
	return ""
}

func (s *Sink) dropIndex(ctx context.Context, uid string) error {
	ti, err := s.client.DeleteIndex(ctx, uid)
	if err != nil {
		if apiCode(err) == "index_not_found" {
			return nil
		}
		return s.classify(err, "delete index "+uid)
	}
	return s.waitOK(ctx, ti, "delete index "+uid, "index_not_found")
}

// InPlace reports whether the staged target is the live index.
func (s *Sink) InPlace() bool { return s.inPlace }

// Commit swaps the rebuilt index with the live one atomically
// (/swap-indexes; a rename when there is no live index yet), then deletes
// the old one. In place: nothing to do.
func (s *Sink) Commit(ctx context.Context) error {
	if !s.staged || s.inPlace {
		return nil
	}
	params := []*meilisearch.SwapIndexesParams{{Indexes: []string{s.live, s.uid}}}
	_, err := s.client.GetIndex(ctx, s.live)
	switch {
	case err == nil:
	case apiCode(err) == "index_not_found":
		params = []*meilisearch.SwapIndexesParams{{Indexes: []string{s.uid, s.live}, Rename: true}}
	default:
		return s.classify(err, "read index "+s.live)
	}
	ti, err := s.client.SwapIndexes(ctx, params)
	if err != nil {
		return s.classify(err, "swap indexes")
	}
	if err := s.waitOK(ctx, ti, "swap "+s.uid+" into "+s.live); err != nil {
		return err
	}
	if !params[0].Rename {
		if err := s.dropIndex(ctx, s.uid); err != nil {
			s.log.Warn("deleting the old index after the swap failed; delete it by hand", "index", s.uid, "error", err)
		}
	}
	return nil
}

// Discard deletes the temporary index. In place: nothing to do.
func (s *Sink) Discard(ctx context.Context) error {
	if !s.staged || s.inPlace {
		return nil
	}
	return s.dropIndex(ctx, s.uid)
}
