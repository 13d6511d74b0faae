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
// answers as the server does where the driver looks (checked against the
// driver's source): hello without topologyVersion, strict reply
// types, blocking change-stream getMore, postBatchResumeToken in every
// batch, the errors the driver resumes on, $expr refused in upsert filters
// (224), duplicate-key (11000) shapes.
//
// With Options.Standalone it answers as a standalone mongod instead (no
// replica set in hello, no cluster time, change streams refused with
// 40573, transactions with 20, w above 1 with 2; see Options.Standalone),
// for trying what a source without change streams does. With
// Options.NoExpressions it refuses update pipelines, expression operators
// and findAndModify's projection with FerretDB 1.24.2's answers (see
// Options.NoExpressions), for the forms of the server-time records that do
// without them.
//
// serverStatus reports the open cursors as mongod's metrics.cursor does,
// and the change-stream cursors alone under metrics.changeStreams.cursor;
// $currentOp (idleCursors) lists each cursor with its originatingCommand,
// so the open change streams are countable as on any mongod.
//
// Storage is in memory: each collection keeps raw BSON documents in a skip
// list ordered by _id, so _id lookups and _id range pages are O(log n + k).
// One lock serialises writes (reads share it), which makes every write
// command atomic; change-stream getMores wait without holding it.
//
// Test controls: AdvanceClock (the server clock behind $$NOW, wallTime and
// new cluster times; see Options.NoopInterval), DropConnections (a network
// blip), SetHistorySize and Options.HistorySize (bounded change history,
// the oplog window counted in changes: resuming from before it fails with
// 286 ChangeStreamHistoryLost, an open stream overtaken fails with 136
// CappedPositionLost), FailCommand (the failCommand and
// failGetMoreAfterCursorCheckout fail points, also reachable through
// configureFailPoint as on mongod with enableTestCommands).
//
// How well it stands in for mongod is measured by running the driver's own
// integration tests against it: see internal/suites.
//
// # What differs from MongoDB
//
// Known differences, kept honest:
//   - No storage engine, no journal, no persistence; no authentication,
//     TLS or compression (compression is not advertised, so the driver never
//     compresses). Authentication commands fail with AuthenticationFailed
//     (18): there are no users, so connect without credentials.
//   - serverStatus holds host, version, process, localTime, repl and the
//     cursor metrics only; metrics.changeStreams.cursor (open.total,
//     open.pinned, totalOpened) is reported whatever Options.Version says
//     (mongod added it after 8.0). It adds a section mongod does not
//     have, mongotest.oplog: by namespace ("db.coll"), the writes since
//     the start (ops) and their payload bytes (bytes: an inserted or
//     replacement document, an update's description, a deleted _id),
//     about what each write adds to mongod's oplog past its fixed
//     fields; the benchmark reads it.
//   - $currentOp lists only itself and the cursors (in use: "getmore"
//     ops; with idleCursors, "idleCursor" entries), not other running
//     commands, idle connections or sessions; its options other than
//     idleCursors are ignored.
//   - One node only; no elections. Write concerns: w 0, 1 and "majority"
//     are satisfied at once; w above 1 is a writeConcernError 100
//     UnsatisfiableWriteConcern and an unknown tag 79, the write applied, as
//     on a one-member set; wtimeout and j are ignored. Read concerns are
//     accepted and ignored: every read sees the latest data. Snapshot
//     reads (readConcern snapshot, atClusterTime) are served from the
//     current data, not as of atClusterTime, and replies carry no
//     atClusterTime. No transactions: startTransaction is refused with
//     IllegalOperation (20).
//   - Numbers compare by their exact values across int32, int64, double and
//     decimal128, as mongod's (compare_numbers.h), in matching, sorting,
//     the _id order and unique keys; NaN is below every number.
//   - Natural order is _id order (MongoDB's is roughly insertion order).
//     Only the _id index is used for queries; secondary indexes are
//     recorded and enforce unique / partial unique / sparse constraints but
//     queries on other fields scan. Multikey unique indexes treat an array
//     as one key value. TTL indexes are accepted but never expire anything.
//     No collation, no text or geo indexes, no $where, no arrayFilters.
//   - Cursors: a find with no sort or a sort on _id reads each batch from
//     the collection as it is when the batch is read, past the last _id
//     returned (no isolation between batches, as mongod); a find sorted on
//     another field, and every aggregate, listCollections and listIndexes
//     cursor, holds its whole result from the first batch (mongod does so
//     for blocking sorts only; a streaming aggregate there sees later
//     writes). A batch filled exactly leaves the cursor open, as mongod's.
//   - Query operators: $eq $ne $gt $gte $lt $lte $in $nin $exists $type
//     $not $regex $size $all $elemMatch $mod $and $or $nor $expr
//     $jsonSchema. Update operators: $set $unset $inc $mul $min $max $rename
//     $setOnInsert $push ($each $slice $position $sort) $addToSet $pull
//     $pullAll $pop $currentDate, and the positional $ (the array
//     position the filter matched, by mongod's rules, see positional.go;
//     not $[] or $[<id>]). Overlapping paths in one update are
//     refused with 40 ConflictingUpdateOperators, as on mongod. A replacement of a stored
//     document refuses any top-level $-prefixed field with 52, a DBRef-like
//     $ref/$id pair included (mongod accepts that pair). Unknown
//     top-level command fields are ignored (mongod's IDL refuses them with
//     40415).
//   - Document validation: create/collMod validator (any query, $jsonSchema
//     with the keywords mongod's JSON Schema parser takes),
//     validationLevel and validationAction are enforced on every write,
//     with bypassDocumentValidation; the 121 DocumentValidationFailure's
//     errInfo.details is a short account (the operator, or the first
//     $jsonSchema keyword not satisfied), not mongod's full explanation.
//   - Aggregation stages: $match $sort $limit $skip $project $addFields/$set
//     $unset $replaceRoot/$replaceWith $count $group ($sum $avg $min $max
//     $first $last $push $addToSet $count) $unwind $sortByCount; no $lookup,
//     $facet, $out, $merge. Expressions: see expr.go (the common arithmetic,
//     comparison, boolean, conditional, array, string and conversion
//     operators, $let $map $filter $switch $objectToArray $arrayToObject
//     $regexMatch $getField); anything else is 168 InvalidPipelineOperator.
//   - Change events are rendered from an in-memory history with seq
//     numbers; resume tokens are {_data: hex} strings of this server's own
//     format (ordered by cluster time like real ones, but not interchangeable
//     with a real server's; a token this server did not issue gives 280,
//     and so does one of an event the stream does not show, at the
//     stream's first own event, as mongod's resume check does). A stream's
//     own stages ($match, $project, $addFields/$set, $unset,
//     $replaceRoot/$replaceWith) see the whole event, fullDocument
//     included; one that changes or drops _id fails the stream with 280.
//   - updateDescription: for an update by operators, updatedFields holds
//     the paths the operators named, as mongod logs them ($set {a: {b: 1}}
//     is "a", $set {"a.b": 1} is "a.b", a path under a parent the update
//     created is the parent, $push appending is "arr.N", other array
//     operators the whole array, as for $set; truncatedArrays is empty);
//     for a pipeline update, its delta as mongod computes one (nested
//     changes as dotted paths, an array diffed element by element when that
//     is smaller than the array, a shortened one in truncatedArrays).
//     disambiguatedPaths (streams with
//     showExpandedEvents) covers numeric field names, not field names
//     holding dots.
//     A pipeline update becomes a replace event when its delta is not
//     smaller than the document, approximating mongod's rule.
//   - Post- and pre-images (fullDocument and fullDocumentBeforeChange
//     whenAvailable/required) exist for collections created or modified
//     with changeStreamPreAndPostImages; they are kept as long as the change
//     history, with no expireAfterSeconds. Large events follow mongod's
//     limits: an event over 16 MB + 16 KB (BSONObjMaxInternalSize) fails
//     the stream with 10334 BSONObjectTooLarge; with
//     $changeStreamSplitLargeEvent (7.0 and 6.0.9 on, see Options.Version)
//     an event over 16 MB + 8 KB comes in fragments packed by field size,
//     a field too large for one is 7182500, and a stream resumed from a
//     fragment's token goes on after it, or fails with 280 where the event
//     is no longer split alike; this server makes at most 16 fragments of
//     an event. A batch stops before a document that would take it over
//     16 MB; what did not fit (and the rest of a split event) comes in the
//     next getMore.
//   - A rename onto an existing collection (dropTarget) within a database
//     is one rename event, seen by the target's streams, as on mongod; a
//     cross-database rename is a drop of the target and a rename (mongod
//     copies through a temporary collection, with other events). With
//     showExpandedEvents, create, createIndexes, dropIndexes and modify
//     (every collMod) events are produced, with collectionUUID,
//     operationDescription and stateBeforeChange.collectionOptions, but not
//     the sharding events.
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
//   - It answers as MongoDB 7.0.0 unless Options.Version says another
//     (6.0.x to 8.0.x), which changes the version it reports and whether
//     $changeStreamSplitLargeEvent exists, nothing else.
//   - hello reports the version's maxWireVersion (21 for 7.0) and omits lastWrite,
//     topologyVersion and compression on purpose: without topologyVersion
//     the driver polls instead of streaming awaitable hellos.
//   - Fail points: failCommand and failGetMoreAfterCursorCheckout only.
//     Error labels follow mongod's ErrorLabelBuilder (error_labels.cpp) for
//     commands outside transactions: data.errorLabels replaces them; a
//     failCommand error on a getMore gets no ResumableChangeStreamError
//     (mongod labels before the cursor is known), one on the aggregate
//     opening a change stream does; NoWritesPerformed is never added.
//   - Names: database and collection names are checked as mongod's
//     NamespaceString does (no NUL, no $ in a collection, the database
//     characters / \ . space " and its 64-byte limit); write batches of 0
//     or more than 100000 statements are 16 InvalidLength.
package mongotest
