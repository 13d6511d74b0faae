// Package jobstate is what meilistream keeps in MongoDB about each job:
// its recorded position in the change stream, the checkpoint of an
// unfinished reindex, the per-document error records, each running
// process's presence record (presence.go) and the requests of
// `meilistream retry` to the job's holder (requests.go), and what read your
// writes keeps: the durable cluster time beside the position and the
// job's wait document (wait.go). Every write of a
// position or checkpoint is fenced by the job's lease epoch, so a holder
// that lost its lease cannot overwrite the state of the one that took it.
// ReadState reads it all back for `meilistream status`.
//
// The engine (sidecar/engine) is its writer; `meilistream status` and
// `meilistream retry` read it.
package jobstate
