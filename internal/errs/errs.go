// Package errs holds meilistream's one error type. Every package returns
// *Error (directly or wrapped) for conditions an operator or a caller must
// tell apart; the Code is stable and documented in the README, the Job names
// which job it concerns, and the cause is kept for errors.Is/As.
//
// The code and the job are data, never text: Error renders only what was
// being done and the cause, at every layer, and Format puts the code and the
// job in front once, for whatever shows an error to a person (the command
// line, the log, /status). One rule, CodeOf, says which code an error chain
// has, and every decision taken on an error (retry, restart or park a job,
// the exit code, the metrics, /status) uses it.
//
// It lives in its own tiny package because transform, lease, replicate and
// the sidecar packages all need it and none of them may import another just
// for it.
package errs

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a stable, documented error class.
type Code string

// The error codes (docs/operations.md, "Error codes").
const (
	Running         Code = "RUNNING"          // the job's lease is held by another process
	LeaseLost       Code = "LEASE_LOST"       // the lease was taken over or could not be renewed
	HistoryLost     Code = "HISTORY_LOST"     // the recorded position is older than the server's history
	IDMismatch      Code = "ID_MISMATCH"      // a transform set a primary key other than the one derived from _id
	NotADocument    Code = "NOT_A_DOCUMENT"   // a transform returned something that is not a document or null
	TransformFailed Code = "TRANSFORM_FAILED" // a transform threw, timed out or could not be loaded
	ConfigInvalid   Code = "CONFIG_INVALID"   // bad configuration: a variable, a transform file's options
	Failed          Code = "FAILED"           // anything else; the message says what was being done
)

// Error is the project's error: what went wrong (Code), to which job (Job,
// empty when it concerns none), a human message, and the cause.
type Error struct {
	Code Code
	Job  string
	Msg  string // what was being done and what to do; never a secret
	Err  error  // the cause, may be nil
	// Setting names the process-wide variable whose value is at fault
	// (MEILISTREAM_MEILI_API_KEY refused, MEILISTREAM_REPLICA_URI unset)
	// when the Msg does not already say how to fix it: the variables are
	// read once at start, so the supervisor adds that a restart is needed.
	Setting string
}

// New returns an *Error with a formatted message and no cause.
func New(code Code, job, format string, args ...any) *Error {
	return &Error{Code: code, Job: job, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with a message around cause. A nil cause gives nil,
// so `return errs.Wrap(...)` after a call is safe.
func Wrap(code Code, job string, cause error, format string, args ...any) error {
	if cause == nil {
		return nil
	}
	return &Error{Code: code, Job: job, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// Error renders "message: cause", without the code and the job: they are
// printed once, in front of the whole chain, by Format. An *Error with
// neither message nor cause (a sentinel) renders its code.
func (e *Error) Error() string {
	switch {
	case e.Msg != "" && e.Err != nil:
		return e.Msg + ": " + e.Err.Error()
	case e.Msg != "":
		return e.Msg
	case e.Err != nil:
		return e.Err.Error()
	}
	return string(e.Code)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Code (and, when the
// target names one, the same Job), so errors.Is(err, errs.ErrLeaseLost) works
// whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Job == "" || t.Job == e.Job) && t.Msg == "" && t.Err == nil
}

// Sentinels to compare with errors.Is; they match any *Error of their code.
var (
	ErrRunning         = &Error{Code: Running}
	ErrLeaseLost       = &Error{Code: LeaseLost}
	ErrHistoryLost     = &Error{Code: HistoryLost}
	ErrIDMismatch      = &Error{Code: IDMismatch}
	ErrNotADocument    = &Error{Code: NotADocument}
	ErrTransformFailed = &Error{Code: TransformFailed}
	ErrConfigInvalid   = &Error{Code: ConfigInvalid}
	ErrFailed          = &Error{Code: Failed}
)

// SettingOf returns the first Setting named walking err's chain from the
// outside in, "" when none is.
func SettingOf(err error) string {
	setting := ""
	walk(err, func(e *Error) bool {
		setting = e.Setting
		return setting != ""
	})
	return setting
}

// CodeOf is the classification rule: the code of an error is the first code
// other than FAILED met walking its chain from the outside in (in the order
// errors.As walks it), FAILED when there is none (a plain error included),
// and "" for nil. FAILED only says "something went wrong while doing this",
// so a FAILED layer around a precise code keeps that code: a CONFIG_INVALID
// reported while preparing a destination is still CONFIG_INVALID.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	code := Failed
	walk(err, func(e *Error) bool {
		if e.Code != Failed && e.Code != "" {
			code = e.Code
			return true
		}
		return false
	})
	return code
}

// JobOf returns the first job named walking err's chain from the outside
// in, "" when none is.
func JobOf(err error) string {
	job := ""
	walk(err, func(e *Error) bool {
		job = e.Job
		return job != ""
	})
	return job
}

// Format renders err for a person, with its code (CodeOf) and job (JobOf)
// once in front: "CODE job: message: cause", or "CODE: message: cause" when
// it concerns no job. The errors of an errors.Join are rendered one per
// line, each with its own code and job. nil renders "".
func Format(err error) string {
	if err == nil {
		return ""
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var lines []string
		for _, e := range j.Unwrap() {
			if e != nil {
				lines = append(lines, Format(e))
			}
		}
		return strings.Join(lines, "\n")
	}
	head := string(CodeOf(err))
	if job := JobOf(err); job != "" {
		head += " " + job
	}
	if e, ok := err.(*Error); ok && e.Msg == "" && e.Err == nil {
		return head // a sentinel, or an error saying nothing more than its code
	}
	return head + ": " + err.Error()
}

// walk calls fn with each *Error of err's chain, depth first from the
// outside in (the order of errors.As), until fn returns true.
func walk(err error, fn func(*Error) bool) bool {
	for err != nil {
		if e, ok := err.(*Error); ok && e != nil && fn(e) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if walk(inner, fn) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// WithJob returns err with Job set on its outermost *Error when it has none,
// or err wrapped as FAILED for job when it carries no *Error at all.
func WithJob(job string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Job == "" {
			c := *e
			c.Job = job
			if e == err {
				return &c
			}
			return &Error{Code: c.Code, Job: job, Err: err}
		}
		return err
	}
	return &Error{Code: Failed, Job: job, Err: err}
}
