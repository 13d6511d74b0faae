package main

// The end-to-end suite: testdata/scripts/*.txtar run this package's Main as
// the meilistream command, against the servers and with the commands of
// internal/scripttest (its package doc says what a script can use).

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/meilistream/meilistream/internal/scripttest"
	"github.com/meilistream/meilistream/sidecar/config"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"meilistream": func() { os.Exit(scripttest.WatchSecrets(Main)) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "scripts"),
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		UpdateScripts:       os.Getenv("TESTSCRIPT_UPDATE") != "",
		Cmds:                maps.Clone(scripttest.Cmds),
		Condition:           scripttest.Condition,
		Setup:               scripttest.Setup(t),
	})
}

// The harness reads the sidecar's state collection without importing the
// configuration: its default must be the configuration's.
func TestTheHarnessKnowsTheDefaultStateCollection(t *testing.T) {
	if scripttest.DefaultStateCollection != config.DefaultStateCollection {
		t.Fatalf("scripttest.DefaultStateCollection = %q, config.DefaultStateCollection = %q", scripttest.DefaultStateCollection, config.DefaultStateCollection)
	}
}
