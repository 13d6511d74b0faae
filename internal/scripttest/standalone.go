package scripttest

// A standalone MongoDB for the scenarios of sources without change streams
// (a mongod started without --replSet):
//
//	[!standalone] skip 'needs a standalone MongoDB'
//	standalone-mongo
//
// standalone-mongo points the script's MONGODB_URI and
// MEILISTREAM_MONGODB_URI at a standalone MongoDB, keeping the shared
// Meilisearch and the script's own database: the in-process test server in
// its standalone mode (internal/mongotest Options.Standalone, one for the
// whole run, started on first use), or under [real] the server of
// $MEILISTREAM_TEST_STANDALONE_MONGODB_URI, whose script databases are
// dropped when the script ends. [standalone] is true when one is
// available: always without real servers, with them only when that
// variable is set. "own-servers -mongo-standalone" gives a script private
// servers with a standalone MongoDB, for fault injection.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/meilistream/meilistream/internal/mongotest"
)

// envTestStandaloneURI names a real standalone mongod for [real] runs.
const envTestStandaloneURI = "MEILISTREAM_TEST_STANDALONE_MONGODB_URI"

// standalone is the in-process standalone MongoDB of the running
// TestScripts call (srv, made by Setup), started on first use and closed with srv.
var standalone struct {
	mu  sync.Mutex
	of  *servers
	uri string
	err error
}

func init() {
	Cmds["standalone-mongo"] = cmdStandaloneMongo
	conds["standalone"] = func() (bool, error) {
		return !realServers() || os.Getenv(envTestStandaloneURI) != "", nil
	}
}

func standaloneURI() (string, error) {
	if realServers() {
		uri := os.Getenv(envTestStandaloneURI)
		if uri == "" {
			return "", fmt.Errorf("no standalone MongoDB: set %s (or guard the script with [standalone])", envTestStandaloneURI)
		}
		return uri, nil
	}
	standalone.mu.Lock()
	defer standalone.mu.Unlock()
	if standalone.of != srv {
		standalone.of, standalone.uri, standalone.err = srv, "", nil
		s, err := mongotest.Start(mongotest.Options{Standalone: true})
		if err != nil {
			standalone.err = fmt.Errorf("start the standalone mongotest: %w", err)
		} else {
			srv.closers = append(srv.closers, s.Close)
			standalone.uri = s.URI()
		}
	}
	return standalone.uri, standalone.err
}

// cmdStandaloneMongo: standalone-mongo points the script at a standalone
// MongoDB (see above).
func cmdStandaloneMongo(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: standalone-mongo")
	}
	uri, err := standaloneURI()
	ts.Check(err)
	if realServers() {
		db := ts.Getenv("DB")
		ts.Defer(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			dropRealDatabases(ctx, uri, db, db+"_r")
		})
	}
	ts.Setenv("MONGODB_URI", uri)
	ts.Setenv("MEILISTREAM_MONGODB_URI", uri)
	fmt.Fprintf(ts.Stdout(), "standalone MongoDB: %s\n", redactURI(uri))
}
