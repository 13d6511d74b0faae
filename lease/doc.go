// Package lease implements server-time leases in a MongoDB collection, so
// that of all the pods running a job exactly one does the work and the others
// stand by.
//
// # The document
//
// One lease per name, a document in the state collection:
//
//	{_id: {lease: <name>}, holder: "host:pid:random", nonce: <private>,
//	 epoch: <int64>, acquiredAt: <date>, expiresAt: <date>, ttlMs: <int64>}
//
// holder names the process; nonce is a fresh random value per acquisition, so
// that the same process acquiring the same name twice (a restarted job) is two
// different leases. The nonce never appears in errors, logs, List or String.
//
// # Time
//
// Every expiry decision is made by the server with its own clock: expiresAt is
// written as $$NOW + ttl in an update pipeline, a lease is free when
// expiresAt <= $$NOW, and a renewal only matches while expiresAt > $$NOW. No
// process clock is ever compared with a server time, so clock skew between
// pods changes nothing. The process clock is used only to schedule renewals
// and standby polls, and for one conservative rule of the holder's own: if no
// renewal has succeeded for 3/4 of the TTL, measured with the monotonic clock
// from the moment the last successful renewal was *sent* (which is before the
// server stamped it), the holder treats the lease as lost rather than run on a
// lease it cannot prove.
//
// # Acquire
//
// Acquire is one findAndModify: an upsert whose filter is the plain _id
// equality, with an update pipeline that sets every field with
// $cond(expired-or-missing, new value, old value). The condition must live in
// the pipeline, not in the filter: real mongod refuses $expr in the filter of
// any upsert (code 224, QueryFeatureNotAllowed, at parse time; DOCS-14158),
// and an equality-only upsert filter also makes mongod retry a concurrent
// insert race internally instead of failing with a duplicate key
// (write_ops_exec.cpp shouldRetryDuplicateKeyException). findAndModify takes
// an update pipeline, with upsert and $$NOW, since MongoDB 4.2 (SERVER-40397,
// SERVER-40419), the oldest server this form works with (older ones, and
// servers without pipelines, get the form below). The returned
// document tells "taken" (our holder and nonce) from "held" (someone else's,
// reported as RUNNING naming the holder and expiresAt). A duplicate key error
// is still handled (retried once, then reported as held).
//
// # Without update pipelines
//
// A source without update pipelines or $$NOW expressions (FerretDB 1.24;
// MongoDB before 4.2) gets the same leases in another form, chosen by the
// capability probe at start (Options.Form; replica sets keep the form
// above). Each write is preceded by a read of the server's own clock,
// hello's localTime, the clock mongod reads for $$NOW; the write's filter
// and values are plain operators over that reading T:
//
//   - Acquire: findAndModify with upsert, filter {_id, $or: [no expiresAt,
//     expiresAt <= T]}, update $set holder, nonce, acquiredAt = T,
//     expiresAt = T + ttl, $inc epoch. A lease that is not free
//     answers with a duplicate key (the filter is not a pure equality, so
//     the upsert tries to insert the _id); the document read then names
//     the holder (RUNNING).
//   - Renew: filter {_id, holder, nonce, expiresAt > T}, update $max
//     expiresAt = T + ttl.
//   - Release: $currentDate expiresAt, $unset holder and nonce (the epoch
//     stays, as above).
//   - List and HeldBy: the clock is read, then the documents; expired is
//     expiresAt <= T.
//
// It is still server time: T is the server's clock, and no process clock
// is compared with a server time. It is still safe, because T is read
// before the write applies and the server's clock only moves forward
// between the two, so a stale reading only ever errs one way:
//
//   - a taker sees a lease free only if it expired by T, hence by the time
//     the write applies; a stale T keeps a lease held a little longer (the
//     taker is conservative, never early). The test of "free" and the take
//     are one atomic findAndModify on the document, as in the pipeline
//     form.
//   - the expiry T + ttl is at most the server's now + ttl: the holder's
//     lease is shorter by a round trip, never longer. The holder's give-up
//     rule counts 3/4 of the TTL from before the clock read, so it still
//     stops first.
//   - $max keeps expiresAt monotone: a renewal computed from an older
//     reading never moves the expiry back.
//   - a renewal whose reading predates an expiry it lands after may extend
//     a lease that lapsed unnoticed; that is harmless, because nobody took
//     it (a takeover changes holder and nonce, and the renewal's filter
//     would then match nothing), so no two holders overlap.
//   - the epoch is still incremented in the acquiring write, so fencing is
//     unchanged.
//
// The reading is one server's clock and the write lands on that server: a
// standalone, FerretDB. A sharded cluster's mongos (whose hello would read
// the router's clock, not the shard's) always takes pipelines, so it
// never gets this form.
//
// # Epoch and fencing
//
// Every acquisition increments epoch in the same atomic write. Release does
// not delete the document: it removes holder and nonce and sets expiresAt to
// $$NOW, so the epoch survives and keeps increasing for the life of the name.
// (Deleting it would restart epochs at 1 and let a deposed holder's epoch
// match a later holder's, which breaks fencing.) Only an operator deleting the
// document by hand restarts the count.
//
// Writes that a deposed holder must never make (the job's position, reindex
// checkpoints) are fenced by the epoch. The rule, for a document D that such
// writes update:
//
//   - add Lease.Fence() to the write's filter: {leaseEpoch: {$lte: epoch}};
//   - set Lease.Stamp() in the same update: leaseEpoch = epoch;
//   - write with upsert; a duplicate key error (Lease.Fenced maps it to
//     LEASE_LOST) means a holder with a later epoch already wrote D.
//
// Because the filter is not a pure equality, mongod reports the duplicate key
// instead of retrying it. A new holder should stamp D (write it once with its
// epoch) before it starts work, so that from then on every write of every
// earlier holder fails. Never delete a fenced document: the stamp goes with
// it, and a deposed holder's next upsert would recreate D. Clear its fields
// instead ($unset them, keep leaseEpoch).
//
// Writes to Meilisearch cannot be fenced: their sender calls Held right
// before each request, which applies the give-up rule at once, so a
// process continued after a freeze learns of its loss before it sends, not
// at its renewer's next turn. A request already in flight when the holder
// stalled may still land (README).
//
// # Keep, Confirm, Release, Wait
//
// Keep renews every TTL/3 and cancels the context it returns with a
// LEASE_LOST cause (context.Cause) when a renewal finds the lease gone, taken
// or expired, or when no renewal succeeded in time. Confirm is one renewal,
// used before destructive or recording steps. Release gives the lease up
// (only if it is still ours). Wait is the standby loop: it tries to acquire
// with exponential backoff and ±25% jitter, capped at TTL/3 so a freed lease
// is noticed within a renewal period, and logs the holder once, then only when
// it changes.
package lease
