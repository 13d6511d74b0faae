package httpapi

import (
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// LabelPipeline is the label naming the job on every per-job series. Not
// "job": Prometheus sets its own job label (the scrape job) on every
// series it scrapes, and under the default honor_labels: false renames the
// target's to exported_job, so {job="articles"} would match nothing.
const LabelPipeline = "pipeline"

// Metrics are the sidecar's Prometheus collectors, every name prefixed
// meilistream_. Every per-job family has the labels pipeline (the job
// name) and kind ("search" or "mirror"); some add code (an error code),
// event (a DDL event) or state (a status.Job state).
//
// Build one with NewMetrics in main, pass it down; per job take a
// *JobMetrics with Job(name, kind) and call its methods. A nil *Metrics
// and a nil *JobMetrics are valid and record nothing, so tests and tools
// need none.
//
// Declare creates a job's series at zero as soon as the job is configured,
// so rate() and increase() work from the first scrape and an absent series
// means an absent job. job_state and follow_lag_seconds are read from the
// jobs' status at each scrape once SetStatus is called (what /status
// shows, by construction); before, from what ObserveState and ObserveLag
// were told.
type Metrics struct {
	DocumentsIndexed *prometheus.CounterVec   // meilistream_documents_indexed_total: upserts made durable
	DocumentsDeleted *prometheus.CounterVec   // meilistream_documents_deleted_total: deletes made durable
	DocumentsSkipped *prometheus.CounterVec   // meilistream_documents_skipped_total: kept out by the transform
	Errors           *prometheus.CounterVec   // meilistream_errors_total{code}: per-document and job errors
	BatchDuration    *prometheus.HistogramVec // meilistream_batch_duration_seconds: send until durable
	BatchDocuments   *prometheus.HistogramVec // meilistream_batch_documents: writes per batch
	PositionTime     *prometheus.GaugeVec     // meilistream_position_timestamp_seconds: cluster time of the recorded position
	DeadLetters      *prometheus.GaugeVec     // meilistream_dead_letters: documents in the errors collection
	LeaseHeld        *prometheus.GaugeVec     // meilistream_lease_held: 1 while this process holds the lease
	LeaseEpoch       *prometheus.GaugeVec     // meilistream_lease_epoch: epoch of the lease last held or seen
	ReindexDone      *prometheus.GaugeVec     // meilistream_reindex_documents_done
	ReindexTotal     *prometheus.GaugeVec     // meilistream_reindex_documents_estimated
	Reindexes        *prometheus.CounterVec   // meilistream_reindexes_total: reindexes completed
	DDLEvents        *prometheus.CounterVec   // meilistream_ddl_events_total{event}: drop/rename/dropDatabase seen by a mirror
	JobRestarts      *prometheus.CounterVec   // meilistream_job_restarts_total
	StallHandOvers   *prometheus.CounterVec   // meilistream_stall_handovers_total: leases given back after no progress while failing
	TransformErrors  *prometheus.CounterVec   // meilistream_transform_reload_errors_total: changed files that failed to load while the previous version runs
	TransformStale   *prometheus.GaugeVec     // meilistream_transform_stale: 1 while the job's changed file fails to load
	SourceReads      *prometheus.CounterVec   // meilistream_source_reads_total{call,outcome}: a transform's reads of the source MongoDB
	SourceReadTime   *prometheus.HistogramVec // meilistream_source_read_duration_seconds{call}
	// meilistream_documents_skipped_unchanged_total: updates not sent,
	// unable to change the destination's document (skipUnchanged)
	DocumentsUnchanged *prometheus.CounterVec
	MeiliTasks         *prometheus.GaugeVec // meilistream_meili_enqueued_tasks: tasks enqueued in Meilisearch, not seen processed
	MeiliBytes         *prometheus.GaugeVec // meilistream_meili_enqueued_bytes: their requests' bytes
	// meilistream_verify_drift_documents{drift}: documents the last
	// complete background verify found missing, stale or extra;
	// meilistream_verify_last_success_timestamp_seconds: when it ended.
	VerifyDrift *prometheus.GaugeVec
	VerifyLast  *prometheus.GaugeVec
	// meilistream_job_stalled: 1 while the job's pending work has not
	// moved for longer than its watchdog's bound (status "stalled");
	// meilistream_stalls_total counts the times it became so.
	JobStalled *prometheus.GaugeVec
	Stalls     *prometheus.CounterVec
	// meilistream_reindex_throttled{reason}: 1 while the job's reindex
	// chunks are slowed for reason (rate, mongodb_latency,
	// meilisearch_backlog), 0 for the others; present once a reindex ran.
	ReindexThrottled *prometheus.GaugeVec
	// meilistream_waits_total{status}: GET /wait answers for the job, by
	// HTTP status (read your writes)
	Waits *prometheus.CounterVec

	// meilistream_job_state{state} and meilistream_follow_lag_seconds, see
	// statusCollector.
	live *statusCollector

	mu    sync.Mutex
	kinds map[string]string // job -> kind, from Declare or the engine's calls
}

// DocErrorCodes are the codes of per-document errors a transform causes,
// and JobErrorCodes those a job's run may end with: the code values of
// meilistream_errors_total created at zero for every job. A destination's
// own refusal codes (Meilisearch's invalid_document_id, ...) appear when
// they first happen.
var (
	DocErrorCodes = []errs.Code{errs.TransformFailed, errs.NotADocument, errs.IDMismatch}
	JobErrorCodes = []errs.Code{errs.Failed, errs.LeaseLost, errs.HistoryLost, errs.ConfigInvalid}
)

// DDLEventNames are the events meilistream_ddl_events_total counts for a
// mirror job, created at zero.
var DDLEventNames = []string{"drop", "rename", "dropDatabase"}

// unknownKind labels a job whose kind is not known (its file did not load).
const unknownKind = "unknown"

// NewMetrics creates the collectors and registers them with reg (a fresh
// prometheus.NewRegistry() in main, see NewRegistry; a registry of its own
// in each test). It panics if they are already registered there, like
// prometheus.MustRegister: that is a programming error.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "meilistream"
	job := []string{LabelPipeline, "kind"}
	with := func(extra string) []string { return []string{LabelPipeline, "kind", extra} }
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, job)
	}
	m := &Metrics{
		DocumentsIndexed: counter("documents_indexed_total", "Documents upserted into the destination and durable.", job),
		DocumentsDeleted: counter("documents_deleted_total", "Documents deleted from the destination, durable.", job),
		DocumentsSkipped: counter("documents_skipped_total", "Documents the transform kept out of the destination.", job),
		Errors:           counter("errors_total", "Errors by code: per-document errors and job failures.", with("code")),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "batch_duration_seconds",
			Help:    "Time from sending a batch to the destination until it is durable.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms .. ~41s
		}, job),
		BatchDocuments: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "batch_documents",
			Help:    "Writes (upserts and deletes) per batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 .. 65536
		}, job),
		PositionTime: gauge("position_timestamp_seconds", "Cluster time (Unix seconds) of the last recorded position."),
		DeadLetters:  gauge("dead_letters", "Documents recorded in the errors collection for the job, as last counted by this process."),
		LeaseHeld:    gauge("lease_held", "1 while this process holds the job's lease, else 0."),
		LeaseEpoch:   gauge("lease_epoch", "Epoch of the job's lease, last held or seen."),
		ReindexDone:  gauge("reindex_documents_done", "Documents read by the running (or last) reindex."),
		ReindexTotal: gauge("reindex_documents_estimated", "Estimated documents in the collection at the reindex's start."),
		Reindexes:    counter("reindexes_total", "Reindexes completed.", job),
		DDLEvents:    counter("ddl_events_total", "Collection or database drops and renames seen by a mirror job (never applied).", with("event")),
		JobRestarts:  counter("job_restarts_total", "Restarts of the job after a failure.", job),
		StallHandOvers: counter("stall_handovers_total",
			"Times this process gave the job's lease to another pod after no progress for MEILISTREAM_STALL_TIMEOUT while its source or destination kept failing.", job),
		TransformErrors: counter("transform_reload_errors_total",
			"Changes of the job's transform file that failed to load (the previous version kept running).", job),
		TransformStale: gauge("transform_stale", "1 while the job's changed transform file fails to load and the previous version runs."),
		SourceReads: counter("source_reads_total",
			"Reads of the source MongoDB by a transform (monstache's findId, findOne, find, pipe), by outcome (ok, error).",
			[]string{LabelPipeline, "kind", "call", "outcome"}),
		SourceReadTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "source_read_duration_seconds",
			Help:    "Time a transform waited for one read of the source MongoDB.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. ~4s
		}, with("call")),
		DocumentsUnchanged: counter("documents_skipped_unchanged_total",
			"Updates not sent because they could not change the document the destination holds (skipUnchanged).", job),
		MeiliTasks: gauge("meili_enqueued_tasks", "Tasks the job has enqueued in Meilisearch and not yet seen processed."),
		MeiliBytes: gauge("meili_enqueued_bytes", "Request bytes of the tasks the job has enqueued in Meilisearch and not yet seen processed."),
		VerifyDrift: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "verify_drift_documents",
			Help: "Documents the job's last complete background verify found differing from the transform of the collection, by drift (missing, stale, extra)."}, with("drift")),
		VerifyLast: gauge("verify_last_success_timestamp_seconds", "When (Unix seconds) the job's last complete background verify ended."),
		JobStalled: gauge("job_stalled", "1 while the job's pending work has not moved for longer than its watchdog's bound (state stalled), else 0."),
		Stalls:     counter("stalls_total", "Times the job's pending work stopped moving for longer than its watchdog's bound.", job),
		Waits:      counter("waits_total", "GET /wait answers for the job by HTTP status: 200 durable, 504 timed out, 503 no holder, 429 too many.", with("status")),
		kinds:      map[string]string{},
		ReindexThrottled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "reindex_throttled",
			Help: "1 while the job's reindex reads its chunks slower than it could, by reason: rate (MEILISTREAM_REINDEX_RATE), mongodb_latency or meilisearch_backlog (the brake); 0 for the other reasons."}, with("reason")),
	}
	m.live = newStatusCollector(ns, m)
	reg.MustRegister(m.DocumentsIndexed, m.DocumentsDeleted, m.DocumentsSkipped, m.Errors,
		m.BatchDuration, m.BatchDocuments, m.PositionTime, m.DeadLetters,
		m.LeaseHeld, m.LeaseEpoch, m.ReindexDone, m.ReindexTotal, m.Reindexes, m.DDLEvents,
		m.JobRestarts, m.StallHandOvers, m.TransformErrors, m.TransformStale, m.SourceReads, m.SourceReadTime, m.live,
		m.DocumentsUnchanged, m.MeiliTasks, m.MeiliBytes, m.JobStalled, m.Stalls, m.Waits, m.VerifyDrift, m.VerifyLast)
	reg.MustRegister(m.ReindexThrottled)
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

