// Package meili is the Meilisearch sink of search jobs: the engine
// (sidecar/engine) writes a job's documents into its index through Sink,
// which also builds the staged index of a swap reindex and swaps it in.
// NewClient is the Meilisearch client the sidecar uses; the sink makes its
// requests on it itself, so that every request has a deadline and every
// answer is classified.
//
// It is a sibling of the replica sink (replicate): both implement
// sidecar/sink's Sink, and read a job's definition (jobdef) for its index,
// primary key, settings and a document's index id.
//
// # Deadlines
//
// Connecting and a TLS handshake take at most 10 s each; a whole request,
// from connecting to the last byte of the answer, at most
// Options.RequestTimeout (30 s), a document upload that plus its size at
// Options.UploadRate (1 MiB/s), a task poll Options.PollTimeout (10 s). A
// request over its deadline is FAILED: the engine backs off, and /status
// shows the error. Polls of a task that keep failing are repeated for
// Options.PollPatience (1 minute), then Wait returns the failure (FAILED;
// the engine sends the batch again). A task that is merely slow (a long
// queue) is waited for without limit: Meilisearch is answering.
//
// # How each answer is taken
//
// FAILED is retried by the engine with backoff; CONFIG_INVALID stops the
// job until its definition or the variables change (Setting names the
// variable at fault); "refused" is a per-document refusal (sink.DocFailure)
// naming the writes of the request or task, which the engine bisects down to
// the document and records. Codes and statuses are Meilisearch's
// (crates/meilisearch-types/src/error.rs, make_error_codes!; the route
// handlers in crates/meilisearch/src/routes).
//
// Any route, by status (judge):
//
//	no answer: refused, reset, cut, TLS, over the deadline  FAILED
//	401 missing_authorization_header, 403 invalid_api_key,
//	  or a 401/403 of a proxy (no Meilisearch error object)  CONFIG_INVALID, MEILISTREAM_MEILI_API_KEY
//	3xx (redirects are not followed: a POST would become a GET),
//	  405, 501, 505, a 4xx but 408, 413, 425 and 429 without
//	  Meilisearch's error object (it sends one with every
//	  refusal: this is another server's, e.g. an HTTPS port
//	  spoken to in plain HTTP)                                CONFIG_INVALID, MEILISTREAM_MEILI_URL
//	408, 425, 429 (its Retry-After, capped at 5 min, holds
//	  every request of the client), 5xx (internal,
//	  database_size_limit_reached, index_creation_failed,
//	  a proxy's 502/503/504)                                  FAILED
//	422 io_error, no_space_left_on_device,
//	  too_many_open_files (type system: an operator fixes
//	  them while the job waits)                               FAILED
//	any other 4xx (bad_request: Meilisearch older than the
//	  1.18 the sink needs; invalid_index_uid: the job's index
//	  name; invalid_swap_*, invalid_content_type, a 413 where
//	  no split is possible ...)                               CONFIG_INVALID
//	a 1xx/2xx other than the expected one, or a body that
//	  is not the expected JSON (a proxy's page)               FAILED
//
// Per route, first:
//
//	GET /indexes/{uid}            404 index_not_found: create it (Prepare), no staged
//	                              index to resume (Stage), rename instead of swap (Commit)
//	POST /indexes                 task index_already_exists: done
//	DELETE /indexes/{uid}         404 or task index_not_found: done
//	GET|PATCH .../settings        GET 404 index_not_found: nothing to copy; PATCH 400
//	                              (invalid_settings_*, bad_request for an unknown key,
//	                              feature_not_enabled): CONFIG_INVALID with Meilisearch's
//	                              message; task failed invalid_request: CONFIG_INVALID,
//	                              internal/system or canceled: FAILED
//	POST .../documents            413 (payload_too_large, or a proxy's page): split in
//	                              halves, sent in order; a document alone: refused
//	                              payload_too_large. 400 malformed_payload: refused (all
//	                              the request's documents). 400 bad_request: FAILED (a body
//	                              cut short, actix's IncompleteError)
//	POST .../delete-batch         413: split; task index_not_found: nothing to delete
//	POST .../documents/fetch      404 index_not_found: no ids (Keys)
//	GET /tasks/{uid}              404 task_not_found (deleted): FAILED, the batch is sent again;
//	                              no answer, 5xx, 408, 422, 429: polled again for PollPatience
//	POST /swap-indexes            task index_not_found / index_already_exists (an index
//	                              came or went meanwhile): FAILED, the next attempt looks again
//
// A document addition or delete-batch task that failed:
//
//	index_primary_key_already_exists, _no_candidate_found,
//	  _multiple_candidates_found                             CONFIG_INVALID (primaryKey)
//	invalid_document_*, missing_document_id, invalid_vector_*,
//	  too_many_vectors, max_fields_limit_exceeded,
//	  vector_embedding_error, payload_too_large,
//	  malformed_payload, and any other code of type
//	  invalid_request (a newer Meilisearch's)                refused (the task's writes)
//	a delete's index_not_found                               durable (nothing to delete)
//	canceled (by another client), internal, system, auth     FAILED (auth: CONFIG_INVALID)
//
// vector_embedding_error is taken as the documents' fault: a remote
// embedder that is down fails every document, which are then recorded and
// can be retried (meilistream retry), where taking it as transient would
// retry a document the embedder can never take for ever.
//
// # Sizes and depth, before sending
//
// A batch is cut into requests of at most Options.MaxPayloadBytes (64 MiB,
// under Meilisearch's default --http-payload-size-limit of 100 MB), or of
// the size a 413 taught the job: half of the largest body refused, for the
// job's life (a proxy's limit, nginx's client_max_body_size of 1 MB by
// default, is learnt in a few halvings). A document larger alone than
// MaxPayloadBytes is refused payload_too_large unsent; one nested deeper
// than MaxDocumentDepth (128 levels, the document counted) is refused
// document_too_deep unsent: Meilisearch reads an array of documents without
// a depth limit, but its indexing parses each searchable or faceted field
// under serde_json's recursion limit and fails the whole batch, naming no
// document, with an internal error (see MaxDocumentDepth). The sink sends
// arrays only, so the 128-level limit of a payload that is one object
// (serde_json::from_slice into a map, document_formats.rs read_json) does
// not apply.
//
// # What is enqueued
//
// Meilisearch takes a request at once and indexes it later: what a job
// has enqueued in an index and not yet seen processed is bounded, at
// Options.MaxEnqueuedTasks tasks (8) and Options.MaxEnqueuedBytes bytes of
// requests (128 MiB, two of the largest). A request that would go over
// waits for the job's oldest task of that index to be processed; one goes
// whenever nothing is enqueued. The sink counts its own tasks (queue.go)
// and shows the count (Sink.Enqueued: /status and metrics).
//
// # What errors show
//
// An error of the client is an *Error: method, path, status, and
// Meilisearch's code and message (cut to 1 KiB, the API key and the URL's
// credentials replaced if they appear in it). Never the URL (whose userinfo
// and query string, credentials for a proxy, are added to each request by
// the transport, out of every URL an error could print), a header, a body
// sent, or the body of an answer that is not Meilisearch's error object
// (only its content type and size).
package meili
