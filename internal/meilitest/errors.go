package meilitest

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
)

// apiError is Meilisearch's error object (crates/meilisearch-types/src/error.rs,
// ResponseError): message, code, type and link; the HTTP status comes from the
// code through the make_error_codes! table of the same file.
type apiError struct {
	status  int
	Message string `json:"message"`
	Code    string `json:"code"`
	Type    string `json:"type"`
	Link    string `json:"link"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

type codeInfo struct {
	status int
	typ    string
}

// codes maps the error codes this server produces (and a few a test may pass
// to FailNextTask) to their HTTP status and type, as in make_error_codes!.
var codes = map[string]codeInfo{
	"missing_authorization_header":                {401, "auth"},
	"invalid_api_key":                             {403, "auth"},
	"missing_master_key":                          {401, "auth"},
	"index_not_found":                             {404, "invalid_request"},
	"index_already_exists":                        {409, "invalid_request"},
	"invalid_index_uid":                           {400, "invalid_request"},
	"invalid_index_primary_key":                   {400, "invalid_request"},
	"invalid_index_offset":                        {400, "invalid_request"},
	"invalid_index_limit":                         {400, "invalid_request"},
	"document_not_found":                          {404, "invalid_request"},
	"task_not_found":                              {404, "invalid_request"},
	"invalid_task_uids":                           {400, "invalid_request"},
	"invalid_task_statuses":                       {400, "invalid_request"},
	"invalid_task_types":                          {400, "invalid_request"},
	"invalid_task_index_uids":                     {400, "invalid_request"},
	"invalid_task_limit":                          {400, "invalid_request"},
	"invalid_task_from":                           {400, "invalid_request"},
	"invalid_task_reverse":                        {400, "invalid_request"},
	"invalid_document_id":                         {400, "invalid_request"},
	"missing_document_id":                         {400, "invalid_request"},
	"index_primary_key_no_candidate_found":        {400, "invalid_request"},
	"index_primary_key_multiple_candidates_found": {400, "invalid_request"},
	"index_primary_key_already_exists":            {400, "invalid_request"},
	"payload_too_large":                           {413, "invalid_request"},
	"feature_not_enabled":                         {400, "invalid_request"},
	"missing_payload":                             {400, "invalid_request"},
	"malformed_payload":                           {400, "invalid_request"},
	"missing_content_type":                        {415, "invalid_request"},
	"invalid_content_type":                        {415, "invalid_request"},
	"invalid_document_filter":                     {400, "invalid_request"},
	"missing_document_filter":                     {400, "invalid_request"},
	"invalid_document_offset":                     {400, "invalid_request"},
	"invalid_document_limit":                      {400, "invalid_request"},
	"invalid_document_fields":                     {400, "invalid_request"},
	"invalid_document_ids":                        {400, "invalid_request"},
	"invalid_document_sort":                       {400, "invalid_request"},
	"invalid_document_csv_delimiter":              {400, "invalid_request"},
	"invalid_swap_indexes":                        {400, "invalid_request"},
	"invalid_swap_duplicate_index_found":          {400, "invalid_request"},
	"invalid_swap_rename":                         {400, "invalid_request"},
	"missing_swap_indexes":                        {400, "invalid_request"},
	"missing_index_uid":                           {400, "invalid_request"},
	"invalid_search_q":                            {400, "invalid_request"},
	"invalid_search_offset":                       {400, "invalid_request"},
	"invalid_search_limit":                        {400, "invalid_request"},
	"invalid_search_page":                         {400, "invalid_request"},
	"invalid_search_hits_per_page":                {400, "invalid_request"},
	"invalid_search_filter":                       {400, "invalid_request"},
	"invalid_search_sort":                         {400, "invalid_request"},
	"invalid_search_attributes_to_retrieve":       {400, "invalid_request"},
	"invalid_search_matching_strategy":            {400, "invalid_request"},
	"invalid_settings_displayed_attributes":       {400, "invalid_request"},
	"invalid_settings_searchable_attributes":      {400, "invalid_request"},
	"invalid_settings_filterable_attributes":      {400, "invalid_request"},
	"invalid_settings_sortable_attributes":        {400, "invalid_request"},
	"invalid_settings_ranking_rules":              {400, "invalid_request"},
	"bad_request":                                 {400, "invalid_request"},
	"internal":                                    {500, "internal"},
	"no_space_left_on_device":                     {422, "system"},
	"io_error":                                    {422, "system"},
	"too_many_open_files":                         {422, "system"},
	"database_size_limit_reached":                 {500, "internal"},
	"too_many_search_requests":                    {503, "system"},
}

// errf builds the error object for code. Unknown codes get 400 and type
// invalid_request, the most common pair.
func errf(code, format string, args ...any) *apiError {
	ci, ok := codes[code]
	if !ok {
		ci = codeInfo{400, "invalid_request"}
	}
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &apiError{status: ci.status, Message: msg, Code: code, Type: ci.typ,
		Link: "https://docs.meilisearch.com/errors#" + code}
}

func errIndexNotFound(uid string) *apiError {
	return errf("index_not_found", "Index `%s` not found.", uid)
}

func errBadRequest(format string, args ...any) *apiError {
	return errf("bad_request", format, args...)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errf("internal", "meilitest: encode response: %v", err))
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if ew, ok := w.(*encodingWriter); ok && ew.enc != "" && len(b) > 0 {
		// Meilisearch compresses responses for clients that accept it
		// (actix's Compress middleware, wrapped in create_app,
		// crates/meilisearch/src/lib.rs); meilisearch-go's
		// WithContentEncoding even requires it, decoding every answer.
		var buf bytes.Buffer
		if err := compress(&buf, ew.enc, b); err == nil {
			h.Set("Content-Encoding", ew.enc)
			h.Add("Vary", "Accept-Encoding")
			b = buf.Bytes()
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// encodingWriter carries the response encoding chosen from Accept-Encoding.
type encodingWriter struct {
	http.ResponseWriter
	enc string // "", "br", "gzip" or "deflate"
}

// acceptedEncoding picks br, gzip or deflate from an Accept-Encoding
// header, in that order of preference among those not refused with q=0
// (actix-web's Compress middleware prefers brotli, then gzip, then
// deflate).
func acceptedEncoding(h string) string {
	ok := map[string]bool{}
	for _, part := range strings.Split(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if _, q, found := strings.Cut(strings.ReplaceAll(params, " ", ""), "q="); found {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				continue
			}
		}
		ok[strings.ToLower(strings.TrimSpace(name))] = true
	}
	for _, enc := range []string{"br", "gzip", "deflate"} {
		if ok[enc] {
			return enc
		}
	}
	return ""
}

var (
	gzipPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed); return w }}
	zlibPool = sync.Pool{New: func() any { w, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed); return w }}
	brPool   = sync.Pool{New: func() any { return brotli.NewWriterLevel(io.Discard, brotli.BestSpeed) }}
)

func compress(dst io.Writer, enc string, b []byte) error {
	type resetWriter interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	pool := &gzipPool
	switch enc {
	case "deflate":
		pool = &zlibPool
	case "br":
		pool = &brPool
	}
	zw := pool.Get().(resetWriter)
	defer pool.Put(zw)
	zw.Reset(dst)
	if _, err := zw.Write(b); err != nil {
		return err
	}
	return zw.Close()
}

func writeErr(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusServiceUnavailable {
		// Meilisearch sends Retry-After with every 503 (error.rs, ResponseError).
		w.Header().Set("Retry-After", "10")
	}
	writeJSON(w, e.status, e)
}