// SetStatus makes job_state and follow_lag_seconds read the jobs' status
// (the supervisor's, what /status serves) at every scrape, so they agree
// with /status by construction. Its Status must answer from memory.
func (m *Metrics) SetStatus(src status.Source) {
	if m != nil {
		m.live.setSource(src)
	}
}

// kindOf returns job's kind as declared (search when never told: the
// engine's own default).
func (m *Metrics) kindOf(job string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.kinds[job]; ok {
		return k
	}
	return "search"
}

// learnKind records job's kind when a caller tells it (a declared kind
// stays).
func (m *Metrics) learnKind(job, kind string) {
	if kind == "" {
		return
	}
	m.mu.Lock()
	if _, ok := m.kinds[job]; !ok {
		m.kinds[job] = kind
	}
	m.mu.Unlock()
}

// JobMetrics are the collectors of one job, labels bound.
type JobMetrics struct {
	m         *Metrics
	job, kind string
}

// Job returns the collectors of job (kind "search" or "mirror"; "" for
// the kind the job was declared with).
func (m *Metrics) Job(job, kind string) *JobMetrics {
	if m == nil {
		return nil
	}
	if kind == "" {
		kind = m.kindOf(job)
	} else {
		m.learnKind(job, kind)
	}
	return &JobMetrics{m: m, job: job, kind: kind}
}

