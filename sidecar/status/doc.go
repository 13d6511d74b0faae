// Package status is what a running sidecar knows and says about its jobs:
// each job's live figures (JobStats: written by the engine as it works,
// read by the supervisor), and the JSON of GET /status built from them
// (Report, Job and the types inside it) with the interfaces the HTTP
// server asks through (Source, QuickReadier). The engine, the supervisor
// and the HTTP server share these types without importing one another.
//
// It is a leaf, so every package may use it.
package status
