package meili

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// ReindexSuffix names the temporary index of a swap reindex: <uid>__reindex.
const ReindexSuffix = "__reindex"

// Sink writes a search job into its Meilisearch index. A batch is sent as
// document additions (one, or several in order when its body would be
// over the payload limit) and delete-batches; durable means every task
// succeeded.
type Sink struct {
	api     api
	opts    Options
	job     *jobdef.Job
	uid     string // the index written
	live    string // the job's index
	pk      string
	inPlace bool // staged in place (the live index)
	staged  bool
	limit   *learntLimit // shared with the sink's staged copies
	queues  *queues      // what is enqueued, per index; shared with them too
	log     hclog.Logger
}

// learntLimit is the request body size a 413 taught the job: the largest
// array of documents known not to be too large for Meilisearch or a proxy
// in front of it (0: none learnt). It only shrinks, for the job's life.
type learntLimit struct{ n atomic.Int64 }

var (
	_ sink.Sink   = (*Sink)(nil)
	_ sink.Staged = (*Sink)(nil)
)

// NewSink returns the sink of a search job: index job.Index, primary
// key job.PrimaryKey. The client is shared (it is safe for concurrent
// use): NewClient's, in production and tests alike, so that every
// request has its deadline, every answer is classified and a 413 splits
// the request. guard is checked right before each request (the job's
// lease, which these writes cannot be fenced by).
func NewSink(client *Client, job *jobdef.Job, guard sink.Guard, logger hclog.Logger) sink.Sink {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	pk := job.PrimaryKey
	if pk == "" {
		pk = jobdef.DefaultPrimaryKey
	}
	uid := job.Index
	if uid == "" {
		uid = job.Name
	}
	return &Sink{api: guarded{Client: client, guard: guard}, opts: client.opts, job: job, uid: uid, live: uid, pk: pk,
		limit: &learntLimit{}, queues: newQueues(), log: logger.With("index", uid)}
}

// classify turns a failed request into the engine's error: FAILED, which
// the engine retries with backoff, or CONFIG_INVALID, which stops the job
// (see the package doc's table).
func (s *Sink) classify(err error, what string) error {
	var e *Error
	if !errors.As(err, &e) {
		return errs.Wrap(errs.Failed, s.job.Name, err, "%s", what)
	}
	switch judge(e) {
	case wrongKey:
		return &errs.Error{Code: errs.ConfigInvalid, Job: s.job.Name, Err: err, Setting: "MEILISTREAM_MEILI_API_KEY",
			Msg: what + ": Meilisearch, or a proxy in front of it, refused the API key (MEILISTREAM_MEILI_API_KEY)"}
	case wrongURL:
		return &errs.Error{Code: errs.ConfigInvalid, Job: s.job.Name, Err: err, Setting: "MEILISTREAM_MEILI_URL",
			Msg: what + ": the answer is not from Meilisearch's API: MEILISTREAM_MEILI_URL must be its address (with the path of a proxy in front of it, if any)"}
	case refused:
		switch e.Code {
		case "invalid_index_uid":
			return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: invalid index uid %q (the transform's index, or the job's name)", what, s.uid)
		case "bad_request":
			return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: Meilisearch does not understand the request (meilistream needs Meilisearch 1.18 or newer)", what)
		}
		return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: Meilisearch refused the request, and sending it again cannot change that", what)
	}
	return errs.Wrap(errs.Failed, s.job.Name, err, "%s", what)
}