// Declare creates the series of a configured job at zero: its counters
// (errors_total for each of DocErrorCodes and JobErrorCodes, and for a
// mirror ddl_events_total for each of DDLEventNames), its histograms,
// lease_held and transform_stale. Gauges whose value is not known yet
// (the position's time, the dead letters, the lease epoch, a reindex's
// progress, the lag) appear once known: a zero there would be a false
// reading, not a count. A job declared again with another kind loses the
// old kind's series. kind "" is a job whose file did not load.
func (m *Metrics) Declare(job, kind string) {
	if m == nil {
		return
	}
	if kind == "" {
		kind = unknownKind
	}
	m.mu.Lock()
	prev, had := m.kinds[job]
	m.kinds[job] = kind
	m.mu.Unlock()
	if had && prev != kind {
		m.deleteSeries(job)
	}
	l := []string{job, kind}
	for _, c := range []*prometheus.CounterVec{m.DocumentsIndexed, m.DocumentsDeleted, m.DocumentsSkipped,
		m.Reindexes, m.JobRestarts, m.StallHandOvers, m.TransformErrors, m.DocumentsUnchanged, m.Stalls} {
		c.WithLabelValues(l...).Add(0)
	}
	for _, codes := range [][]errs.Code{DocErrorCodes, JobErrorCodes} {
		for _, c := range codes {
			m.Errors.WithLabelValues(job, kind, string(c)).Add(0)
		}
	}
	if kind == "mirror" {
		for _, e := range DDLEventNames {
			m.DDLEvents.WithLabelValues(job, kind, e).Add(0)
		}
	}
	m.BatchDuration.WithLabelValues(l...)
	m.BatchDocuments.WithLabelValues(l...)
	m.LeaseHeld.WithLabelValues(l...).Add(0)
	m.TransformStale.WithLabelValues(l...).Add(0)
	m.JobStalled.WithLabelValues(l...).Add(0)
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
		j.m.Errors.WithLabelValues(j.job, j.kind, code).Inc()
	}
}

