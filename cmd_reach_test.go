package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/meilistream/meilistream/internal/mongotest"
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

// A URI whose replicaSet is not the set's name: the driver says only
// ReplicaSetNoPrimary; the error says which name the server has.
func TestAWrongReplicaSetNameIsNamed(t *testing.T) {
	old := reachTimeout
	reachTimeout = 2 * time.Second
	defer func() { reachTimeout = old }()
	s, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := config.Default()
	cfg.MongoDBURI = "mongodb://" + s.Addr() + "/app?replicaSet=rs1"
	cfg.MongoDBDatabase = "app"
	w, err := connect(context.Background(), cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	err = w.reach(context.Background())
	want := s.Addr() + ` belongs to replica set "rs0", but MEILISTREAM_MONGODB_URI asks for replicaSet=rs1`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want it to say %s", err, want)
	}
	// The right name: no hint, it answers.
	if h := replicaSetHint(context.Background(), "mongodb://"+s.Addr()+"/app?replicaSet=rs0", time.Second); h != "" {
		t.Errorf("hint %q for the right name", h)
	}
}
