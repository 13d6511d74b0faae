// Package meili is the Meilisearch sink of search jobs: the engine
// (sidecar/engine) writes a job's documents into its index through Sink,
// which also builds the staged index of a swap reindex and swaps it in.
// NewClient is the Meilisearch client the sidecar uses, tuned for posting
// document batches.
//
// It is a sibling of the replica sink (replicate): it imports the engine for
// the Sink interface and its types, transform for a document's index id,
// and errs; never another sink, the supervisor or the HTTP server.
package meili