// Batch records one batch of writes made durable after d.
func (j *JobMetrics) Batch(d time.Duration, writes int) {
	if j != nil {
		j.m.BatchDuration.WithLabelValues(j.job, j.kind).Observe(d.Seconds())
		j.m.BatchDocuments.WithLabelValues(j.job, j.kind).Observe(float64(writes))
	}
}

// Lag sets how far behind the job is (status.JobSnapshot.LagSeconds);
// shown until SetStatus is called, which reads it from the status.
func (j *JobMetrics) Lag(d time.Duration) {
	if j != nil {
		j.m.live.pushLag(j.job, d.Seconds())
	}
}

// Position sets the cluster time of the last recorded position.
func (j *JobMetrics) Position(t time.Time) {
	if j != nil {
		j.m.PositionTime.WithLabelValues(j.job, j.kind).Set(float64(t.UnixNano()) / 1e9)
	}
}

// DeadLetters sets the number of documents in the errors collection.
func (j *JobMetrics) DeadLetters(n int64) {
	if j != nil {
		j.m.DeadLetters.WithLabelValues(j.job, j.kind).Set(float64(n))
	}
}

// Lease sets whether this process holds the job's lease, and its epoch.
func (j *JobMetrics) Lease(held bool, epoch int64) {
	if j != nil {
		v := 0.0
		if held {
			v = 1
		}
		j.m.LeaseHeld.WithLabelValues(j.job, j.kind).Set(v)
		j.m.LeaseEpoch.WithLabelValues(j.job, j.kind).Set(float64(epoch))
	}
}

// ReindexProgress sets a running reindex's documents read and estimate.
func (j *JobMetrics) ReindexProgress(done, estimated int64) {
	if j != nil {
		j.m.ReindexDone.WithLabelValues(j.job, j.kind).Set(float64(done))
		j.m.ReindexTotal.WithLabelValues(j.job, j.kind).Set(float64(estimated))
	}
}

// ReindexDone counts one completed reindex.
func (j *JobMetrics) ReindexDone() {
	if j != nil {
		j.m.Reindexes.WithLabelValues(j.job, j.kind).Inc()
	}
}

// DDL counts one drop, rename or dropDatabase event seen by a mirror.
func (j *JobMetrics) DDL(event string) {
	if j != nil {
		j.m.DDLEvents.WithLabelValues(j.job, j.kind, event).Inc()
	}
}

// State sets the job's current state: one of status.States, so alerts
// read the same states as /status; any other value is shown too, and
// dropped when the state changes again, so exactly one state is 1. Shown
// until SetStatus is called, which reads the state from the status.
func (j *JobMetrics) State(state string) {
	if j != nil {
		j.m.live.pushState(j.job, state)
	}
}

