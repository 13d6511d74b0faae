package meili

import (
	"context"
	"sync"
)

// What a job has enqueued in Meilisearch and not yet seen processed is
// bounded per index, in tasks and in request bytes (Options.MaxEnqueuedTasks,
// Options.MaxEnqueuedBytes). Meilisearch takes every request at once and
// indexes later, one batch of tasks at a time; a sender faster than the
// indexing would otherwise grow the task queue (and Meilisearch's disk
// and memory with the payloads it keeps) without limit, and its searches
// would slow down under the load. The sink counts its own tasks rather
// than asking Meilisearch for its queue: the count costs no request, is
// exact for what the job controls, and another client's tasks are not the
// job's to hold back.
//
// Before a request would go over a bound, the sink waits for its oldest
// task of the index to be processed, polling it itself (not waiting for
// the engine's Wait, which may be behind the very request being sent); a
// request always goes when nothing of the index is enqueued, whatever its
// size. A task leaves the count once a poll, the sink's or Wait's, finds
// it finished (succeeded, failed or canceled) or gone from Meilisearch.

// queues are the counts of one job's sink and its staged copies, per
// index uid.
type queues struct {
	mu sync.Mutex
	by map[string]*queue
}

// queue is what one index has enqueued of the job's: task uid -> bytes.
type queue struct {
	tasks map[int64]int64
	bytes int64
}

func newQueues() *queues { return &queues{by: map[string]*queue{}} }

// add counts task (of n bytes of request) as enqueued in index uid.
func (q *queues) add(uid string, task, n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	x := q.by[uid]
	if x == nil {
		x = &queue{tasks: map[int64]int64{}}
		q.by[uid] = x
	}
	if _, dup := x.tasks[task]; !dup {
		x.tasks[task] = n
		x.bytes += n
	}
}

// done forgets task of index uid: it is processed (or gone).
func (q *queues) done(uid string, task int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if x := q.by[uid]; x != nil {
		if n, ok := x.tasks[task]; ok {
			delete(x.tasks, task)
			x.bytes -= n
		}
	}
}

// has says whether task of index uid is counted.
func (q *queues) has(uid string, task int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	x := q.by[uid]
	if x == nil {
		return false
	}
	_, ok := x.tasks[task]
	return ok
}

// oldest returns the oldest task enqueued in uid (Meilisearch numbers
// tasks in the order it takes them) if one more request of n bytes would
// go over the bounds; ok false when it may go now.
func (q *queues) oldest(uid string, n int64, maxTasks int, maxBytes int64) (task int64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	x := q.by[uid]
	if x == nil || len(x.tasks) == 0 || len(x.tasks) < maxTasks && x.bytes+n <= maxBytes {
		return 0, false
	}
	first := true
	for t := range x.tasks {
		if first || t < task {
			task, first = t, false
		}
	}
	return task, true
}

// total is what every index of the job holds: tasks and bytes.
func (q *queues) total() (tasks int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, x := range q.by {
		tasks += len(x.tasks)
		bytes += x.bytes
	}
	return tasks, bytes
}

// admit waits until a request of n bytes to the sink's index stays within
// the bounds, by waiting for the index's oldest task of the job's to be
// processed, and again while it would not.
func (s *Sink) admit(ctx context.Context, n int) error {
	for {
		task, wait := s.queues.oldest(s.uid, int64(n), s.opts.MaxEnqueuedTasks, s.opts.MaxEnqueuedBytes)
		if !wait {
			return nil
		}
		if _, err := s.waitTask(ctx, task); err != nil && s.queues.has(s.uid, task) {
			return err // a task gone from Meilisearch is no longer enqueued
		}
	}
}

// Enqueued is what the job has enqueued in Meilisearch (its index, and a
// reindex's staged index) and not yet seen processed: tasks and bytes of
// their requests.
func (s *Sink) Enqueued() (tasks int, bytes int64, counted bool) {
	tasks, bytes = s.queues.total()
	return tasks, bytes, true
}
