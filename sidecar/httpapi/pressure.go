package httpapi

import "github.com/meilistream/meilistream/sidecar/engine"

// What a job spares and holds back downstream: the updates it did not
// send (meilistream_documents_skipped_unchanged_total, created at zero by
// Declare) and what it has enqueued in Meilisearch
// (meilistream_meili_enqueued_tasks and _bytes, present once the job's
// sink reported them).

var (
	_ engine.UnchangedObserver = (*Metrics)(nil)
	_ engine.QueueObserver     = (*Metrics)(nil)
	_ engine.ThrottleObserver  = (*Metrics)(nil)
)

// Unchanged counts n updates not sent: they could not change the
// destination's document.
func (j *JobMetrics) Unchanged(n int) {
	if j != nil && n > 0 {
		j.m.DocumentsUnchanged.WithLabelValues(j.job, j.kind).Add(float64(n))
	}
}

// Queue sets what the job has enqueued in Meilisearch and not yet seen
// processed: tasks, and the bytes of their requests.
func (j *JobMetrics) Queue(tasks int, bytes int64) {
	if j != nil {
		j.m.MeiliTasks.WithLabelValues(j.job, j.kind).Set(float64(tasks))
		j.m.MeiliBytes.WithLabelValues(j.job, j.kind).Set(float64(bytes))
	}
}

// ObserveUnchanged counts updates not sent (engine.UnchangedObserver).
func (m *Metrics) ObserveUnchanged(job, kind string, n int) { m.Job(job, kind).Unchanged(n) }

// ObserveQueue sets what the job has enqueued in Meilisearch
// (engine.QueueObserver).
func (m *Metrics) ObserveQueue(job string, tasks int, bytes int64) {
	m.Job(job, "").Queue(tasks, bytes)
}

// throttleReasons are the reasons of meilistream_reindex_throttled, each
// a series from the job's first reindex on.
var throttleReasons = []string{engine.ThrottleRate, engine.ThrottleLatency, engine.ThrottleBacklog}

// Throttled sets what slows the job's reindex: 1 for reason, 0 for the
// others ("": none).
func (j *JobMetrics) Throttled(reason string) {
	if j == nil {
		return
	}
	for _, r := range throttleReasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		j.m.ReindexThrottled.WithLabelValues(j.job, j.kind, r).Set(v)
	}
}

// ObserveThrottle sets what slows the job's reindex
// (engine.ThrottleObserver).
func (m *Metrics) ObserveThrottle(job, reason string) { m.Job(job, "").Throttled(reason) }