// waitTask polls a task until it finishes. Polls start at 2ms and back off
// to 50ms: a batch's latency is mostly this wait. A poll that fails for a
// reason that may pass is repeated (from 100ms, backing off to 2s) for
// Options.PollPatience; then the failure is returned, FAILED, so that the
// engine shows it and sends the batch again.
func (s *Sink) waitTask(ctx context.Context, uid int64) (*taskView, error) {
	delay, failDelay := 2*time.Millisecond, 100*time.Millisecond
	var failingSince time.Time
	for {
		t, err := s.api.getTask(ctx, uid)
		wait := delay
		switch {
		case err == nil:
			failingSince = time.Time{}
			if t.Status != taskEnqueued && t.Status != taskProcessing {
				s.queues.done(s.uid, uid)
				return t, nil
			}
			if delay < 50*time.Millisecond {
				delay *= 2
			}
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		default:
			what := fmt.Sprintf("read task %d of index %s", uid, s.uid)
			var e *Error
			if !errors.As(err, &e) {
				return nil, s.classify(err, what)
			}
			if e.Status == http.StatusNotFound && e.Code == "task_not_found" {
				// Deleted (a task deletion, or Meilisearch dropping the
				// oldest finished tasks): what it did is unknown.
				s.queues.done(s.uid, uid)
				return nil, errs.Wrap(errs.Failed, s.job.Name, err, "%s: the task is gone from Meilisearch's queue; its writes are sent again", what)
			}
			if judge(e) != retry {
				return nil, s.classify(err, what)
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
				s.log.Warn("reading a task failed; retrying", "task", uid, "error", err)
			} else if time.Since(failingSince) >= s.opts.PollPatience {
				return nil, errs.Wrap(errs.Failed, s.job.Name, err, "%s: polls have failed for %s", what, s.opts.PollPatience)
			}
			wait = failDelay
			failDelay = min(failDelay*2, 2*time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, context.Cause(ctx)
		case <-timer.C:
		}
	}
}

// waitOK waits for an administrative task (create, delete, settings) and
// requires success, except for the codes in ok. A task Meilisearch refused
// for what it asked (error type invalid_request or auth) is
// CONFIG_INVALID: running it again cannot change that; other failures
// (internal, system, canceled) are FAILED.
func (s *Sink) waitOK(ctx context.Context, task int64, what string, ok ...string) error {
	t, err := s.waitTask(ctx, task)
	if err != nil {
		return err
	}
	if t.Status == taskSucceeded {
		return nil
	}
	te := t.err()
	if slices.Contains(ok, te.Code) {
		return nil
	}
	return s.taskFailed(t, what)
}

// taskFailed is the error of a failed or canceled administrative task.
func (s *Sink) taskFailed(t *taskView, what string) error {
	te := t.err()
	if t.Status == taskCanceled {
		return errs.New(errs.Failed, s.job.Name, "%s: task %d was canceled (by another client of Meilisearch); running it again", what, t.UID)
	}
	err := errs.New(errs.Failed, s.job.Name, "%s: task %d %s: %s: %s", what, t.UID, t.Status, te.Code, te.Message)
	if te.Type == "invalid_request" || te.Type == "auth" {
		return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "Meilisearch refused it, and running it again cannot change that")
	}
	return err
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
	pk, err := s.api.getIndex(ctx, uid)
	if err == nil {
		if pk != "" && pk != s.pk {
			return errs.New(errs.ConfigInvalid, s.job.Name, "index %q has primary key %q but the job's is %q (primaryKey in the transform file)", uid, pk, s.pk)
		}
		return nil
	}
	if !isCode(err, "index_not_found") {
		return s.classify(err, "read index "+uid)
	}
	task, err := s.api.createIndex(ctx, uid, s.pk)
	if err != nil {
		return s.classify(err, "create index "+uid)
	}
	return s.waitOK(ctx, task, "create index "+uid, "index_already_exists")
}

// applySettings sets uid's settings: the job's declared ones, else from
// (copied from another index, as Meilisearch sent them). Through
// NewClient's client they go as written: through meilisearch-go's
// Settings struct a key it does not know would be dropped, and a false
// facetSearch too (omitempty), so a reindex would reset the live index's
// facetSearch, and a misspelt key would be ignored instead of refused.
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
	task, err := s.api.updateSettings(ctx, uid, set)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusBadRequest {
		// An unknown key, a value of the wrong shape: Meilisearch's message
		// names it, and only the settings can fix it.
		if name := settingOfCode(e.Code); name != "" {
			return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: Meilisearch refused them, the setting %s (%s): %s", what, name, e.Code, e.Message)
		}
		return errs.Wrap(errs.ConfigInvalid, s.job.Name, err, "%s: Meilisearch refused them: %s", what, e.Message)
	}
	if err != nil {
		return s.classify(err, what)
	}
	return s.waitOK(ctx, task, what)
}

