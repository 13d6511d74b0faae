// Package status holds what a running sidecar says about its jobs: the
// JSON of GET /status (Report, Job and the types inside it) and
// the interfaces the HTTP server asks it through (Source,
// QuickReadier). The supervisor produces these values and the HTTP server
// serves them; neither imports the other.
//
// It is a leaf: it imports nothing of this module, so every package may
// import it.
package status
