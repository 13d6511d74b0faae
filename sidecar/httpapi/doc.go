// Package httpapi is the sidecar's HTTP side: the server of /healthz,
// /readyz, /status, /wait (read your writes, answered by a Waits) and
// /metrics (Start), and the Prometheus collectors
// behind /metrics (Metrics).
//
// Metrics implements the small interfaces the engine (engine.Observer) and
// the supervisor (supervisor.Metrics) declare for what they measure, so
// neither of them imports Prometheus or this package. The server asks for
// the jobs' status through status.Source, which the supervisor implements.
package httpapi