// TransformError records that the job's changed file failed to load
// (failed) or that the file in effect is the latest again.
func (j *JobMetrics) TransformError(failed bool) {
	if j == nil {
		return
	}
	if failed {
		j.m.TransformErrors.WithLabelValues(j.job, j.kind).Inc()
		j.m.TransformStale.WithLabelValues(j.job, j.kind).Set(1)
	} else {
		j.m.TransformStale.WithLabelValues(j.job, j.kind).Set(0)
	}
}

// SourceRead counts one read of the source MongoDB by the job's transform
// (call: "findId", "findOne", "find" or "pipe") that waited d. Its series
// appear with the first read: only monstache scripts read.
func (j *JobMetrics) SourceRead(call string, d time.Duration, failed bool) {
	if j == nil {
		return
	}
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	j.m.SourceReads.WithLabelValues(j.job, j.kind, call, outcome).Inc()
	j.m.SourceReadTime.WithLabelValues(j.job, j.kind, call).Observe(d.Seconds())
}

// Verified sets the drift the job's last complete background verify
// found, and when it ended.
func (j *JobMetrics) Verified(missing, stale, extra int64, done time.Time) {
	if j == nil {
		return
	}
	for drift, n := range map[string]int64{"missing": missing, "stale": stale, "extra": extra} {
		j.m.VerifyDrift.WithLabelValues(j.job, j.kind, drift).Set(float64(n))
	}
	j.m.VerifyLast.WithLabelValues(j.job, j.kind).Set(float64(done.UnixMilli()) / 1000)
}

// Stalled sets whether the job's pending work has stopped moving (its
// watchdog), counting each time it becomes so.
func (j *JobMetrics) Stalled(stalled bool) {
	if j == nil {
		return
	}
	v := 0.0
	if stalled {
		v = 1
		j.m.Stalls.WithLabelValues(j.job, j.kind).Inc()
	}
	j.m.JobStalled.WithLabelValues(j.job, j.kind).Set(v)
}

// Restart counts one restart after a failure.
func (j *JobMetrics) Restart() {
	if j != nil {
		j.m.JobRestarts.WithLabelValues(j.job, j.kind).Inc()
	}
}

// StallHandOver counts a lease given back after no progress.
func (j *JobMetrics) StallHandOver() {
	if j != nil {
		j.m.StallHandOvers.WithLabelValues(j.job, j.kind).Inc()
	}
}

// Forget removes the job's series (a job whose transform file was
// removed), so /metrics stops showing a job that no longer exists.
func (j *JobMetrics) Forget() {
	if j == nil {
		return
	}
	j.m.mu.Lock()
	delete(j.m.kinds, j.job)
	j.m.mu.Unlock()
	j.m.deleteSeries(j.job)
}

// deleteSeries removes every series of job, of any kind.
func (m *Metrics) deleteSeries(job string) {
	m.live.forget(job)
	l := prometheus.Labels{LabelPipeline: job}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.DocumentsIndexed, m.DocumentsDeleted, m.DocumentsSkipped, m.Errors,
		m.BatchDuration, m.BatchDocuments, m.PositionTime, m.DeadLetters,
		m.LeaseHeld, m.LeaseEpoch, m.ReindexDone, m.ReindexTotal, m.Reindexes,
		m.DDLEvents, m.JobRestarts, m.StallHandOvers, m.TransformErrors, m.TransformStale,
		m.SourceReads, m.SourceReadTime, m.DocumentsUnchanged, m.MeiliTasks, m.MeiliBytes,
		m.JobStalled, m.Stalls, m.Waits, m.VerifyDrift, m.VerifyLast, m.ReindexThrottled,
	} {
		v.DeletePartialMatch(l)
	}
}

var _ engine.Observer = (*Metrics)(nil)

// ObserveWait counts a GET /wait answer of status for job, one of this
// process's jobs (Options.Waited): a name no job has is never a label.
func (m *Metrics) ObserveWait(job string, status int) {
	if m == nil {
		return
	}
	m.Waits.WithLabelValues(job, m.kindOf(job), strconv.Itoa(status)).Inc()
}

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

// ObserveLag sets how far behind the job is (see JobMetrics.Lag).
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

// ObserveWatchdog sets whether the job's pending work stopped moving
// (engine.Observer).
func (m *Metrics) ObserveWatchdog(job string, stalled bool) { m.Job(job, "").Stalled(stalled) }

