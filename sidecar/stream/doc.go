// Package stream reads the jobs' change streams: a stream is opened on the
// job's database, filtered to the job's collection and its watermark
// documents (for a job declaring its fields: the updates touching them,
// documents trimmed to them, fields.go), and a Reader goroutine hands its
// events over one getMore batch at a time, bounded in bytes. The jobs of a
// process on one database share one stream through a Hub (hub.go), each
// with its own position and read-ahead. An event over 16 MB is put
// together from its fragments where the server splits it (split.go), and
// read by a lean stretch of the stream where it cannot (Large).

package stream
