package sidecar

import (
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
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
	return durationLogger{hclog.New(&hclog.LoggerOptions{
		Name:            "meilistream",
		Level:           level,
		Output:          w,
		JSONFormat:      cfg.LogFormat != "text",
		IncludeLocation: false,
		Color:           hclog.ColorOff,
		TimeFormat:      "2006-01-02T15:04:05.000Z07:00",
	})}
}

// durationLogger logs time.Duration values as Go duration strings ("81ms",
// "20s"), the syntax of the configuration, instead of hclog's integer
// nanoseconds in JSON (QA F11). Every logger derived from it (Named, With)
// does the same, so components' logs (engine, lease) follow.
type durationLogger struct{ hclog.Logger }

func durations(args []any) []any {
	var out []any
	for i, a := range args {
		if d, ok := a.(time.Duration); ok && i%2 == 1 {
			if out == nil {
				out = append([]any(nil), args...)
			}
			out[i] = d.String()
		}
	}
	if out == nil {
		return args
	}
	return out
}

func (l durationLogger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, durations(args)...)
}
func (l durationLogger) Trace(msg string, args ...any) { l.Logger.Trace(msg, durations(args)...) }
func (l durationLogger) Debug(msg string, args ...any) { l.Logger.Debug(msg, durations(args)...) }
func (l durationLogger) Info(msg string, args ...any)  { l.Logger.Info(msg, durations(args)...) }
func (l durationLogger) Warn(msg string, args ...any)  { l.Logger.Warn(msg, durations(args)...) }
func (l durationLogger) Error(msg string, args ...any) { l.Logger.Error(msg, durations(args)...) }
func (l durationLogger) With(args ...any) hclog.Logger {
	return durationLogger{l.Logger.With(durations(args)...)}
}
func (l durationLogger) Named(name string) hclog.Logger { return durationLogger{l.Logger.Named(name)} }
func (l durationLogger) ResetNamed(name string) hclog.Logger {
	return durationLogger{l.Logger.ResetNamed(name)}
}