// ObserveVerify sets what the job's last complete background verify found.
func (m *Metrics) ObserveVerify(job string, missing, stale, extra int64, done time.Time) {
	m.Job(job, "").Verified(missing, stale, extra, done)
}

// ObserveJob declares a configured job (supervisor.Metrics), see Declare.
func (m *Metrics) ObserveJob(job, kind string) { m.Declare(job, kind) }

// ObserveState sets the job's current state (supervisor.Metrics).
func (m *Metrics) ObserveState(job, state string) { m.Job(job, "").State(state) }

// ObserveLease sets whether this process holds the job's lease.
func (m *Metrics) ObserveLease(job string, held bool, epoch int64) { m.Job(job, "").Lease(held, epoch) }

// ObserveRestart counts a restart after a failure.
func (m *Metrics) ObserveRestart(job string) { m.Job(job, "").Restart() }

// ObserveStall counts a lease given back after no progress.
func (m *Metrics) ObserveStall(job string) { m.Job(job, "").StallHandOver() }

// ObserveTransformError records a changed file failing to load, or loading.
func (m *Metrics) ObserveTransformError(job string, failed bool) {
	m.Job(job, "").TransformError(failed)
}

// Forget removes the job's series.
func (m *Metrics) Forget(job string) { m.Job(job, "").Forget() }

// statusCollector serves meilistream_job_state{pipeline,kind,state} and
// meilistream_follow_lag_seconds{pipeline,kind}: from the jobs' status at
// each scrape once a source is set (SetStatus), so they are what /status
// says at that instant; before that (tests, tools), from what the
// supervisor and the engine pushed. The state's family has every state of
// status.States, 1 for the current one; the lag's has a series while the
// job's lag is known (it follows its change stream).
type statusCollector struct {
	m                  *Metrics
	stateDesc, lagDesc *prometheus.Desc
	// meilistream_position_age_seconds, meilistream_oplog_headroom_seconds
	// and meilistream_oplog_window_seconds: from the source's status only.
	ageDesc, roomDesc, windowDesc *prometheus.Desc
	// meilistream_job_mode, meilistream_scan_lag_seconds and
	// meilistream_scan_cursor_timestamp_seconds: from the source's status
	// only.
	modeDesc, scanLagDesc, cursorDesc *prometheus.Desc

	mu    sync.Mutex
	src   status.Source
	state map[string]string  // pushed, per job
	lag   map[string]float64 // pushed, per job
}

func newStatusCollector(ns string, m *Metrics) *statusCollector {
	return &statusCollector{
		m: m,
		stateDesc: prometheus.NewDesc(ns+"_job_state", "1 for the job's current state (as /status shows it), 0 for the others.",
			[]string{LabelPipeline, "kind", "state"}, nil),
		lagDesc: prometheus.NewDesc(ns+"_follow_lag_seconds",
			"Age of the oldest change the job's stream delivered that is not yet durable in the destination, or how far what is durable is behind the source's newest cluster time when larger; 0 when caught up. Present while the job follows its stream.",
			[]string{LabelPipeline, "kind"}, nil),
		ageDesc: prometheus.NewDesc(ns+"_position_age_seconds",
			"Age of the job's recorded position in cluster time (the oplog's newest entry minus the position), whoever holds the job. Present while the oplog window is known.",
			[]string{LabelPipeline, "kind"}, nil),
		roomDesc: prometheus.NewDesc(ns+"_oplog_headroom_seconds",
			"How long the job can still resume from its recorded position: the oplog window minus the position's age. Under 0 the job cannot resume (HISTORY_LOST).",
			[]string{LabelPipeline, "kind"}, nil),
		windowDesc: prometheus.NewDesc(ns+"_oplog_window_seconds",
			"The source's oplog window: newest minus oldest entry of local.oplog.rs (needs read on the local database). Absent while unknown.",
			nil, nil),
		modeDesc: prometheus.NewDesc(ns+"_job_mode", "1 for how the job learns of changes in this process (stream or scan; a job of mode auto shows its pick), 0 for the other.",
			[]string{LabelPipeline, "kind", "mode"}, nil),
		scanLagDesc: prometheus.NewDesc(ns+"_scan_lag_seconds",
			"A scan-mode job with a date key: now less the key of its recorded cursor (a quiet collection's grows: it is the age of the last write followed). Present while this process holds the job.",
			[]string{LabelPipeline, "kind"}, nil),
		cursorDesc: prometheus.NewDesc(ns+"_scan_cursor_timestamp_seconds",
			"A scan-mode job with a date key: its recorded cursor's key (Unix seconds). Present while this process holds the job.",
			[]string{LabelPipeline, "kind"}, nil),
		state: map[string]string{},
		lag:   map[string]float64{},
	}
}