// settingOfCode names the setting of a Meilisearch invalid_settings_*
// error code, as the transform file writes it: invalid_settings_ranking_rules
// is rankingRules (Meilisearch's codes are the settings' keys in snake
// case, crates/meilisearch-types/src/error.rs). "" for any other code.
func settingOfCode(code string) string {
	rest, ok := strings.CutPrefix(code, "invalid_settings_")
	if !ok || rest == "" {
		return ""
	}
	parts := strings.Split(rest, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// meiliTask is one task of a sent batch and the batch positions it holds.
type meiliTask struct {
	uid       int64
	positions []int
	delete    bool
}

type meiliReceipt struct {
	tasks  []meiliTask
	failed []sink.DocFailure // refused before or at sending
}

// maxBody is the largest request body to send: Options.MaxPayloadBytes,
// or less when a 413 taught the job less.
func (s *Sink) maxBody() int {
	n := s.opts.MaxPayloadBytes
	if l := s.limit.n.Load(); l > 0 && l < n {
		n = l
	}
	return int(min(n, int64(^uint(0)>>1)))
}

// learn remembers that a body of n bytes holding several documents was
// refused as too large: from now on the job sends at most half of it,
// which a few halvings bring under any limit.
func (s *Sink) learn(n int) {
	half := int64(n / 2)
	for {
		cur := s.limit.n.Load()
		if cur != 0 && cur <= half {
			return
		}
		if s.limit.n.CompareAndSwap(cur, half) {
			s.log.Warn("Meilisearch, or a proxy in front of it, refused a request body as too large; sending smaller ones from now on",
				"refused_bytes", n, "max_bytes", half)
			return
		}
	}
}

// Send enqueues b's upserts as document additions and its deletes as
// delete-batches, each request under the payload limit, in order. A 413
// (Meilisearch's payload_too_large, or a proxy's page) splits the request
// in halves, sent in order, and the limit learnt holds for the job's
// life; a document too large alone is refused (payload_too_large), as is
// one nested deeper than MaxDocumentDepth (document_too_deep), before
// anything is sent. Errors are FAILED (nothing of b may be assumed
// accepted: the engine sends it again) or CONFIG_INVALID.
func (s *Sink) Send(ctx context.Context, b sink.Batch) (sink.Receipt, error) {
	var ups, dels []int
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
		if err := s.sendDeletes(ctx, b, dels, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// sendDocs enqueues the documents at positions as additions of at most
// maxBody bytes each.
func (s *Sink) sendDocs(ctx context.Context, b sink.Batch, positions []int, r *meiliReceipt) error {
	c := &chunker{max: s.maxBody(), single: s.opts.MaxPayloadBytes, hint: len(positions), bytes: jsonBytes(b.Writes, positions), send: func(body []byte, chunk []int) error {
		return s.sendChunk(ctx, b, body, chunk, r)
	}}
	for _, i := range positions {
		if err := c.addDoc(i, b.Writes[i].Doc); err != nil {
			releaseBody(c.buf)
			return err
		}
	}
	err := c.flush()
	r.failed = append(r.failed, c.failed...)
	return err
}

// jsonBytes is what the documents at positions take in an array, when
// each is JSON already (the transform's output); 0 when one is not.
func jsonBytes(writes []sink.Write, positions []int) int {
	n := 0
	for _, i := range positions {
		doc, ok := writes[i].Doc.(json.RawMessage)
		if !ok {
			return 0
		}
		n += len(doc) + 1
	}
	return n
}

// sendChunk posts one array of documents. A 413 splits it; Meilisearch
// refusing the payload as malformed names its documents, which the engine
// bisects to find the one at fault.
func (s *Sink) sendChunk(ctx context.Context, b sink.Batch, body []byte, positions []int, r *meiliReceipt) error {
	size := len(body)
	if err := s.admit(ctx, size); err != nil {
		releaseBody(body)
		return err
	}
	task, reusable, err := s.api.addDocuments(ctx, s.uid, s.pk, body)
	if reusable {
		releaseBody(body)
	}
	if err == nil {
		s.queues.add(s.uid, task, int64(size))
		r.tasks = append(r.tasks, meiliTask{uid: task, positions: positions})
		return nil
	}
	var e *Error
	switch {
	case !errors.As(err, &e):
		return s.classify(err, "add documents to index "+s.uid)
	case e.Status == http.StatusRequestEntityTooLarge:
		if len(positions) == 1 {
			r.failed = append(r.failed, sink.DocFailure{Writes: positions, Code: CodePayloadTooLarge,
				Message: fmt.Sprintf("the document alone (%d bytes) is more than Meilisearch, or a proxy in front of it, accepts: %v", size-2, e)})
			return nil
		}
		s.learn(size)
		h := len(positions) / 2
		if err := s.sendDocs(ctx, b, positions[:h], r); err != nil {
			return err
		}
		return s.sendDocs(ctx, b, positions[h:], r)
	case e.Code == "malformed_payload":
		r.failed = append(r.failed, sink.DocFailure{Writes: positions, Code: e.Code, Message: e.Message})
		return nil
	case e.Code == "bad_request":
		// On this route, a body that arrived cut short (actix's
		// IncompleteError, crates/meilisearch/src/error.rs): a
		// connection's failure, not the request's.
		return errs.Wrap(errs.Failed, s.job.Name, err, "add documents to index %s", s.uid)
	}
	return s.classify(err, "add documents to index "+s.uid)
}

// sendDeletes enqueues the deletes at positions as delete-batches of at
// most maxBody bytes each.
func (s *Sink) sendDeletes(ctx context.Context, b sink.Batch, positions []int, r *meiliReceipt) error {
	c := &chunker{max: s.maxBody(), single: s.opts.MaxPayloadBytes, hint: len(positions), send: func(body []byte, chunk []int) error {
		return s.sendIDs(ctx, b, body, chunk, r)
	}}
	for _, i := range positions {
		id, err := jobdef.IndexID(b.Writes[i].SourceID)
		if err != nil {
			continue // never written: nothing to delete
		}
		var key string
		switch v := id.(type) {
		case string:
			key = v
		case int64:
			key = strconv.FormatInt(v, 10)
		default:
			key = fmt.Sprint(v)
		}
		if err := c.addID(i, key); err != nil {
			releaseBody(c.buf)
			return err
		}
	}
	err := c.flush()
	r.failed = append(r.failed, c.failed...)
	return err
}

func (s *Sink) sendIDs(ctx context.Context, b sink.Batch, body []byte, positions []int, r *meiliReceipt) error {
	size := len(body)
	if err := s.admit(ctx, size); err != nil {
		releaseBody(body)
		return err
	}
	task, err := s.api.deleteDocuments(ctx, s.uid, body)
	releaseBody(body)
	if err == nil {
		s.queues.add(s.uid, task, int64(size))
		r.tasks = append(r.tasks, meiliTask{uid: task, positions: positions, delete: true})
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusRequestEntityTooLarge {
		if len(positions) == 1 {
			r.failed = append(r.failed, sink.DocFailure{Writes: positions, Code: CodePayloadTooLarge,
				Message: fmt.Sprintf("a delete of one id (%d bytes) is more than Meilisearch, or a proxy in front of it, accepts: %v", size, e)})
			return nil
		}
		s.learn(size)
		h := len(positions) / 2
		if err := s.sendDeletes(ctx, b, positions[:h], r); err != nil {
			return err
		}
		return s.sendDeletes(ctx, b, positions[h:], r)
	}
	return s.classify(err, "delete documents from index "+s.uid)
}

// documentCode says whether a failed task's code is about a document (the
// per-document error path) rather than the index or the server.
func documentCode(code string) bool {
	switch code {
	case "missing_document_id", "max_fields_limit_exceeded", "payload_too_large", "malformed_payload", "too_many_vectors", "vector_embedding_error":
		return true
	}
	return strings.HasPrefix(code, "invalid_document") || strings.HasPrefix(code, "invalid_vector")
}

// Wait waits for r's tasks. A task that failed for a reason of its
// documents (Meilisearch fails the whole task) is one DocFailure naming
// all its writes, which the engine bisects; so is any other refusal of
// Meilisearch's (error type invalid_request), which only the documents
// can have caused. Primary key conflicts are CONFIG_INVALID; other
// failures (internal, system, a canceled task) are FAILED (the engine
// sends the batch again).
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
		if t.Status == taskSucceeded {
			continue
		}
		te := t.err()
		switch {
		case t.Status == taskCanceled:
			return nil, errs.New(errs.Failed, s.job.Name, "index %q: task %d was canceled (by another client of Meilisearch); its writes are sent again", s.uid, t.UID)
		case mt.delete && te.Code == "index_not_found":
			// Nothing to delete from.
		case strings.HasPrefix(te.Code, "index_primary_key"):
			return nil, errs.New(errs.ConfigInvalid, s.job.Name, "index %q: %s: %s", s.uid, te.Code, te.Message)
		case documentCode(te.Code), te.Type == "invalid_request":
			fails = append(fails, sink.DocFailure{Writes: mt.positions, Code: te.Code, Message: te.Message})
		case te.Type == "auth":
			return nil, errs.New(errs.ConfigInvalid, s.job.Name, "index %q: task %d: %s: %s", s.uid, t.UID, te.Code, te.Message)
		default:
			return nil, errs.New(errs.Failed, s.job.Name, "index %q: task %d %s: %s: %s", s.uid, t.UID, t.Status, te.Code, te.Message)
		}
	}
	return fails, nil
}

// Keys pages through the index's ids (its primary key only) and yields the
// source _ids they stand for.
//
// Meilisearch pages its documents by offset in its internal docid order
// (not the primary key's; sorting needs sortableAttributes, a settings
// change). A document keeps its docid, so the order of the documents that
// stay is fixed; but a delete before the offset shifts the pages after it
// back, and a new document may take a freed docid before it (milli's
// AvailableIds), shifting them on. Paging by offset alone could then skip
// a document. So each page after the first is read from the last id of
// the page before (the anchor): when the page does not start with it,
// the walk finds where the previous page's ids are now (keysPlace) and
// goes on after the last one still there. Each page is one read of the
// index, so the ids after the anchor in it are all the documents after
// it then: a document the index held for the whole walk is yielded.
func (s *Sink) Keys(ctx context.Context, fn func(ids []bson.RawValue) error) error {
	return s.walkKeys(ctx, keysPage, fn)
}

// keysPage is how many ids a page of the id walk reads; keysReach how
// many pages either side of where the previous page's ids were it looks
// for them (keysPlace); keysRestarts how often it reads the index again
// from the start when they are not there before it gives up.
const (
	keysPage     = 1000
	keysReach    = 16
	keysRestarts = 3
)

func (s *Sink) walkKeys(ctx context.Context, page int64, fn func(ids []bson.RawValue) error) error {
	var prev []string // the ids of the page yielded last, in order
	var anchor string // the one of them the next page starts from
	var offset int64  // where the first id after the anchor is, if nothing moved
	restarts := 0
	for {
		start, limit := offset, page
		if anchor != "" {
			start, limit = offset-1, page+1 // from the anchor
		}
		raws, err := s.fetchKeys(ctx, start, limit)
		if errors.Is(err, errNoIndex) {
			return nil
		}
		if err != nil {
			return err
		}
		if anchor != "" {
			if len(raws) == 0 || string(raws[0]) != anchor {
				// Something moved before the anchor: find the previous
				// page's ids again and read from the last one there.
				at, k, err := s.keysPlace(ctx, prev, offset-1, page)
				if err != nil {
					return err
				}
				s.log.Debug("the index changed while its ids were read; going on from where the last ids read are now", "expected", offset-1, "found", at)
				offset, anchor = at+1, k
				if at < 0 {
					// None of them is left near where they were: read
					// it all again (a consumer sees some ids twice,
					// none missing), a few times at most.
					if restarts++; restarts > keysRestarts {
						return s.classify(errors.New("the index changed too much while its ids were read (none of a page's ids was found again near its place); run it again"), "list the documents of index "+s.uid)
					}
					prev, anchor, offset = nil, "", 0
				}
				continue
			}
			raws = raws[1:]
		}
		ids := make([]bson.RawValue, 0, len(raws))
		seen := make(map[string]bool, len(prev))
		for _, k := range prev {
			seen[k] = true
		}
		next := make([]string, 0, len(raws))
		for _, raw := range raws {
			if raw == nil {
				continue
			}
			k := string(raw)
			next = append(next, k)
			if seen[k] {
				continue // the previous page's, met again after a move
			}
			if id, ok := s.sourceID(raw); ok {
				ids = append(ids, id)
			}
		}
		if err := fn(ids); err != nil {
			return err
		}
		if int64(len(raws)) < page {
			return nil
		}
		offset += int64(len(raws))
		prev, anchor = next, ""
		if last := raws[len(raws)-1]; last != nil {
			anchor = string(last)
		}
		// else a document without the primary key (Meilisearch holds
		// none; an index of another key might) cannot anchor the next
		// page: that step pages by offset alone.
	}
}

// errNoIndex: the walked index does not exist (nothing to yield).
var errNoIndex = errors.New("no index")

func (s *Sink) fetchKeys(ctx context.Context, offset, limit int64) ([]json.RawMessage, error) {
	raws, err := s.api.fetchIDs(ctx, s.uid, s.pk, offset, limit)
	if err != nil {
		if isCode(err, "index_not_found") {
			return nil, errNoIndex
		}
		return nil, s.classify(err, "list the documents of index "+s.uid)
	}
	return raws, nil
}

// keysPlace finds where the ids of prev (a page read before) are now: the
// position and id of the last of them the index still holds, -1 when none
// is within keysReach pages of where they were. It reads a window around
// there, doubling it up to that reach (ids alone: a window of 16 pages
// is some hundred KB).
func (s *Sink) keysPlace(ctx context.Context, prev []string, near, page int64) (int64, string, error) {
	rank := make(map[string]int, len(prev))
	for i, k := range prev {
		rank[k] = i
	}
	for w := page; w <= keysReach*page; w *= 2 {
		lo := max(0, near-w)
		raws, err := s.fetchKeys(ctx, lo, near+w-lo+1)
		if errors.Is(err, errNoIndex) {
			return -1, "", nil
		}
		if err != nil {
			return 0, "", err
		}
		best, at := -1, int64(-1)
		for i, raw := range raws {
			if r, ok := rank[string(raw)]; ok && raw != nil && r > best {
				best, at = r, lo+int64(i)
			}
		}
		if at >= 0 {
			return at, prev[best], nil
		}
		if lo == 0 && int64(len(raws)) < near+w-lo+1 {
			return -1, "", nil // the whole index read: none is left
		}
	}
	return -1, "", nil
}

// sourceID is the source _id an index id stands for; false for one
// meilistream does not write (left alone, said in the log).
func (s *Sink) sourceID(raw json.RawMessage) (bson.RawValue, bool) {
	v, ok := decodeID(raw)
	if !ok {
		return bson.RawValue{}, false
	}
	id, err := jobdef.ParseIndexID(v)
	if err != nil {
		s.log.Warn("index holds an id meilistream does not write; leaving it", "id", cut(string(raw), 600))
		return bson.RawValue{}, false
	}
	return id, true
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
		if _, err := s.api.getIndex(ctx, tmp); err != nil {
			if isCode(err, "index_not_found") {
				return nil, sink.ErrNoStage
			}
			return nil, s.classify(err, "read index "+tmp)
		}
		return &c, nil
	}
	var from json.RawMessage
	if s.job.Settings == nil {
		set, err := s.api.getSettings(ctx, s.live)
		switch {
		case err == nil:
			from = set
		case isCode(err, "index_not_found"):
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
	task, err := s.api.deleteIndex(ctx, uid)
	if err != nil {
		if isCode(err, "index_not_found") {
			return nil
		}
		return s.classify(err, "delete index "+uid)
	}
	return s.waitOK(ctx, task, "delete index "+uid, "index_not_found")
}

// InPlace reports whether the staged target is the live index.
func (s *Sink) InPlace() bool { return s.inPlace }

// Commit swaps the rebuilt index with the live one atomically
// (/swap-indexes; a rename when there is no live index yet), then deletes
// the old one. In place: nothing to do. A swap that fails because an
// index appeared or vanished meanwhile is FAILED: the next attempt looks
// again.
func (s *Sink) Commit(ctx context.Context) error {
	if !s.staged || s.inPlace {
		return nil
	}
	a, b, rename := s.live, s.uid, false
	_, err := s.api.getIndex(ctx, s.live)
	switch {
	case err == nil:
	case isCode(err, "index_not_found"):
		a, b, rename = s.uid, s.live, true
	default:
		return s.classify(err, "read index "+s.live)
	}
	what := "swap " + s.uid + " into " + s.live
	task, err := s.api.swapIndexes(ctx, a, b, rename)
	if err != nil {
		return s.classify(err, what)
	}
	t, err := s.waitTask(ctx, task)
	if err != nil {
		return err
	}
	if t.Status != taskSucceeded {
		if code := t.err().Code; code == "index_not_found" || code == "index_already_exists" {
			return errs.New(errs.Failed, s.job.Name, "%s: task %d failed: %s: %s", what, t.UID, code, t.err().Message)
		}
		return s.taskFailed(t, what)
	}
	if !rename {
		if err := s.dropIndex(ctx, s.uid); err != nil {
			s.log.Warn("deleting the old index after the swap failed; delete it by hand", "index", s.uid, "error", err)
		}
	}
	return nil
}

// DiscardStage deletes the temporary index a swap reindex of index uid
// staged (uid + ReindexSuffix), if it is there.
func (s *Sink) DiscardStage(ctx context.Context, uid string) error {
	// The uid comes from the state collection: only a plain index uid,
	// never one that is itself a staging index, names a target to drop.
	if !plainUID(uid) {
		return errs.New(errs.Failed, s.job.Name, "cannot delete the staged index of %q: not an index uid meilistream writes", uid)
	}
	return s.dropIndex(ctx, uid+ReindexSuffix)
}

// OnDDL has nothing to do: a search job's index is rebuilt by the
// reindex the engine starts once it has stopped the job as invalidated,
// and the engine logs the event itself.
func (s *Sink) OnDDL(context.Context, string) {}

// plainUID says whether uid is an index uid a job may write: 1 to 400
// characters of A-Z a-z 0-9 _ -, not ending in ReindexSuffix.
func plainUID(uid string) bool {
	if uid == "" || len(uid) > 400 || strings.HasSuffix(uid, ReindexSuffix) {
		return false
	}
	for _, r := range uid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Discard deletes the temporary index. In place: nothing to do.
func (s *Sink) Discard(ctx context.Context) error {
	if !s.staged || s.inPlace {
		return nil
	}
	return s.dropIndex(ctx, s.uid)
}
