package meili

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/meilistream/meilistream/internal/clip"
)

// maxMessage bounds the part of Meilisearch's message an Error keeps.
const maxMessage = 1024

// Error is a request of the sink to Meilisearch that did not get the answer
// it wanted: no answer at all (Status 0: refused, cut, or over its
// deadline), or an answer with another status. Its text names the method
// and the path, never the URL (which may carry credentials), a header or
// a body: it goes to logs, /status and /readyz. Meilisearch's own message
// is kept (it names what was wrong: a field, a document id), cut to 1 KiB;
// the body of an answer that is not Meilisearch's (a proxy's page) is not.
type Error struct {
	Method string
	Path   string // without the query string
	// Status is the answer's HTTP status; 0 when there was none.
	Status int
	// Code, Type and Message are Meilisearch's error object
	// (crates/meilisearch-types/src/error.rs, ResponseError); Code is ""
	// when the answer was not one (a proxy's page, an empty body).
	Code, Type, Message string
	// ContentType and BodyLen describe an answer that was not
	// Meilisearch's error object.
	ContentType string
	BodyLen     int
	// Timeout is the deadline the request ran out of, when that is why it
	// failed.
	Timeout time.Duration
	// Err is the transport's error (without the URL), or what else went
	// wrong.
	Err error

	retryAfter time.Duration
	badURL     bool
}

func (e *Error) Error() string {
	head := e.Method + " " + e.Path + ": "
	switch {
	case e.badURL:
		return head + "the Meilisearch URL is not an absolute http:// or https:// URL"
	case e.Timeout > 0:
		return fmt.Sprintf("%sno answer from Meilisearch within %s (the request's deadline)", head, e.Timeout)
	case e.Status == 0 && e.Err != nil:
		return head + "no answer from Meilisearch: " + e.Err.Error()
	case e.Status == 0:
		return head + "no answer from Meilisearch"
	case e.Code != "":
		return fmt.Sprintf("%s%d %s: %s", head, e.Status, e.Code, e.Message)
	}
	msg := fmt.Sprintf("%s%d %s", head, e.Status, http.StatusText(e.Status))
	if e.Err != nil {
		return msg + ": " + e.Err.Error()
	}
	kind := "an empty answer"
	if e.BodyLen > 0 {
		ct := e.ContentType
		if ct == "" {
			ct = "untyped"
		}
		kind = fmt.Sprintf("a %s answer of %d bytes", ct, e.BodyLen)
	}
	return msg + ", not Meilisearch's error (" + kind + "): from a proxy in front of it?"
}

func (e *Error) Unwrap() error { return e.Err }

// RetryAfter is how long the answer asked to wait before trying again
// (its Retry-After header, capped at 5 minutes); 0 when it did not. The
// client already holds its requests that long after a 429.
func (e *Error) RetryAfter() time.Duration { return e.retryAfter }

// verdict is what a failed request means for the job.
type verdict int

const (
	// retry: the same request may succeed later (no answer, 5xx, 408,
	// 429, Meilisearch's system errors); the engine backs off.
	retry verdict = iota
	// wrongKey: the API key (or a proxy's credentials) was refused.
	wrongKey
	// wrongURL: the answer is not Meilisearch's API (a redirect, a 4xx
	// other than 401, 403, 408, 413, 425 and 429 without Meilisearch's
	// error object, 405, 501, 505).
	wrongURL
	// refused: Meilisearch refused the request for what it is; sending it
	// again cannot change that.
	refused
)

// judge classifies a failed request by its answer alone; routes with
// answers of their own meaning (a missing index, a payload too large, a
// document refused) look at those first.
func judge(e *Error) verdict {
	s := e.Status
	switch {
	case e.badURL:
		return wrongURL
	case s == 0:
		return retry
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return wrongKey
	case s >= 300 && s < 400,
		s == http.StatusNotFound && e.Code == "",
		s == http.StatusMethodNotAllowed,
		s == http.StatusNotImplemented,
		s == http.StatusHTTPVersionNotSupported:
		return wrongURL
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests:
		return retry
	case s == http.StatusUnprocessableEntity:
		// io_error, no_space_left_on_device, too_many_open_files: the
		// server's system errors (type "system"); an operator fixes them
		// while the job waits.
		return retry
	case s >= 500:
		return retry
	case s >= 400 && e.Code == "" && s != http.StatusRequestEntityTooLarge:
		// Meilisearch answers every refusal with its error object: this
		// one is another server's (an HTTPS port spoken to in plain HTTP,
		// a proxy's own rule).
		return wrongURL
	case s >= 400:
		return refused
	}
	// Another 1xx or 2xx than the one wanted: not Meilisearch's answer to
	// this request (a proxy's page); it may pass.
	return retry
}

// cut returns s cut to at most n bytes, never inside a UTF-8 character;
// the cut part is made valid UTF-8 (an answer may hold any bytes).
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(clip.Prefix(s, n), "") + "…"
}