func (c *statusCollector) setSource(src status.Source) {
	c.mu.Lock()
	c.src = src
	c.mu.Unlock()
}

func (c *statusCollector) pushState(job, state string) {
	c.mu.Lock()
	c.state[job] = state
	c.mu.Unlock()
}

func (c *statusCollector) pushLag(job string, seconds float64) {
	c.mu.Lock()
	c.lag[job] = seconds
	c.mu.Unlock()
}

func (c *statusCollector) forget(job string) {
	c.mu.Lock()
	delete(c.state, job)
	delete(c.lag, job)
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.stateDesc
	ch <- c.lagDesc
	ch <- c.ageDesc
	ch <- c.roomDesc
	ch <- c.windowDesc
	ch <- c.modeDesc
	ch <- c.scanLagDesc
	ch <- c.cursorDesc
}

// Collect implements prometheus.Collector. The source is asked without
// any lock held: it takes the supervisor's, which calls into Metrics
// while holding its own.
func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		job, kind, state string
		lag, age, room   *float64
		mode             string
		scan             *status.ScanState
	}
	var rows []row
	c.mu.Lock()
	src := c.src
	if src == nil {
		for job, st := range c.state {
			rows = append(rows, row{job: job, state: st})
		}
		for job, v := range c.lag {
			rows = append(rows, row{job: job, lag: &v})
		}
	}
	c.mu.Unlock()
	if src != nil {
		for _, j := range src.Status() {
			r := row{job: j.Name, kind: j.Kind, state: j.State, lag: j.LagSeconds, age: j.PositionAgeSeconds, room: j.HeadroomSeconds, mode: j.Mode, scan: j.Scan}
			if r.age == nil && j.PositionTime != nil && holding(j.State) {
				// The oplog window is not known (or not yet read): the
				// holder still says how old its position is, by its
				// clock against the position's cluster time.
				a := max(0, time.Since(*j.PositionTime).Seconds())
				r.age = &a
			}
			rows = append(rows, r)
		}
		if w, ok := src.(status.OplogWindower); ok {
			if v, known := w.OplogWindow(); known {
				ch <- prometheus.MustNewConstMetric(c.windowDesc, prometheus.GaugeValue, v)
			}
		}
	}
	for _, r := range rows {
		kind := r.kind
		if kind == "" {
			kind = c.m.kindOf(r.job)
		}
		if r.state != "" {
			known := false
			for _, s := range status.States {
				v := 0.0
				if s == r.state {
					v, known = 1, true
				}
				ch <- prometheus.MustNewConstMetric(c.stateDesc, prometheus.GaugeValue, v, r.job, kind, s)
			}
			if !known {
				ch <- prometheus.MustNewConstMetric(c.stateDesc, prometheus.GaugeValue, 1, r.job, kind, r.state)
			}
		}
		if r.lag != nil {
			ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, *r.lag, r.job, kind)
		}
		if r.age != nil {
			ch <- prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, *r.age, r.job, kind)
		}
		if r.room != nil {
			ch <- prometheus.MustNewConstMetric(c.roomDesc, prometheus.GaugeValue, *r.room, r.job, kind)
		}
		if r.mode != "" {
			for _, m := range []string{"stream", "scan"} {
				v := 0.0
				if m == r.mode {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.modeDesc, prometheus.GaugeValue, v, r.job, kind, m)
			}
		}
		if r.scan != nil && !r.scan.CursorTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.scanLagDesc, prometheus.GaugeValue, r.scan.LagSeconds, r.job, kind)
			ch <- prometheus.MustNewConstMetric(c.cursorDesc, prometheus.GaugeValue, float64(r.scan.CursorTime.UnixMilli())/1000, r.job, kind)
		}
	}
}

// holding says whether a job in state runs in this process: only the
// holder's position age is its own to report (a standby's copy is old).
func holding(state string) bool {
	switch state {
	case status.Following, status.Reindexing, status.Paused, status.Unavailable:
		return true
	}
	return false
}
