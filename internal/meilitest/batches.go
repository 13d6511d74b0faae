package meilitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// batchRecord is one batch of processed tasks, as GET /batches shows it
// (BatchView, crates/meilisearch-types/src/batch_view.rs).
type batchRecord struct {
	uid        int64
	tasks      []*task
	startedAt  time.Time
	finishedAt time.Time
	strategy   string
	// stats and details, fixed when the batch finishes (its tasks may be
	// deleted later; the batch keeps its figures).
	stats   []byte
	details []byte
}

// batchStrategy is the batch's stop reason, in the words of
// BatchStopReason's Display (crates/meilisearch-types/src/tasks/mod.rs).
func batchStrategy(batch, rest []*task) string {
	first := batch[0]
	if !first.batchable {
		return fmt.Sprintf("created batch containing only task with id %d of type `%s` that cannot be batched with any other task.", first.uid, first.kind)
	}
	for _, t := range rest {
		if t.indexUID == first.indexUID {
			return fmt.Sprintf("task with id %d of type `%s` cannot be batched", t.uid, t.kind)
		}
	}
	return fmt.Sprintf("batched all enqueued tasks for index `%s`", first.indexUID)
}

// finish fixes the batch's stats and details (s.mu held).
func (b *batchRecord) finish(at time.Time) {
	b.finishedAt = at
	status, types, indexes := map[string]int{}, map[string]int{}, map[string]int{}
	var keys []string
	sums := map[string]any{}
	for _, t := range b.tasks {
		status[t.status]++
		types[t.kind]++
		if !t.global {
			indexes[t.indexUID]++
		}
		// Details of the batch: counts add up, other values are the last
		// task's (Meilisearch accumulates DetailsView per batch).
		for _, d := range t.details {
			if !slices.Contains(keys, d.key) {
				keys = append(keys, d.key)
			}
			if n, ok := d.val.(int); ok {
				if prev, ok := sums[d.key].(int); ok {
					n += prev
				}
				sums[d.key] = n
				continue
			}
			sums[d.key] = d.val
		}
	}
	stats := struct {
		TotalNbTasks int            `json:"totalNbTasks"`
		Status       map[string]int `json:"status"`
		Types        map[string]int `json:"types"`
		IndexUids    map[string]int `json:"indexUids"`
	}{len(b.tasks), status, types, indexes}
	b.stats, _ = json.Marshal(stats)
	d := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			d = append(d, ',')
		}
		d = appendString(d, k)
		d = append(d, ':')
		d = appendAny(d, sums[k])
	}
	b.details = append(d, '}')
}

