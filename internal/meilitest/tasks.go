package meilitest

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Task types and statuses, as serialized by Meilisearch
// (crates/meilisearch-types/src/tasks/mod.rs, Kind and Status).
const (
	kindDocumentAdditionOrUpdate = "documentAdditionOrUpdate"
	kindDocumentDeletion         = "documentDeletion"
	kindSettingsUpdate           = "settingsUpdate"
	kindIndexCreation            = "indexCreation"
	kindIndexDeletion            = "indexDeletion"
	kindIndexUpdate              = "indexUpdate"
	kindIndexSwap                = "indexSwap"
	kindIndexCompaction          = "indexCompaction"

	statusEnqueued   = "enqueued"
	statusProcessing = "processing"
	statusSucceeded  = "succeeded"
	statusFailed     = "failed"
	statusCanceled   = "canceled"
)

var allKinds = []string{"documentAdditionOrUpdate", "documentEdition", "documentDeletion",
	"settingsUpdate", "indexCreation", "indexDeletion", "indexUpdate", "indexSwap",
	"taskCancelation", "taskDeletion", "dumpCreation", "snapshotCreation", "export",
	"upgradeDatabase", "indexCompaction", "networkTopologyChange"}

var allStatuses = []string{statusEnqueued, statusProcessing, statusSucceeded, statusFailed, statusCanceled}

// detail is one key of a task's details, kept in Meilisearch's order.
type detail struct {
	key string
	val any // nil is JSON null
}

type task struct {
	uid        int64
	batchUID   int64 // -1 until a batch picks it up
	indexUID   string
	global     bool // indexUid is null (indexSwap)
	status     string
	kind       string
	details    []detail
	err        *apiError
	enqueuedAt time.Time
	startedAt  time.Time
	finishedAt time.Time
	meta       *string // customMetadata
	// canceledBy is the uid of the taskCancelation that canceled this
	// task, or -1.
	canceledBy int64
	// prio orders the queue: Meilisearch's scheduler takes task
	// cancelations first, then task deletions, then the rest
	// (index-scheduler's autobatcher and create_next_batch).
	prio int
	// batchable tasks (document writes on one index) may share a batch.
	batchable bool
	// apply runs the task with s.mu held for writing. It returns the
	// task's error, or nil and sets its finished details.
	apply func(t *task) *apiError
	// batchCheck, when set, runs before any task of the batch is applied
	// (s.mu held); an error fails the whole batch (an indexing error, as
	// opposed to a payload's own).
	batchCheck func() *apiError
}

func (t *task) setDetail(key string, val any) {
	for i := range t.details {
		if t.details[i].key == key {
			t.details[i].val = val
			return
		}
	}
	t.details = append(t.details, detail{key, val})
}

// enqueue registers a task and answers 202 with its summarized view
// (SummarizedTaskView, crates/meilisearch/src/routes/mod.rs).
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request, t *task) {
	s.enqueueWith(w, r, t, http.StatusAccepted, nil)
}

// enqueueWith registers a task, running registered (if set) with s.mu held
// once the task has its uid, and answers status with its summarized view.
func (s *Server) enqueueWith(w http.ResponseWriter, r *http.Request, t *task, status int, registered func()) {
	if m := r.URL.Query(); m.Has("customMetadata") {
		v := m.Get("customMetadata")
		t.meta = &v
	}
	s.mu.Lock()
	t.uid = int64(len(s.tasks))
	t.batchUID = -1
	t.canceledBy = -1
	t.status = statusEnqueued
	t.enqueuedAt = time.Now().UTC()
	s.tasks = append(s.tasks, t)
	s.queueInsert(t)
	if registered != nil {
		registered()
	}
	s.notifyLocked()
	b := make([]byte, 0, 160)
	b = append(b, `{"taskUid":`...)
	b = strconv.AppendInt(b, t.uid, 10)
	b = append(b, `,"indexUid":`...)
	if t.global {
		b = append(b, "null"...)
	} else {
		b = appendString(b, t.indexUID)
	}
	b = append(b, `,"status":"enqueued","type":`...)
	b = appendString(b, t.kind)
	b = append(b, `,"enqueuedAt":"`...)
	b = append(b, t.enqueuedAt.Format(time.RFC3339Nano)...)
	b = append(b, '"')
	if t.meta != nil {
		b = append(b, `,"customMetadata":`...)
		b = appendString(b, *t.meta)
	}
	b = append(b, '}')
	s.mu.Unlock()
	s.kick()
	writeRaw(w, status, b)
}

