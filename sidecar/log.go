package sidecar

import (
	"io"

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
	return hclog.New(&hclog.LoggerOptions{
		Name:            "meilistream",
		Level:           level,
		Output:          w,
		JSONFormat:      cfg.LogFormat != "text",
		IncludeLocation: false,
		Color:           hclog.ColorOff,
		TimeFormat:      "2006-01-02T15:04:05.000Z07:00",
	})
}
