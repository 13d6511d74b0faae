// Package mongotest is a MongoDB-compatible test server: the real
// go.mongodb.org/mongo-driver/v2 talks to it over a real socket and sees the
// primary of a one-node replica set ("rs0"), so sessions, retryable writes
// and change streams are on, as against a real replica set.
//
//	srv, err := mongotest.Start(mongotest.Options{})
//	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
//
// It speaks OP_MSG (kind 0 and kind 1 sections) and the legacy OP_QUERY
// hello handshake driver v2.10.0 sends first on every connection, and
// follows the reference note ../shared/reference/mongodb.md, which was
// checked against the driver: hello without topologyVersion, strict reply
// types, blocking change-stream getMore, postBatchResumeToken in every
// batch, the errors the driver resumes on, $expr refused in upsert filters
// (224), duplicate-key (11000) shapes.
//
// Storage is in memory: each collection keeps raw BSON documents in a skip
// list ordered by _id, so _id lookups and _id range pages are O(log n + k).
// One lock serialises writes (reads share it), which makes every write
// command atomic; change-stream getMores wait without holding it.
//
// Test controls: AdvanceClock (the server clock behind $$NOW, wallTime and
// new cluster times; see Options.NoopInterval), DropConnections (a network blip), SetHistorySize
// (bounded change history: resuming from before it fails with 286
// ChangeStreamHistoryLost, an open stream overtaken fails with 136
// CappedPositionLost), FailCommand (the failCommand fail point).
//
// # What differs from MongoDB
//
// Known differences, kept honest:
//   - No storage engine, no journal, no persistence; no authentication,
//     TLS or compression (compression is not advertised, so the driver never
//     compresses).
//   - One node only; no elections. Write and read concerns are accepted and
//     ignored (every write is immediately "majority"). No transactions:
//     startTransaction is refused with IllegalOperation (20).
//   - Natural order is _id order (MongoDB's is roughly insertion order).
//     Only the _id index is used for queries; secondary indexes are
//     recorded and enforce unique / partial unique / sparse constraints but
//     queries on other fields scan. Multikey unique indexes treat an array
//     as one key value. TTL indexes are accepted but never expire anything.
//     No collation, no text or geo indexes, no $where, no arrayFilters.
//   - Query operators: $eq $ne $gt $gte $lt $lte $in $nin $exists $type
//     $not $regex $size $all $elemMatch $mod $and $or $nor $expr. Update
//     operators: $set $unset $inc $mul $min $max $rename $setOnInsert $push
//     ($each $slice $position $sort) $addToSet $pull $pullAll $pop
//     $currentDate. Overlapping paths in one update are refused with 40
//     ConflictingUpdateOperators, as on mongod. A replacement of a stored
//     document refuses any top-level $-prefixed field with 52, a DBRef-like
//     $ref/$id pair included (mongod accepts that pair). Unknown top-level command
//     fields are ignored (mongod's IDL refuses them with 40415).
//   - Aggregation stages: $match $sort $limit $skip $project $addFields/$set
//     $unset $replaceRoot/$replaceWith $count $group ($sum $avg $min $max
//     $first $last $push $addToSet $count) $unwind $sortByCount; no $lookup,
//     $facet, $out, $merge. Expressions: see expr.go (the common arithmetic,
//     comparison, boolean, conditional, array, string and conversion
//     operators, $let $map $filter $switch); anything else is 168
//     InvalidPipelineOperator.
//   - Change events are rendered from an in-memory history with seq
//     numbers; resume tokens are {_data: hex} strings of this server's own
//     format (ordered by cluster time like real ones, but not interchangeable
//     with a real server's; a token this server did not issue gives 280,
//     and so does one of an event the stream does not show, at the
//     stream's first own event, as mongod's resume check does).
//     updateDescription is computed by diffing the old and new documents:
//     nested changes are dotted paths, a changed array is reported whole
//     and truncatedArrays is always empty. A pipeline
//     update becomes a replace event when its delta is not smaller than the
//     document, approximating mongod's rule. Post-images (fullDocument
//     whenAvailable/required) exist only for collections created or modified
//     with changeStreamPreAndPostImages; pre-images are never available.
//     A rename onto an existing collection (dropTarget) within a database
//     is one rename event, seen by the target's streams, as on mongod; a
//     cross-database rename is a drop of the target and a rename (mongod
//     copies through a temporary collection, with other events).
//     With showExpandedEvents, create, createIndexes and dropIndexes events
//     are produced (with collectionUUID and operationDescription), but not
//     modify or the sharding events.
//   - Cluster time seconds follow the server clock; the increment counts
//     writes within a second. Like mongod's periodic no-op writer, an idle
//     server writes a no-op every Options.NoopInterval (10 s) of real time,
//     so operationTime and postBatchResumeTokens advance on a quiet
//     cluster; AdvanceClock by at least the interval writes one no-op at
//     the new time instead of the several the skipped time would have
//     held. No-ops take history slots, as they take oplog space.
//   - Idle cursors are killed after Options.CursorTimeout (10 minutes, as
//     cursorTimeoutMillis) of server-clock time, checked when a getMore
//     arrives (mongod's reaper runs every few seconds); find's
//     noCursorTimeout exempts a cursor. Sessions never expire.
//   - hello reports maxWireVersion 21 (MongoDB 7.0) and omits lastWrite,
//     topologyVersion and compression on purpose (see the reference note).
//   - Authentication commands fail with AuthenticationFailed (18): there
//     are no users, so connect without credentials.
//   - failCommand is the only fail point.
package mongotest
