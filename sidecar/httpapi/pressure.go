package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meilistream/meilistream/sidecar/engine"
)

// pressure are the collectors of what a job spares and holds back
// downstream, labelled by pipeline (the job's name):
//
//	meilistream_documents_skipped_unchanged_total{pipeline,kind}
//	    updates not sent: they could not change the destination's document
//	meilistream_meili_enqueued_tasks{pipeline}
//	    tasks the job has enqueued in Meilisearch, not yet seen processed
//	meilistream_meili_enqueued_bytes{pipeline}
//	    the bytes of their requests
type pressure struct {
	unchanged  *prometheus.CounterVec
	queueTasks *prometheus.GaugeVec
	queueBytes *prometheus.GaugeVec
}

func newPressure(reg prometheus.Registerer) *pressure {
	const ns = "meilistream"
	p := &pressure{
		unchanged: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "documents_skipped_unchanged_total",
			Help: "Updates not sent because they could not change the document the destination holds (skipUnchanged)."}, []string{"pipeline", "kind"}),
		queueTasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "meili_enqueued_tasks",
			Help: "Tasks the job has enqueued in Meilisearch and not yet seen processed."}, []string{"pipeline"}),
		queueBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "meili_enqueued_bytes",
			Help: "Request bytes of the tasks the job has enqueued in Meilisearch and not yet seen processed."}, []string{"pipeline"}),
	}
	reg.MustRegister(p.unchanged, p.queueTasks, p.queueBytes)
	return p
}

// forget removes a job's series.
func (p *pressure) forget(job string) {
	l := prometheus.Labels{"pipeline": job}
	p.unchanged.DeletePartialMatch(l)
	p.queueTasks.DeletePartialMatch(l)
	p.queueBytes.DeletePartialMatch(l)
}

var (
	_ engine.UnchangedObserver = (*Metrics)(nil)
	_ engine.QueueObserver     = (*Metrics)(nil)
)

// ObserveUnchanged counts updates not sent because they could not change
// the destination's document (engine.UnchangedObserver).
func (m *Metrics) ObserveUnchanged(job, kind string, n int) {
	if m != nil && n > 0 {
		m.pressure.unchanged.WithLabelValues(job, kind).Add(float64(n))
	}
}

// ObserveQueue sets what the job has enqueued in Meilisearch
// (engine.QueueObserver).
func (m *Metrics) ObserveQueue(job string, tasks int, bytes int64) {
	if m != nil {
		m.pressure.queueTasks.WithLabelValues(job).Set(float64(tasks))
		m.pressure.queueBytes.WithLabelValues(job).Set(float64(bytes))
	}
}
