package httpapi

import (
	"runtime"
	"sync"
	"time"

	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the sidecar's Prometheus collectors, every name prefixed
// meilistream_. Labels: job (the job name), kind ("search" or "mirror"),
// code (an errs code), event (a DDL event), state (a JobStatus state).
//
// Build one with NewMetrics in main, pass it down; per job take a
// *JobMetrics with Job(name, kind) and call its methods. A nil *Metrics
// and a nil *JobMetrics are valid and record nothing, so tests and tools
// need none.
type Metrics struct {
	DocumentsIndexed *prometheus.CounterVec   // meilistream_documents_indexed_total{job,kind}: upserts made durable
	DocumentsDeleted *prometheus.CounterVec   // meilistream_documents_deleted_total{job,kind}: deletes made durable
	DocumentsSkipped *prometheus.CounterVec   // meilistream_documents_skipped_total{job,kind}: kept out by the transform
	Errors           *prometheus.CounterVec   // meilistream_errors_total{job,code}: per-document and job errors
	BatchDuration    *prometheus.HistogramVec // meilistream_batch_duration_seconds{job,kind}: send until durable
	BatchDocuments   *prometheus.HistogramVec // meilistream_batch_documents{job,kind}: writes per batch
	FollowLag        *prometheus.GaugeVec     // meilistream_follow_lag_seconds{job}: durable position behind the cluster time
	PositionTime     *prometheus.GaugeVec     // meilistream_position_timestamp_seconds{job}: cluster time of the recorded position
	DeadLetters      *prometheus.GaugeVec     // meilistream_dead_letters{job}: documents in the errors collection
	LeaseHeld        *prometheus.GaugeVec     // meilistream_lease_held{job}: 1 while this process holds the lease
	LeaseEpoch       *prometheus.GaugeVec     // meilistream_lease_epoch{job}: epoch of the lease last held or seen
	ReindexDone      *prometheus.GaugeVec     // meilistream_reindex_documents_done{job}
	ReindexTotal     *prometheus.GaugeVec     // meilistream_reindex_documents_estimated{job}
	Reindexes        *prometheus.CounterVec   // meilistream_reindexes_total{job}: reindexes completed
	DDLEvents        *prometheus.CounterVec   // meilistream_ddl_events_total{job,event}: drop/rename/dropDatabase seen by a mirror
	JobState         *prometheus.GaugeVec     // meilistream_job_state{job,state}: 1 for the job's current state
	JobRestarts      *prometheus.CounterVec   // meilistream_job_restarts_total{job}
	TransformErrors  *prometheus.CounterVec   // meilistream_transform_reload_errors_total{job}: changed files that failed to load while the previous version runs
	TransformStale   *prometheus.GaugeVec     // meilistream_transform_stale{job}: 1 while the job's changed file fails to load

	mu  sync.Mutex
	odd map[string]string // job -> a state outside status.States last set, see JobMetrics.State

	pressure *pressure // pressure.go
}

// NewMetrics creates the collectors and registers them with reg (a fresh
// prometheus.NewRegistry() in main, see NewRegistry; a registry of its own
// in each test). It panics if they are already registered there, like
// prometheus.MustRegister: that is a programming error.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "meilistream"
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		DocumentsIndexed: counter("documents_indexed_total", "Documents upserted into the destination and durable.", "job", "kind"),
		DocumentsDeleted: counter("documents_deleted_total", "Documents deleted from the destination, durable.", "job", "kind"),
		DocumentsSkipped: counter("documents_skipped_total", "Documents the transform kept out of the destination.", "job", "kind"),
		Errors:           counter("errors_total", "Errors by code: per-document errors and job failures.", "job", "code"),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "batch_duration_seconds",
			Help:    "Time from sending a batch to the destination until it is durable.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms .. ~41s
		}, []string{"job", "kind"}),
		BatchDocuments: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "batch_documents",
			Help:    "Writes (upserts and deletes) per batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 .. 65536
		}, []string{"job", "kind"}),
		FollowLag:    gauge("follow_lag_seconds", "How far the durable position is behind the cluster time, while following.", "job"),
		PositionTime: gauge("position_timestamp_seconds", "Cluster time (Unix seconds) of the last recorded position.", "job"),
		DeadLetters:  gauge("dead_letters", "Documents recorded in the errors collection for the job.", "job"),
		LeaseHeld:    gauge("lease_held", "1 while this process holds the job's lease, else 0.", "job"),
		LeaseEpoch:   gauge("lease_epoch", "Epoch of the job's lease, last held or seen.", "job"),
		ReindexDone:  gauge("reindex_documents_done", "Documents read by the running (or last) reindex.", "job"),
		ReindexTotal: gauge("reindex_documents_estimated", "Estimated documents in the collection at the reindex's start.", "job"),
		Reindexes:    counter("reindexes_total", "Reindexes completed.", "job"),
		DDLEvents:    counter("ddl_events_total", "Collection or database drops and renames seen by a mirror job (never applied).", "job", "event"),
		JobState:     gauge("job_state", "1 for the job's current state, 0 for the others.", "job", "state"),
		JobRestarts:  counter("job_restarts_total", "Restarts of the job after a failure.", "job"),
		TransformErrors: counter("transform_reload_errors_total",
			"Changes of the job's transform file that failed to load (the previous version kept running).", "job"),
		TransformStale: gauge("transform_stale", "1 while the job's changed transform file fails to load and the previous version runs.", "job"),
		odd:            map[string]string{},
	}
	reg.MustRegister(m.DocumentsIndexed, m.DocumentsDeleted, m.DocumentsSkipped, m.Errors,
		m.BatchDuration, m.BatchDocuments, m.FollowLag, m.PositionTime, m.DeadLetters,
		m.LeaseHeld, m.LeaseEpoch, m.ReindexDone, m.ReindexTotal, m.Reindexes, m.DDLEvents,
		m.JobState, m.JobRestarts, m.TransformErrors, m.TransformStale)
	m.pressure = newPressure(reg)
	return m
}

