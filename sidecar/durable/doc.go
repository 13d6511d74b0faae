// Package durable is read your writes (docs/read-your-writes.md): it
// answers "is every change at or before cluster time T durable in the
// job's destination yet?" for the HTTP server's GET /wait and for
// `meilistream wait`.
//
// A Waiter keeps, per job, two clocks of the job's durable cluster time:
// the one the engine advances in memory while this process holds the job
// (Advance, from engine.Config.Durable), and the one recorded with the
// job's position in MongoDB, read while a waiter on a standby needs it.
// A waiter whose time is not yet covered has a wait document written
// (jobstate.MarkWait): the write lands in the holder's ordered change
// stream after the write waited for, and the holder records its position
// as soon as everything before it is durable, so no wait has to wait for
// the position interval. Writes of wait documents are coalesced per job
// (one in flight at a time), standby reads are shared per job, waiters
// sleep on a channel closed when a clock moves: a flood of waits costs a
// few writes and reads, and no goroutine per waiter.
//
// It imports jobstate and the MongoDB driver; never the engine, the
// supervisor or the HTTP server, which use it.
package durable
