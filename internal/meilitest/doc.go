// Package meilitest is a Meilisearch-compatible HTTP test server: the real
// github.com/meilisearch/meilisearch-go client (and meilistream's Meilisearch
// sink) talk to it as to Meilisearch v1 (behaviour of v1.50, the server
// source the project's reference notes were read from). Everything is in
// memory.
//
//	srv, err := meilitest.Start(meilitest.Options{MasterKey: "key"})
//	defer srv.Close()
//	client := meilisearch.New(srv.URL(), meilisearch.WithAPIKey("key"), meilisearch.DisableRetries())
//
// # What is faithful
//
//   - Routes, request and response shapes, status codes: /health, /version,
//     /stats, indexes (create, get, list, update primary key or uid, delete,
//     stats), documents (POST add-or-replace, PUT add-or-update with
//     ?primaryKey= and ?skipCreation=, JSON array or object, NDJSON, CSV;
//     GET and POST /fetch with offset, limit, fields, ids, filter and sort
//     (on sortable attributes); get one;
//     delete one, delete-batch, delete by filter, delete all), settings (get,
//     patch, reset: all 20 default keys returned, plus chat and foreignKeys
//     while their experimental features are on; and every setting's own
//     route /indexes/{uid}/settings/<setting> with GET, its update verb,
//     PUT or PATCH, and DELETE; localizedAttributes' locales checked),
//     index compaction (POST /indexes/{uid}/compact), search, swap-indexes,
//     tasks (GET /tasks
//     with uids, batchUids, canceledBy, statuses, types, indexUids, limit,
//     from, reverse and the date filters; GET /tasks/{taskUid}; POST
//     /tasks/cancel and DELETE /tasks), batches (GET /batches with the same
//     filters, GET /batches/{batchUid}), experimental features (GET and
//     PATCH /experimental-features).
//   - Writes are asynchronous: 202 with a summarized task; one worker
//     processes tasks in uid order (so in enqueue order per index), through
//     enqueued, processing, succeeded or failed, with Meilisearch's task
//     fields (uid batchUid indexUid status type canceledBy details error
//     duration enqueuedAt startedAt finishedAt, customMetadata when sent).
//     Consecutive document writes to one index share a batchUid like the
//     autobatcher's, but each is still applied, and fails, on its own, so
//     batching never changes what is observed, except for an internal error
//     (FailNextTask with an internal code), which fails every task of its
//     batch, as Meilisearch's scheduler does.
//   - Document additions check everything before writing anything: one
//     invalid or missing id, a failed primary-key inference or a primaryKey
//     differing from the index's fails the whole task (indexedDocuments 0)
//     with Meilisearch's code, type, link and message. Ids follow milli's
//     rules (integers, or 1-511 bytes of [A-Za-z0-9_-]); "1" and 1 are one
//     document. Primary-key inference looks at the first document's keys
//     ending in "id", case-insensitively. A missing index is created by the
//     first document or settings write (not by a failed one).
//   - With _geo sortable or filterable, a bad _geo fails the task with
//     invalid_document_geo_field and milli's GeoError messages (prefixed
//     "Index `uid`: "); as an indexing error it fails every task of its
//     batch.
//   - Payloads: Content-Type checks (415), empty (400 missing_payload),
//     malformed (400 malformed_payload), over MaxPayloadBytes after
//     gzip/deflate decompression (413 payload_too_large; devstack's
//     -max-payload sets it). A payload that is one object nests at most 127
//     levels (serde_json's recursion limit, as Meilisearch parses it as a
//     map); array and NDJSON payloads, which Meilisearch reads as raw values
//     without a depth limit, are refused here only past 10000 levels. But
//     indexing parses every searchable or faceted top-level field under the
//     same limit: a field whose value nests 128 containers (the value
//     counted) fails its batch with milli's internal error "recursion limit
//     exceeded" (attribute patterns matched exactly, as "*", or as a prefix
//     ending in "*").
//   - Task cancelation and deletion run before other queued tasks, as the
//     scheduler takes them first; a cancelation selecting the batch being
//     processed interrupts it (its tasks end canceled, canceledBy set).
//   - Errors: {message, code, type, link} with the status of Meilisearch's
//     error table; unknown JSON fields and query parameters are bad_request.
//   - Auth: with a master key every route but /health needs
//     "Authorization: Bearer <key>": no header or another scheme is 401
//     missing_authorization_header, a wrong key 403 invalid_api_key.
//   - Swaps are atomic (all pairs of a request or none), move documents,
//     settings and primary key, rewrite the indexUid of earlier tasks, and
//     support rename:true.
//
// # What differs from Meilisearch (knowingly)
//
//   - Search is not Meilisearch's relevancy: query words match whole words
//     of the searchable attributes, the last word also as a prefix, case-
//     insensitively; no typo tolerance, stop words, synonyms, proximity,
//     attribute ranking, exactness or ranking scores. Documents matching
//     more leading query words come first (matchingStrategy "last"; "all"
//     requires every word), then the sort parameter, then index order.
//     No facets, highlighting, cropping, _formatted, geo, vectors, hybrid
//     or federated (multi) search: those request fields are accepted and
//     ignored.
//   - Filters support =, !=, >, >=, <, <=, TO, IN, NOT IN, EXISTS, IS NULL,
//     IS EMPTY (and their NOT forms), AND, OR, NOT, parentheses and the array
//     form; not CONTAINS, STARTS WITH or _geo. String equality ignores case
//     but does no other normalization. Syntax error messages are close to,
//     not identical with, Meilisearch's.
//   - Fetch order is Meilisearch's internal docid order, not id order: a
//     replaced document keeps its docid, a new one takes the smallest one
//     a deleted document freed in an earlier batch (milli's AvailableIds),
//     else the next; so a document added while paging with offset may
//     appear on a page already read, and a delete shifts the pages after
//     it. fields selects top-level attributes only. displayedAttributes
//     applies to search hits only, not to document fetches.
//   - Settings are stored and returned but, except filterable, sortable,
//     searchable and displayed attributes and pagination.maxTotalHits, have
//     no effect. Values are only checked to be arrays for the attribute
//     lists; nested settings (typoTolerance, faceting, pagination) are merged
//     one level deep; set-typed settings (sortableAttributes, stopWords,
//     the token lists, dictionary) are kept sorted and deduplicated, as
//     Meilisearch's BTreeSets. chat and foreignKeys are refused with
//     feature_not_enabled unless their experimental feature is on. Of the
//     experimental features only chatCompletions and foreignKeys change
//     anything (the others are stored and reported: no /metrics, /logs,
//     CONTAINS filter, network or document edition). Embedders are shown
//     with their API keys redacted and a rest embedder's defaults filled in,
//     as Meilisearch does, but other sources' defaults (models, dimensions)
//     are not added, and nothing is embedded: no vectors, no
//     retrieveVectors.
//   - Nested primary keys ("a.b") are not supported; the primary key is a
//     top-level field.
//   - Tasks are never auto-deleted (Meilisearch drops the oldest finished
//     ones past a million). A batch's details add up its tasks' counts and
//     its progress, while processing, is one step; no progressTrace or
//     database sizes. There is no /keys, /dumps, /snapshots, /multi-search,
//     /facet-search, /network, /export, /chats, /webhooks,
//     /dynamic-search-rules or /tasks/{uid}/documents; those answer 404
//     with an empty body, as unknown routes do. Only the master key exists:
//     no API keys or tenant tokens.
//   - Compression: gzip, deflate and br request bodies are decoded and
//     responses compressed when Accept-Encoding asks for them (br preferred,
//     as actix's Compress does), so meilisearch-go's WithContentEncoding
//     works with every encoding it has.
//   - /stats sizes are the bytes of raw JSON held, not LMDB sizes (a
//     Meilisearch index of a few small documents reports one 4096-byte
//     page); sizeFormat and showInternalDatabaseSizes are ignored.
//   - Tasks finish within microseconds of being enqueued (unless
//     Options.TaskDelay), so a client polling with a deadline of a few
//     milliseconds finds them done where Meilisearch would still be
//     processing them.
//   - GET /version reports pkgVersion "1.50.0" and "unknown" commit fields.
//
// # Test controls
//
// FailNext and FailNextOn make requests fail (503 or a dropped connection);
// PauseTasks and ResumeTasks hold tasks enqueued; FailNextTask fails the next
// processed task with a chosen error; Requests counts requests by route key;
// Documents reads an index directly; WaitIdle waits for the queue to drain.
// Options.TaskDelay slows every batch down; Options.ProxyBodyLimit plays a
// reverse proxy in front of the server that refuses large bodies with an
// HTML 413, as nginx's client_max_body_size does.
package meilitest
