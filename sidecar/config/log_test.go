package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/config"
)

func TestLoggerFormatsAndLevels(t *testing.T) {
	load := func(env ...string) config.Config {
		t.Helper()
		c, err := config.Load(append([]string{"MEILISTREAM_MONGODB_URI=" + testURI, "MEILISTREAM_MEILI_API_KEY=" + testAPIKey}, env...))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("JSON by default, one named logger per job, config masked", func(t *testing.T) {
		var buf bytes.Buffer
		cfg := load()
		log := config.NewLogger(cfg, &buf)
		log.Named("articles").Info("started", "config", cfg, "batch_size", 500)
		log.Debug("not shown at info")
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("not one JSON line: %v\n%s", err, buf.String())
		}
		if line["@module"] != "meilistream.articles" || line["@message"] != "started" || line["@level"] != "info" {
			t.Errorf("line: %s", buf.String())
		}
		if strings.Contains(buf.String(), testAPIKey) || strings.Contains(buf.String(), "s3cr3t-pw") {
			t.Errorf("a secret is in the log: %s", buf.String())
		}
		if strings.Contains(buf.String(), "not shown") {
			t.Errorf("debug line at info level: %s", buf.String())
		}
	})

	t.Run("text for people, at the configured level, config masked", func(t *testing.T) {
		var buf bytes.Buffer
		cfg := load("MEILISTREAM_LOG_FORMAT=text", "MEILISTREAM_LOG_LEVEL=debug")
		log := config.NewLogger(cfg, &buf)
		log.Debug("starting", "config", cfg)
		out := buf.String()
		if !strings.Contains(out, "[DEBUG] meilistream: starting") || strings.HasPrefix(out, "{") {
			t.Errorf("text line: %s", out)
		}
		if strings.Contains(out, testAPIKey) || strings.Contains(out, "s3cr3t-pw") {
			t.Errorf("a secret is in the log: %s", out)
		}
	})

	t.Run("durations as Go duration strings, in every derived logger", func(t *testing.T) {
		var buf bytes.Buffer
		log := config.NewLogger(load(), &buf)
		log.Named("engine").With("job", "a", "pause", 1500*time.Millisecond).Info("reindex done", "duration", 81*time.Millisecond, "count", 3)
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("not one JSON line: %v\n%s", err, buf.String())
		}
		if line["duration"] != "81ms" || line["pause"] != "1.5s" || line["count"] != float64(3) || line["@module"] != "meilistream.engine" {
			t.Errorf("line: %s", buf.String())
		}
	})

	t.Run("errors with their code and job once, in every derived logger", func(t *testing.T) {
		var buf bytes.Buffer
		log := config.NewLogger(load(), &buf)
		err := errs.WithJob("books", fmt.Errorf("follow: %w", errs.Wrap(errs.Failed, "books", errs.New(errs.HistoryLost, "books", "position gone"), "open change stream")))
		log.Named("engine").With("cause", err).Error("job failed", "error", err)
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("not one JSON line: %v\n%s", err, buf.String())
		}
		want := "HISTORY_LOST books: follow: open change stream: position gone"
		if line["error"] != want || line["cause"] != want {
			t.Errorf("line: %s, want error %q", buf.String(), want)
		}
	})

	t.Run("off logs nothing", func(t *testing.T) {
		var buf bytes.Buffer
		log := config.NewLogger(load("MEILISTREAM_LOG_LEVEL=off"), &buf)
		log.Error("boom")
		if buf.Len() != 0 {
			t.Errorf("logged at off: %s", buf.String())
		}
	})
}