// queueInsert puts t in the queue after every task of its priority or a
// higher one (s.mu held).
func (s *Server) queueInsert(t *task) {
	i := len(s.queue)
	for i > 0 && s.queue[i-1].prio < t.prio {
		i--
	}
	s.queue = slices.Insert(s.queue, i, t)
}

func (s *Server) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// notifyLocked wakes WaitIdle callers; s.mu must be held for writing.
func (s *Server) notifyLocked() {
	close(s.progress)
	s.progress = make(chan struct{})
}

// worker processes the queue one batch at a time, in uid order. A batch is
// one task, or consecutive document writes (additions, updates, deletions by
// id) to one index, like Meilisearch's autobatcher
// (crates/index-scheduler/src/scheduler/autobatcher.rs). The tasks of a
// batch are still applied one after the other, each atomically, so batching
// never changes what is observed, only batchUid and the timestamps.
func (s *Server) worker() {
	for {
		select {
		case <-s.done:
			return
		case <-s.wake:
		}
		for s.processBatch() {
		}
	}
}

// processBatch processes one batch; it reports whether it did.
func (s *Server) processBatch() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	s.mu.Lock()
	if s.paused || len(s.queue) == 0 {
		s.mu.Unlock()
		return false
	}
	n := 1
	if first := s.queue[0]; first.batchable {
		for n < len(s.queue) && s.queue[n].batchable && s.queue[n].indexUID == first.indexUID {
			n++
		}
	}
	// A stop signal left from a batch that finished before it was seen
	// concerns no one now.
	select {
	case <-s.abort:
	default:
	}
	batch := slices.Clone(s.queue[:n])
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil // let the backing array go
	}
	now := time.Now().UTC()
	buid := s.nextBatch
	s.nextBatch++
	s.busy = map[string]bool{}
	for _, t := range batch {
		if !t.global {
			s.busy[t.indexUID] = true
		}
		t.batchUID = buid
		t.status = statusProcessing
		t.startedAt = now
	}
	rec := &batchRecord{uid: buid, tasks: batch, startedAt: now, strategy: batchStrategy(batch, s.queue)}
	s.batches = append(s.batches, rec)
	s.current = batch
	s.processing = len(batch)
	s.notifyLocked()
	s.mu.Unlock()

	if d := s.opts.TaskDelay; d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-s.abort:
			// A task cancelation that concerns this batch arrived:
			// Meilisearch stops processing (must_stop_processing) and the
			// batch's tasks go back to the queue, to be canceled or run
			// again after it.
			timer.Stop()
			s.mu.Lock()
			s.requeue(batch)
			s.batches = s.batches[:len(s.batches)-1]
			s.nextBatch--
			s.mu.Unlock()
			return true
		case <-s.done:
			timer.Stop()
			return false
		}
	}

	s.mu.Lock()
	touched := map[*index]bool{}
	// A FailNextTask error of type internal or system fails the whole
	// batch, none of it applied, every task with the same error: the
	// scheduler's tick patches all the batch's tasks with the error of a
	// failed process_batch ("In case of a failure we must get back and
	// patch all the tasks with the error", index-scheduler). Other codes
	// (a document's) fail that one task, as per-payload errors do.
	var batchErr *apiError
	if f := s.failTask; f != nil && (f.Type == "internal" || f.Type == "system") {
		batchErr, s.failTask = f, nil
	}
	for _, t := range batch {
		if batchErr == nil && t.batchCheck != nil {
			batchErr = t.batchCheck()
		}
	}
	for _, t := range batch {
		var e *apiError
		switch {
		case batchErr != nil:
			e = batchErr
		case s.failTask != nil:
			e, s.failTask = s.failTask, nil
		default:
			e = t.apply(t)
		}
		t.finishedAt = time.Now().UTC()
		if e != nil {
			t.status = statusFailed
			t.err = e
			failedDetails(t)
		} else {
			t.status = statusSucceeded
		}
		t.apply = nil
		if ix := s.indexes[t.indexUID]; ix != nil {
			touched[ix] = true
		}
	}
	for ix := range touched {
		ix.compact()
	}
	s.lastUpdate = time.Now().UTC()
	rec.finish(s.lastUpdate)
	s.processing = 0
	s.busy = nil
	s.current = nil
	s.notifyLocked()
	s.mu.Unlock()
	return true
}

