package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meilistream/meilistream/sidecar/config"
)

// An interactive command on an unreachable MongoDB fails within
// reachTimeout, names the setting and never prints the password.
func TestInteractiveUnreachableMongoDB(t *testing.T) {
	old := reachTimeout
	reachTimeout = 300 * time.Millisecond
	defer func() { reachTimeout = old }()
	cfg := config.Default()
	cfg.MongoDBURI = "mongodb://u:SECRETPW@127.0.0.1:1/app?replicaSet=rs0"
	cfg.MongoDBDatabase = "app"
	cfg.Transforms = t.TempDir()
	for name, run := range map[string]func(context.Context, *invocation) int{"status": runStatus} {
		var stderr bytes.Buffer
		inv := &invocation{Config: cfg, Log: hclog.NewNullLogger(), Stdout: &bytes.Buffer{}, Stderr: &stderr}
		start := time.Now()
		code := run(context.Background(), inv)
		took := time.Since(start)
		out := stderr.String()
		if code != exitFailed || took > 5*time.Second ||
			!strings.Contains(out, "cannot reach MongoDB (MEILISTREAM_MONGODB_URI)") || strings.Contains(out, "SECRETPW") {
			t.Errorf("%s: exit %d after %s, stderr %q", name, code, took, out)
		}
	}
}