// NewRegistry returns a registry with the Go runtime and process
// collectors and meilistream_build_info{version,goversion}, for main to
// pass to NewMetrics and serve on /metrics.
func NewRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace:   "meilistream",
			Name:        "build_info",
			Help:        "Always 1; labels name the build.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
	)
	return reg
}

// JobMetrics are the collectors of one job, labels bound.
type JobMetrics struct {
	m         *Metrics
	job, kind string
}

// Job returns the collectors of job (kind "search" or "mirror").
func (m *Metrics) Job(job, kind string) *JobMetrics {
	if m == nil {
		return nil
	}
	return &JobMetrics{m: m, job: job, kind: kind}
}

// Indexed counts n documents upserted and durable.
func (j *JobMetrics) Indexed(n int) {
	if j != nil && n > 0 {
		j.m.DocumentsIndexed.WithLabelValues(j.job, j.kind).Add(float64(n))
	}
}

// Deleted counts n deletes made durable.
func (j *JobMetrics) Deleted(n int) {
	if j != nil && n > 0 {
		j.m.DocumentsDeleted.WithLabelValues(j.job, j.kind).Add(float64(n))
	}
}

// Skipped counts n documents the transform kept out.
func (j *JobMetrics) Skipped(n int) {
	if j != nil && n > 0 {
		j.m.DocumentsSkipped.WithLabelValues(j.job, j.kind).Add(float64(n))
	}
}

// Error counts one error of code (errs.CodeOf of it, as a string).
func (j *JobMetrics) Error(code string) {
	if j != nil {
		j.m.Errors.WithLabelValues(j.job, code).Inc()
	}
}

// Batch records one batch of writes made durable after d.
func (j *JobMetrics) Batch(d time.Duration, writes int) {
	if j != nil {
		j.m.BatchDuration.WithLabelValues(j.job, j.kind).Observe(d.Seconds())
		j.m.BatchDocuments.WithLabelValues(j.job, j.kind).Observe(float64(writes))
	}
}

// Lag sets how far behind the cluster time the durable position is.
func (j *JobMetrics) Lag(d time.Duration) {
	if j != nil {
		j.m.FollowLag.WithLabelValues(j.job).Set(d.Seconds())
	}
}

// Position sets the cluster time of the last recorded position.
func (j *JobMetrics) Position(t time.Time) {
	if j != nil {
		j.m.PositionTime.WithLabelValues(j.job).Set(float64(t.UnixNano()) / 1e9)
	}
}

// DeadLetters sets the number of documents in the errors collection.
func (j *JobMetrics) DeadLetters(n int64) {
	if j != nil {
		j.m.DeadLetters.WithLabelValues(j.job).Set(float64(n))
	}
}

// Lease sets whether this process holds the job's lease, and its epoch.
func (j *JobMetrics) Lease(held bool, epoch int64) {
	if j != nil {
		v := 0.0
		if held {
			v = 1
		}
		j.m.LeaseHeld.WithLabelValues(j.job).Set(v)
		j.m.LeaseEpoch.WithLabelValues(j.job).Set(float64(epoch))
	}
}

// ReindexProgress sets a running reindex's documents read and estimate.
func (j *JobMetrics) ReindexProgress(done, estimated int64) {
	if j != nil {
		j.m.ReindexDone.WithLabelValues(j.job).Set(float64(done))
		j.m.ReindexTotal.WithLabelValues(j.job).Set(float64(estimated))
	}
}

// ReindexDone counts one completed reindex.
func (j *JobMetrics) ReindexDone() {
	if j != nil {
		j.m.Reindexes.WithLabelValues(j.job).Inc()
	}
}

// DDL counts one drop, rename or dropDatabase event seen by a mirror.
func (j *JobMetrics) DDL(event string) {
	if j != nil {
		j.m.DDLEvents.WithLabelValues(j.job, event).Inc()
	}
}

