package scripttest

// FerretDB for the scenarios of a MongoDB-compatible server no one here
// wrote (FerretDB 1.24.2 with its SQLite backend):
//
//	[!ferretdb] skip 'needs a FerretDB binary'
//	ferretdb
//
// ferretdb starts a FerretDB of the script's own (its data in $WORK), on
// a free port, waits until it answers, and points MONGODB_URI and
// MEILISTREAM_MONGODB_URI at it; the script's Meilisearch stays. The binary
// is $MEILISTREAM_TEST_FERRETDB, or ferretdb on PATH; [ferretdb] is true
// when there is one. CONTRIBUTING.md says how to build it
// (internal/ferretdb/build).

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// envTestFerretDB names the FerretDB binary of the [ferretdb] scenarios.
const envTestFerretDB = "MEILISTREAM_TEST_FERRETDB"

func init() {
	Cmds["ferretdb"] = cmdFerretDB
	conds["ferretdb"] = func() (bool, error) { return ferretdbBinary() != "", nil }
}

func ferretdbBinary() string {
	if p := os.Getenv(envTestFerretDB); p != "" {
		return p
	}
	p, err := exec.LookPath("ferretdb")
	if err != nil {
		return ""
	}
	return p
}

// cmdFerretDB: ferretdb starts the script's FerretDB (see above).
func cmdFerretDB(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: ferretdb")
	}
	bin := ferretdbBinary()
	if bin == "" {
		ts.Fatalf("no FerretDB binary: set %s (or guard the script with [ferretdb])", envTestFerretDB)
	}
	dir := ts.MkAbs("ferretdb")
	ts.Check(os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	port, err := freeTCPPort()
	ts.Check(err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf, err := os.Create(filepath.Join(dir, "ferretdb.log"))
	ts.Check(err)
	cmd := exec.Command(bin, "--handler=sqlite", "--sqlite-url=file:"+filepath.Join(dir, "data")+"/",
		"--listen-addr="+addr, "--debug-addr=127.0.0.1:0", "--state-dir="+dir,
		"--telemetry=disable", "--log-level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	ts.Check(cmd.Start())
	ts.Defer(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	uri := "mongodb://" + addr + "/"
	if err := waitAnswers(uri, 60*time.Second); err != nil {
		ts.Fatalf("FerretDB (%s) did not answer: %v (its log: %s)", bin, err, logf.Name())
	}
	ts.Setenv("MONGODB_URI", uri)
	ts.Setenv("MEILISTREAM_MONGODB_URI", uri)
	fmt.Fprintf(ts.Stdout(), "FerretDB: %s\n", uri)
}

// freeTCPPort is a port nothing listens on now.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitAnswers waits, within d, until the server of uri answers a ping.
func waitAnswers(uri string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer c.Disconnect(context.Background())
	return c.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
}
