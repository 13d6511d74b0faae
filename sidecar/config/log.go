package config

import (
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/errs"
)

// NewLogger returns the root logger for cfg, writing to w (the process's
// stderr): JSON lines by default, human-readable text with
// MEILISTREAM_LOG_FORMAT=text, at MEILISTREAM_LOG_LEVEL. Build it once in
// main and pass it down; each job logs through logger.Named(job), each
// component through .Named("lease") and the like. Keys are snake_case and a
// value is never a credential: log a Config only as itself (its
// MarshalJSON and String mask secrets).
func NewLogger(cfg Config, w io.Writer) hclog.Logger {
	level := hclog.LevelFromString(cfg.LogLevel)
	if level == hclog.NoLevel {
		// Validate refuses such a level; a Config built by hand that
		// skipped it still must not log at every level.
		level = hclog.Info
	}
	return fieldLogger{hclog.New(&hclog.LoggerOptions{
		Name:            "meilistream",
		Level:           level,
		Output:          w,
		JSONFormat:      cfg.LogFormat != "text",
		IncludeLocation: false,
		Color:           hclog.ColorOff,
		TimeFormat:      "2006-01-02T15:04:05.000Z07:00",
	})}
}

// fieldLogger logs time.Duration values as Go duration strings ("81ms",
// "20s"), the syntax of the configuration, instead of hclog's integer
// nanoseconds in JSON, and errors with their code and job once in front
// (errs.Format: "FAILED books: send batch: ..."), since an error's own text
// leaves them out. Every logger derived from it (Named, With) does the
// same, so components' logs (engine, lease) follow.
type fieldLogger struct{ hclog.Logger }

func fields(args []any) []any {
	var out []any
	for i, a := range args {
		if i%2 == 0 {
			continue // a key
		}
		var v string
		switch a := a.(type) {
		case time.Duration:
			v = a.String()
		case error:
			v = errs.Format(a)
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

func (l fieldLogger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, fields(args)...)
}
func (l fieldLogger) Trace(msg string, args ...any) { l.Logger.Trace(msg, fields(args)...) }
func (l fieldLogger) Debug(msg string, args ...any) { l.Logger.Debug(msg, fields(args)...) }
func (l fieldLogger) Info(msg string, args ...any)  { l.Logger.Info(msg, fields(args)...) }
func (l fieldLogger) Warn(msg string, args ...any)  { l.Logger.Warn(msg, fields(args)...) }
func (l fieldLogger) Error(msg string, args ...any) { l.Logger.Error(msg, fields(args)...) }
func (l fieldLogger) With(args ...any) hclog.Logger {
	return fieldLogger{l.Logger.With(fields(args)...)}
}
func (l fieldLogger) Named(name string) hclog.Logger { return fieldLogger{l.Logger.Named(name)} }
func (l fieldLogger) ResetNamed(name string) hclog.Logger {
	return fieldLogger{l.Logger.ResetNamed(name)}
}