func (b *batchRecord) appendView(dst []byte) []byte {
	dst = append(dst, `{"uid":`...)
	dst = strconv.AppendInt(dst, b.uid, 10)
	if b.finishedAt.IsZero() {
		// Still processing: a progress view, and the tasks' counts so far.
		dst = append(dst, `,"progress":{"steps":[{"currentStep":"processing tasks","finished":0,"total":`...)
		dst = strconv.AppendInt(dst, int64(len(b.tasks)), 10)
		dst = append(dst, `}],"percentage":0.0},"details":{},"stats":`...)
		live := &batchRecord{tasks: b.tasks}
		live.finish(time.Now())
		dst = append(dst, live.stats...)
		dst = append(dst, `,"duration":null`...)
	} else {
		dst = append(dst, `,"progress":null,"details":`...)
		dst = append(dst, b.details...)
		dst = append(dst, `,"stats":`...)
		dst = append(dst, b.stats...)
		dst = append(dst, `,"duration":"`...)
		dst = append(dst, isoDuration(b.finishedAt.Sub(b.startedAt))...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"startedAt":`...)
	dst = appendTime(dst, b.startedAt)
	dst = append(dst, `,"finishedAt":`...)
	dst = appendTime(dst, b.finishedAt)
	dst = append(dst, `,"batchStrategy":`...)
	dst = appendString(dst, b.strategy)
	return append(dst, '}')
}

// matches: a batch is selected by the tasks it holds (GET /batches takes
// the task filters: uids are task uids).
func (f *taskFilter) matchesBatch(b *batchRecord) bool {
	for _, t := range b.tasks {
		if f.match(t) {
			return true
		}
	}
	return false
}

// handleListBatches is GET /batches: {"results","total","limit","from",
// "next"} newest first unless reverse (routes/batches.rs, get_batches).
func (s *Server) handleListBatches(w http.ResponseWriter, r *http.Request) {
	f, e := parseTaskFilter(r)
	if e != nil {
		writeErr(w, e)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var page []*batchRecord
	total := 0
	next := int64(-1)
	visit := func(b *batchRecord) {
		if !f.matchesBatch(b) {
			return
		}
		total++
		if f.from >= 0 && (!f.reverse && b.uid > f.from || f.reverse && b.uid < f.from) {
			return
		}
		if len(page) < f.limit {
			page = append(page, b)
		} else if next < 0 {
			next = b.uid
		}
	}
	if f.reverse {
		for _, b := range s.batches {
			visit(b)
		}
	} else {
		for i := len(s.batches) - 1; i >= 0; i-- {
			visit(s.batches[i])
		}
	}
	out := []byte(`{"results":[`)
	for i, b := range page {
		if i > 0 {
			out = append(out, ',')
		}
		out = b.appendView(out)
	}
	out = append(out, `],"total":`...)
	out = strconv.AppendInt(out, int64(total), 10)
	out = append(out, `,"limit":`...)
	out = strconv.AppendInt(out, int64(f.limit), 10)
	out = append(out, `,"from":`...)
	if len(page) == 0 {
		out = append(out, "null"...)
	} else {
		out = strconv.AppendInt(out, page[0].uid, 10)
	}
	out = append(out, `,"next":`...)
	if next < 0 {
		out = append(out, "null"...)
	} else {
		out = strconv.AppendInt(out, next, 10)
	}
	writeRaw(w, http.StatusOK, append(out, '}'))
}

// handleGetBatch is GET /batches/{batchUid}.
func (s *Server) handleGetBatch(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("batchUid")
	uid, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		writeErr(w, errf("invalid_batch_uids", "Batch uid `%s` is invalid. It should only contain numeric characters.", raw))
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.batches {
		if b.uid == int64(uid) {
			writeRaw(w, http.StatusOK, b.appendView(nil))
			return
		}
	}
	writeErr(w, errf("batch_not_found", "Batch `%d` not found.", uid))
}

// Task cancelation and deletion (routes/tasks.rs cancel_tasks,
// delete_tasks): the filters select tasks when the request is made; the
// task registered answers 200 (not 202) and runs before every other queued
// task. A cancelation cancels those of the selected tasks still enqueued or
// processing (interrupting the batch being processed); a deletion removes
// those already finished.

const (
	kindTaskCancelation = "taskCancelation"
	kindTaskDeletion    = "taskDeletion"
)

func (s *Server) handleCancelTasks(w http.ResponseWriter, r *http.Request) {
	s.manageTasks(w, r, kindTaskCancelation, "cancel")
}

func (s *Server) handleDeleteTasks(w http.ResponseWriter, r *http.Request) {
	s.manageTasks(w, r, kindTaskDeletion, "delete")
}

var taskManageParams = []string{"uids", "batchUids", "canceledBy", "types", "statuses", "indexUids",
	"afterEnqueuedAt", "beforeEnqueuedAt", "afterStartedAt", "beforeStartedAt", "afterFinishedAt", "beforeFinishedAt"}

func (s *Server) manageTasks(w http.ResponseWriter, r *http.Request, kind, verb string) {
	f, e := parseTaskQuery(r, taskManageParams)
	if e != nil {
		writeErr(w, e)
		return
	}
	if !f.given {
		writeErr(w, errf("missing_task_filters", "Query parameters to filter the tasks to %s are missing. Available query parameters are: `uids`, `indexUids`, `statuses`, `types`, `canceledBy`, `beforeEnqueuedAt`, `afterEnqueuedAt`, `beforeStartedAt`, `afterStartedAt`, `beforeFinishedAt`, `afterFinishedAt`.", verb))
		return
	}
	filter := "?" + r.URL.RawQuery
	t := &task{global: true, kind: kind}
	var matched []int64
	countKey := "canceledTasks"
	t.prio = 2
	if kind == kindTaskDeletion {
		countKey, t.prio = "deletedTasks", 1
	}
	t.apply = func(t *task) *apiError {
		n := 0
		for _, uid := range matched {
			m := s.tasks[uid]
			if m == nil || m == t {
				continue
			}
			if kind == kindTaskCancelation && m.status == statusEnqueued {
				s.queue = slices.DeleteFunc(s.queue, func(q *task) bool { return q == m })
				m.status, m.canceledBy = statusCanceled, t.uid
				m.batchUID, m.startedAt, m.finishedAt = t.batchUID, t.startedAt, time.Now().UTC()
				m.apply = nil
				failedDetails(m)
				if rec := s.batches[len(s.batches)-1]; rec.uid == t.batchUID {
					rec.tasks = append(rec.tasks, m)
				}
				n++
			}
			if kind == kindTaskDeletion && (m.status == statusSucceeded || m.status == statusFailed || m.status == statusCanceled) {
				s.tasks[uid] = nil
				n++
			}
		}
		t.setDetail(countKey, n)
		return nil
	}
	s.enqueueWith(w, r, t, http.StatusOK, func() {
		for _, m := range s.tasks {
			if m != nil && m != t && f.match(m) {
				matched = append(matched, m.uid)
			}
		}
		t.details = []detail{{"matchedTasks", len(matched)}, {countKey, nil}, {"originalFilter", filter}}
		// A cancelation of a task being processed stops its batch.
		if kind == kindTaskCancelation && slices.ContainsFunc(s.current, func(c *task) bool { return slices.Contains(matched, c.uid) }) {
			select {
			case s.abort <- struct{}{}:
			default:
			}
		}
	})
}