// State sets the job's current state: one of the JobStatus.State values
// ("reindexing" or "following" while it runs, not a coarser "running"), so
// alerts read the same states as /status. Any other value is shown too,
// and dropped when the state changes again, so exactly one state is 1.
func (j *JobMetrics) State(state string) {
	if j == nil {
		return
	}
	j.m.mu.Lock()
	defer j.m.mu.Unlock()
	if prev, ok := j.m.odd[j.job]; ok && prev != state {
		j.m.JobState.DeleteLabelValues(j.job, prev)
		delete(j.m.odd, j.job)
	}
	known := false
	for _, s := range status.States {
		v := 0.0
		if s == state {
			v, known = 1, true
		}
		j.m.JobState.WithLabelValues(j.job, s).Set(v)
	}
	if !known {
		j.m.JobState.WithLabelValues(j.job, state).Set(1)
		j.m.odd[j.job] = state
	}
}

// TransformError records that the job's changed file failed to load
// (failed) or that the file in effect is the latest again.
func (j *JobMetrics) TransformError(failed bool) {
	if j == nil {
		return
	}
	if failed {
		j.m.TransformErrors.WithLabelValues(j.job).Inc()
		j.m.TransformStale.WithLabelValues(j.job).Set(1)
	} else {
		j.m.TransformStale.WithLabelValues(j.job).Set(0)
	}
}

// Restart counts one restart after a failure.
func (j *JobMetrics) Restart() {
	if j != nil {
		j.m.JobRestarts.WithLabelValues(j.job).Inc()
	}
}

// Forget removes the job's series (a job whose transform file was
// removed), so /metrics stops showing a job that no longer exists.
func (j *JobMetrics) Forget() {
	if j == nil {
		return
	}
	j.m.mu.Lock()
	delete(j.m.odd, j.job)
	j.m.mu.Unlock()
	l := prometheus.Labels{"job": j.job}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		j.m.DocumentsIndexed, j.m.DocumentsDeleted, j.m.DocumentsSkipped, j.m.Errors,
		j.m.BatchDuration, j.m.BatchDocuments, j.m.FollowLag, j.m.PositionTime, j.m.DeadLetters,
		j.m.LeaseHeld, j.m.LeaseEpoch, j.m.ReindexDone, j.m.ReindexTotal, j.m.Reindexes,
		j.m.DDLEvents, j.m.JobState, j.m.JobRestarts, j.m.TransformErrors, j.m.TransformStale,
	} {
		v.DeletePartialMatch(l)
	}
	j.m.pressure.forget(j.job)
}

var _ engine.Observer = (*Metrics)(nil)

// ObserveBatch counts a batch of writes made durable after d (engine.Observer).
func (m *Metrics) ObserveBatch(job, kind string, d time.Duration, writes int) {
	m.Job(job, kind).Batch(d, writes)
}

// ObserveWrites counts upserts and deletes made durable.
func (m *Metrics) ObserveWrites(job, kind string, upserts, deletes int) {
	j := m.Job(job, kind)
	j.Indexed(upserts)
	j.Deleted(deletes)
}

// ObserveSkipped counts documents the transform kept out.
func (m *Metrics) ObserveSkipped(job, kind string, n int) { m.Job(job, kind).Skipped(n) }

// ObserveError counts one error of code.
func (m *Metrics) ObserveError(job, code string) { m.Job(job, "").Error(code) }

// ObserveLag sets how far the durable position is behind.
func (m *Metrics) ObserveLag(job string, lag time.Duration) { m.Job(job, "").Lag(lag) }

// ObservePosition sets the time of the recorded position.
func (m *Metrics) ObservePosition(job string, t time.Time) { m.Job(job, "").Position(t) }

// ObserveReindexProgress sets a running reindex's progress.
func (m *Metrics) ObserveReindexProgress(job string, done, estimated int64) {
	m.Job(job, "").ReindexProgress(done, estimated)
}

// ObserveReindexDone counts a completed reindex.
func (m *Metrics) ObserveReindexDone(job string) { m.Job(job, "").ReindexDone() }

// ObserveDeadLetters sets the job's documents in the errors collection.
func (m *Metrics) ObserveDeadLetters(job string, n int64) { m.Job(job, "").DeadLetters(n) }

// ObserveDDL counts a drop, rename or dropDatabase seen by a mirror.
func (m *Metrics) ObserveDDL(job, event string) { m.Job(job, "").DDL(event) }

// ObserveState sets the job's current state (supervisor.Metrics).
func (m *Metrics) ObserveState(job, state string) { m.Job(job, "").State(state) }

// ObserveLease sets whether this process holds the job's lease.
func (m *Metrics) ObserveLease(job string, held bool, epoch int64) { m.Job(job, "").Lease(held, epoch) }

// ObserveRestart counts a restart after a failure.
func (m *Metrics) ObserveRestart(job string) { m.Job(job, "").Restart() }

// ObserveTransformError records a changed file failing to load, or loading.
func (m *Metrics) ObserveTransformError(job string, failed bool) {
	m.Job(job, "").TransformError(failed)
}

// Forget removes the job's series.
func (m *Metrics) Forget(job string) { m.Job(job, "").Forget() }
