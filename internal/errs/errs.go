// Package errs holds meilistream's one error type. Every package returns
// *Error (directly or wrapped) for conditions an operator or a caller must
// tell apart; the Code is stable and documented in the README, the Job names
// which job it concerns, and the cause is kept for errors.Is/As.
//
// It lives in its own tiny package because transform, lease, replicate and
// sidecar all need it and none of them may import another just for it.
package errs

import (
	"errors"
	"fmt"
)

// Code is a stable, documented error class.
type Code string

// The codes of DESIGN.md "Error codes".
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

// Error renders "CODE job: message: cause".
func (e *Error) Error() string {
	s := string(e.Code)
	if e.Job != "" {
		s += " " + e.Job
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
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

// CodeOf returns the Code of the outermost *Error in err's chain, Failed for
// any other non-nil error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Failed
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