// requeue puts the tasks of an interrupted batch back at the front of the
// queue, behind the priority tasks (s.mu held).
func (s *Server) requeue(batch []*task) {
	i := 0
	for i < len(s.queue) && s.queue[i].prio > 0 {
		i++
	}
	for _, t := range batch {
		t.status, t.batchUID, t.startedAt = statusEnqueued, -1, time.Time{}
	}
	s.queue = slices.Insert(s.queue, i, batch...)
	s.processing = 0
	s.busy = nil
	s.current = nil
	s.notifyLocked()
}

// failedDetails sets the counts of a failed task to 0, as
// default_finished_details does for failed tasks (tasks/mod.rs).
func failedDetails(t *task) {
	for i, d := range t.details {
		switch d.key {
		case "indexedDocuments", "deletedDocuments":
			if d.val == nil {
				t.details[i].val = 0
			}
		}
	}
}

// appendTask appends the full task view (TaskView, task_view.rs).
func appendTask(b []byte, t *task) []byte {
	b = append(b, `{"uid":`...)
	b = strconv.AppendInt(b, t.uid, 10)
	b = append(b, `,"batchUid":`...)
	if t.batchUID < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, t.batchUID, 10)
	}
	b = append(b, `,"indexUid":`...)
	if t.global {
		b = append(b, "null"...)
	} else {
		b = appendString(b, t.indexUID)
	}
	b = append(b, `,"status":"`...)
	b = append(b, t.status...)
	b = append(b, `","type":"`...)
	b = append(b, t.kind...)
	b = append(b, `","canceledBy":`...)
	if t.canceledBy < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, t.canceledBy, 10)
	}
	b = append(b, `,"details":{`...)
	for i, d := range t.details {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, d.key)
		b = append(b, ':')
		b = appendAny(b, d.val)
	}
	b = append(b, `},"error":`...)
	if t.err == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"message":`...)
		b = appendString(b, t.err.Message)
		b = append(b, `,"code":`...)
		b = appendString(b, t.err.Code)
		b = append(b, `,"type":`...)
		b = appendString(b, t.err.Type)
		b = append(b, `,"link":`...)
		b = appendString(b, t.err.Link)
		b = append(b, '}')
	}
	b = append(b, `,"duration":`...)
	if t.finishedAt.IsZero() {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, isoDuration(t.finishedAt.Sub(t.startedAt))...)
		b = append(b, '"')
	}
	b = append(b, `,"enqueuedAt":`...)
	b = appendTime(b, t.enqueuedAt)
	b = append(b, `,"startedAt":`...)
	b = appendTime(b, t.startedAt)
	b = append(b, `,"finishedAt":`...)
	b = appendTime(b, t.finishedAt)
	if t.meta != nil {
		b = append(b, `,"customMetadata":`...)
		b = appendString(b, *t.meta)
	}
	return append(b, '}')
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// isoDuration formats d as an ISO-8601 duration in seconds ("PT0.001234S"),
// the form Meilisearch's task views use.
func isoDuration(d time.Duration) string {
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}

func (s *Server) handleGetTask(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("taskUid")
	uid, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		writeErr(w, errf("invalid_task_uids",
			"Task uid `%s` is invalid. It should only contain numeric characters.", raw))
		return
	}
	s.mu.RLock()
	if uid >= uint64(len(s.tasks)) || s.tasks[uid] == nil {
		s.mu.RUnlock()
		writeErr(w, errf("task_not_found", "Task `%d` not found.", uid))
		return
	}
	b := appendTask(make([]byte, 0, 512), s.tasks[uid])
	s.mu.RUnlock()
	writeRaw(w, http.StatusOK, b)
}

// taskFilter is GET /tasks' query (TasksFilterQuery, routes/tasks.rs).
type taskFilter struct {
	uids, batchUIDs map[int64]bool
	canceledBy      map[int64]bool
	// given: some filter parameter was in the query ("*" included), as
	// task cancelation and deletion require.
	given                bool
	statuses, types, idx map[string]bool
	limit                int
	from                 int64 // -1: from the newest
	reverse              bool
	afterEnq, beforeEnq  time.Time
	afterStart, beforeSt time.Time
	afterFin, beforeFin  time.Time
}

// taskQueryParams are the filters of GET /tasks and GET /batches
// (TasksFilterQuery, BatchesFilterQuery); cancelation and deletion take the
// same without limit, from and reverse (TaskDeletionOrCancelationQuery).
var taskQueryParams = []string{"limit", "from", "reverse", "batchUids", "uids", "canceledBy", "types", "statuses", "indexUids",
	"afterEnqueuedAt", "beforeEnqueuedAt", "afterStartedAt", "beforeStartedAt", "afterFinishedAt", "beforeFinishedAt"}

func parseTaskFilter(r *http.Request) (*taskFilter, *apiError) {
	return parseTaskQuery(r, taskQueryParams)
}

func parseTaskQuery(r *http.Request, allowed []string) (*taskFilter, *apiError) {
	q := r.URL.Query()
	f := &taskFilter{limit: 20, from: -1}
	for key := range q {
		if !slices.Contains(allowed, key) {
			return nil, errBadRequest("Unknown parameter `%s`: expected one of %s", key, quoteList(allowed))
		}
		switch key {
		case "limit", "from", "reverse":
		default:
			f.given = true
		}
	}
	list := func(key string) []string {
		v := q.Get(key)
		if v == "" || v == "*" {
			return nil
		}
		var out []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	ints := func(key, code string) (map[int64]bool, *apiError) {
		vals := list(key)
		if vals == nil {
			return nil, nil
		}
		m := map[int64]bool{}
		for _, v := range vals {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, errf(code, "Invalid value in parameter `%s`: could not parse `%s` as a positive integer", key, v)
			}
			m[int64(n)] = true
		}
		return m, nil
	}
	strs := func(key, code string, allowed []string) (map[string]bool, *apiError) {
		vals := list(key)
		if vals == nil {
			return nil, nil
		}
		m := map[string]bool{}
		for _, v := range vals {
			if allowed != nil && !slices.Contains(allowed, v) {
				return nil, errf(code, "Invalid value in parameter `%s`: `%s` is not a valid task %s. Available %ss are %s.",
					key, v, strings.TrimSuffix(strings.TrimPrefix(key, ""), "s"), strings.TrimSuffix(key, "s"), quoteList(allowed))
			}
			m[v] = true
		}
		return m, nil
	}
	var e *apiError
	if f.uids, e = ints("uids", "invalid_task_uids"); e != nil {
		return nil, e
	}
	if f.batchUIDs, e = ints("batchUids", "invalid_task_batch_uids"); e != nil {
		return nil, e
	}
	if f.canceledBy, e = ints("canceledBy", "invalid_task_canceled_by"); e != nil {
		return nil, e
	}
	if f.statuses, e = strs("statuses", "invalid_task_statuses", allStatuses); e != nil {
		return nil, e
	}
	if f.types, e = strs("types", "invalid_task_types", allKinds); e != nil {
		return nil, e
	}
	if f.idx, e = strs("indexUids", "invalid_task_index_uids", nil); e != nil {
		return nil, e
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, errf("invalid_task_limit", "Invalid value in parameter `limit`: could not parse `%s` as a positive integer", v)
		}
		f.limit = int(n)
	}
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, errf("invalid_task_from", "Invalid value in parameter `from`: could not parse `%s` as a positive integer", v)
		}
		f.from = int64(n)
	}
	if v := q.Get("reverse"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, errf("invalid_task_reverse", "Invalid value in parameter `reverse`: could not parse `%s` as a boolean, expected either `true` or `false`", v)
		}
		f.reverse = b
	}
	dates := []struct {
		key string
		dst *time.Time
	}{
		{"afterEnqueuedAt", &f.afterEnq}, {"beforeEnqueuedAt", &f.beforeEnq},
		{"afterStartedAt", &f.afterStart}, {"beforeStartedAt", &f.beforeSt},
		{"afterFinishedAt", &f.afterFin}, {"beforeFinishedAt", &f.beforeFin},
	}
	for _, d := range dates {
		v := q.Get(d.key)
		if v == "" || v == "*" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			if t, err = time.Parse("2006-01-02", v); err != nil {
				code := "invalid_task_" + camelToSnake(d.key)
				return nil, errf(code, "`%s` is an invalid date-time. It should follow the YYYY-MM-DD or RFC 3339 date-time format.", v)
			}
		}
		*d.dst = t
	}
	return f, nil
}

func camelToSnake(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'A' && c <= 'Z' {
			b.WriteByte('_')
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func quoteList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = "`" + s + "`"
	}
	return strings.Join(q, ", ")
}

func (f *taskFilter) match(t *task) bool {
	if f.uids != nil && !f.uids[t.uid] {
		return false
	}
	if f.batchUIDs != nil && !f.batchUIDs[t.batchUID] {
		return false
	}
	if f.canceledBy != nil && !f.canceledBy[t.canceledBy] {
		return false
	}
	if f.statuses != nil && !f.statuses[t.status] {
		return false
	}
	if f.types != nil && !f.types[t.kind] {
		return false
	}
	if f.idx != nil {
		if t.global {
			// An indexSwap matches the indexes it swaps.
			ok := false
			for _, d := range t.details {
				if d.key == "swaps" {
					for _, sw := range d.val.([]any) {
						for _, u := range sw.(map[string]any)["indexes"].([]string) {
							ok = ok || f.idx[u]
						}
					}
				}
			}
			if !ok {
				return false
			}
		} else if !f.idx[t.indexUID] {
			return false
		}
	}
	after := func(at, bound time.Time) bool { return bound.IsZero() || (!at.IsZero() && at.After(bound)) }
	before := func(at, bound time.Time) bool { return bound.IsZero() || (!at.IsZero() && at.Before(bound)) }
	return after(t.enqueuedAt, f.afterEnq) && before(t.enqueuedAt, f.beforeEnq) &&
		after(t.startedAt, f.afterStart) && before(t.startedAt, f.beforeSt) &&
		after(t.finishedAt, f.afterFin) && before(t.finishedAt, f.beforeFin)
}

// handleListTasks answers {"results","total","limit","from","next"}
// (AllTasks, routes/tasks.rs), newest first unless reverse=true.
func (s *Server) handleListTasks(w http.ResponseWriter, r *http.Request) {
	f, e := parseTaskFilter(r)
	if e != nil {
		writeErr(w, e)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	total := 0
	var page []*task
	next := int64(-1)
	n := int64(len(s.tasks))
	visit := func(t *task) {
		if t == nil || !f.match(t) {
			return
		}
		total++
		if f.from >= 0 && (!f.reverse && t.uid > f.from || f.reverse && t.uid < f.from) {
			return
		}
		if len(page) < f.limit {
			page = append(page, t)
		} else if next < 0 {
			next = t.uid
		}
	}
	if f.reverse {
		for i := int64(0); i < n; i++ {
			visit(s.tasks[i])
		}
	} else {
		for i := n - 1; i >= 0; i-- {
			visit(s.tasks[i])
		}
	}
	b := make([]byte, 0, 256+512*len(page))
	b = append(b, `{"results":[`...)
	for i, t := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendTask(b, t)
	}
	b = append(b, `],"total":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(f.limit), 10)
	b = append(b, `,"from":`...)
	if len(page) == 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, page[0].uid, 10)
	}
	b = append(b, `,"next":`...)
	if next < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, next, 10)
	}
	b = append(b, '}')
	writeRaw(w, http.StatusOK, b)
}
