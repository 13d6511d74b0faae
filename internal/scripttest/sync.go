package scripttest

// Custom testscript commands of the sync_, shutdown_ and lease_ scenarios
// (the search jobs). They talk to the servers the harness gives every script
// through the real clients (mongo-driver, meilisearch-go), so the same
// commands work against real servers; the few that need a test server's
// hooks (dropping connections, moving its clock) use the harness's handles.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/synccheck"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/transform"
)

func init() {
	for name, fn := range map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"mongo":                  cmdMongo,
		"mongo-seed":             cmdMongoSeed,
		"mongo-big":              cmdMongoBig,
		"mongo-failcommand":      cmdMongoFailCommand,
		"synced":                 cmdSynced,
		"wait-status":            cmdWaitStatus,
		"index-docs":             cmdIndexDocs,
		"index-doc":              cmdIndexDoc,
		"mongo-churn":            cmdMongoChurn,
		"own-servers":            cmdOwnServers,
		"mongo-drop-connections": cmdMongoDropConnections,
		"mongo-advance-clock":    cmdMongoAdvanceClock,
		"mongo-history":          cmdMongoHistory,
		"meili-fail":             cmdMeiliFail,
		"meili-requests":         cmdMeiliRequests,
		"mongo-count":            cmdMongoCount,
		"wait-metric":            cmdWaitMetric,
		"sigterm":                cmdSigterm,
	} {
		Cmds[name] = fn
	}
	// $REPO is the repository, for scripts that use its files (the
	// example transforms).
	setups = append(setups, func(env *testscript.Env) error {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		env.Setenv("REPO", wd)
		return nil
	})
}

// cmdMongoCount: mongo-count [-timeout D] COLL FILTER N polls until COLL
// (of the script's database) holds N documents matching FILTER (relaxed
// Extended JSON).
func cmdMongoCount(ts *testscript.TestScript, neg bool, args []string) {
	pollCount(ts, neg, args, "mongo-count", "", scriptMongo)
}

// pollCount is mongo-count and replica-count: it polls until the
// collection of db(ts) holds the wanted number of matching documents.
func pollCount(ts *testscript.TestScript, neg bool, args []string, cmd, what string, db func(*testscript.TestScript) *mongo.Database) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: %s [-timeout D] COLL FILTER N", cmd)
	}
	want, err := strconv.ParseInt(fs.Arg(2), 10, 64)
	ts.Check(err)
	coll := collIn(db(ts), fs.Arg(0))
	filter := extJSON(ts, fs.Arg(1))
	deadline := time.Now().Add(*timeout)
	for {
		ctx, cancel := cmdCtx()
		n, err := coll.CountDocuments(ctx, filter)
		cancel()
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s%s: %d documents match %s, want %d (err %v)", what, fs.Arg(0), n, fs.Arg(1), want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownServers are the private test servers of one script (own-servers).
type ownServers struct {
	mongo *mongotest.Server
	meili *meilitest.Server
}

var scriptOwnServers sync.Map // *testscript.TestScript -> *ownServers

// cmdOwnServers: own-servers [-task-delay D] [-proxy-body-limit N]
// [-mongo-version V] [-mongo-standalone] [-mongo-no-expressions] starts a
// MongoDB and a Meilisearch
// test server for this script alone (with -proxy-body-limit, behind a proxy
// that answers larger bodies with an HTML 413, as nginx's
// client_max_body_size; with -mongo-version, MongoDB answering as that
// version; with -mongo-standalone, as a standalone mongod; with
// -mongo-no-expressions, refusing update pipelines and $$NOW expressions as
// FerretDB does) and points the script's
// MEILISTREAM_MONGODB_URI and MEILISTREAM_MEILI_URL at them: fault
// injection (dropped connections, a moved clock, failing requests) must not
// disturb the scripts running beside it. It needs the in-process servers:
// scripts call it as [!real] own-servers and inject faults another way
// under [real] (the proxy, signal, [failpoints]).
func cmdOwnServers(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("own-servers", flag.ContinueOnError)
	delay := fs.Duration("task-delay", 0, "meilitest TaskDelay")
	proxyLimit := fs.Int64("proxy-body-limit", 0, "meilitest ProxyBodyLimit")
	version := fs.String("mongo-version", "", "mongotest Version")
	standalone := fs.Bool("mongo-standalone", false, "mongotest Standalone")
	noExpr := fs.Bool("mongo-no-expressions", false, "mongotest NoExpressions")
	if neg || fs.Parse(args) != nil || fs.NArg() != 0 {
		ts.Fatalf("usage: own-servers [-task-delay D] [-proxy-body-limit N] [-mongo-version V] [-mongo-standalone] [-mongo-no-expressions]")
	}
	if _, ok := scriptOwnServers.Load(ts); ok {
		ts.Fatalf("own-servers: already started")
	}
	ms, err := mongotest.Start(mongotest.Options{Version: *version, Standalone: *standalone, NoExpressions: *noExpr})
	ts.Check(err)
	key := ts.Getenv("MEILISTREAM_MEILI_API_KEY")
	ml, err := meilitest.Start(meilitest.Options{MasterKey: key, TaskDelay: *delay, ProxyBodyLimit: *proxyLimit})
	if err != nil {
		ms.Close()
		ts.Check(err)
	}
	scriptOwnServers.Store(ts, &ownServers{mongo: ms, meili: ml})
	ts.Defer(func() {
		scriptOwnServers.Delete(ts)
		if c, ok := scriptClients.LoadAndDelete(ms.URI()); ok {
			_ = c.(*mongo.Client).Disconnect(context.Background())
		}
		ml.Close()
		ms.Close()
	})
	ts.Setenv("MONGODB_URI", ms.URI())
	ts.Setenv("MEILI_URL", ml.URL())
	ts.Setenv("MEILISTREAM_MONGODB_URI", ms.URI())
	ts.Setenv("MEILISTREAM_MEILI_URL", ml.URL())
}

func ownOf(ts *testscript.TestScript) *ownServers {
	o, ok := scriptOwnServers.Load(ts)
	if !ok {
		ts.Fatalf("this command needs the script's own servers: run own-servers first")
	}
	return o.(*ownServers)
}

// cmdMongoDropConnections: mongo-drop-connections closes every client
// connection of the script's own MongoDB, as a step-down or a network blip.
func cmdMongoDropConnections(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: mongo-drop-connections")
	}
	ownOf(ts).mongo.DropConnections()
}

// cmdMongoAdvanceClock: mongo-advance-clock D moves the script's own
// MongoDB clock forward (leases expire by the server's clock).
func cmdMongoAdvanceClock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: mongo-advance-clock DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	ownOf(ts).mongo.AdvanceClock(d)
}

// cmdMongoHistory: mongo-history N keeps only the newest N change events on
// the script's own MongoDB (resuming from before them: history lost).
func cmdMongoHistory(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: mongo-history N")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	ownOf(ts).mongo.SetHistorySize(n)
}

// cmdMeiliFail: meili-fail [-drop] [-route ROUTE] N makes the next N
// requests to the script's own Meilisearch fail with 503 (or a dropped
// connection), on every route or on one (meilitest route keys, e.g.
// "POST /indexes/{uid}/documents"). N = 0 cancels.
func cmdMeiliFail(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("meili-fail", flag.ContinueOnError)
	drop := fs.Bool("drop", false, "")
	route := fs.String("route", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: meili-fail [-drop] [-route ROUTE] N")
	}
	n, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	mode := meilitest.Fail5xx
	if *drop {
		mode = meilitest.FailDrop
	}
	if *route != "" {
		ownOf(ts).meili.FailNextOn(*route, n, mode)
		return
	}
	ownOf(ts).meili.FailNext(n, mode)
}

// cmdMeiliRequests: meili-requests [-reset] [-min N] [-max N] ROUTE checks
// how many requests the script's own Meilisearch got on ROUTE (a meilitest
// route key) and prints the count; -reset sets the counts back to zero
// afterwards.
func cmdMeiliRequests(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("meili-requests", flag.ContinueOnError)
	lo := fs.Int("min", -1, "")
	hi := fs.Int("max", -1, "")
	reset := fs.Bool("reset", false, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: meili-requests [-reset] [-min N] [-max N] ROUTE")
	}
	ml := ownOf(ts).meili
	n := ml.Requests(fs.Arg(0))
	fmt.Fprintf(ts.Stdout(), "%d\n", n)
	if *reset {
		ml.ResetRequests()
	}
	if *lo >= 0 && n < *lo {
		ts.Fatalf("%s: %d requests, want at least %d", fs.Arg(0), n, *lo)
	}
	if *hi >= 0 && n > *hi {
		ts.Fatalf("%s: %d requests, want at most %d", fs.Arg(0), n, *hi)
	}
}

// scriptClients caches one MongoDB client per URI for the whole test
// binary: scripts share the servers, and connecting per command is slow.
var scriptClients sync.Map // uri -> *mongo.Client

func scriptMongo(ts *testscript.TestScript) *mongo.Database {
	uri := directURI(ts.Getenv("MEILISTREAM_MONGODB_URI"))
	if uri == "" {
		ts.Fatalf("MEILISTREAM_MONGODB_URI is not set")
	}
	c, ok := scriptClients.Load(uri)
	if !ok {
		cl, err := mongo.Connect(options.Client().ApplyURI(uri))
		ts.Check(err)
		if prev, loaded := scriptClients.LoadOrStore(uri, cl); loaded {
			_ = cl.Disconnect(context.Background())
			c = prev
		} else {
			c = cl
		}
	}
	return c.(*mongo.Client).Database(ts.Getenv("MEILISTREAM_MONGODB_DATABASE"))
}

func scriptMeili(ts *testscript.TestScript) meilisearch.ServiceManager {
	url := directURI(ts.Getenv("MEILISTREAM_MEILI_URL"))
	if url == "" {
		ts.Fatalf("MEILISTREAM_MEILI_URL is not set")
	}
	return meilisearch.New(url, meilisearch.WithAPIKey(ts.Getenv("MEILISTREAM_MEILI_API_KEY")), meilisearch.DisableRetries())
}

func cmdCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// extJSON parses one Extended JSON (relaxed) document.
func extJSON(ts *testscript.TestScript, s string) bson.D {
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(s), false, &d); err != nil {
		ts.Fatalf("parse %s: %v", s, err)
	}
	return d
}

// extJSONArray parses s, relaxed Extended JSON, as an array.
func extJSONArray(ts *testscript.TestScript, s string) bson.A {
	var d bson.D
	if err := bson.UnmarshalExtJSON([]byte(`{"a":`+s+`}`), false, &d); err != nil {
		ts.Fatalf("parse %s: %v", s, err)
	}
	a, ok := d[0].Value.(bson.A)
	if !ok {
		ts.Fatalf("parse %s: not an array", s)
	}
	return a
}

// cmdMongo: mongo insert COLL DOC... | update COLL FILTER UPDATE |
// replace COLL FILTER DOC | delete COLL FILTER | drop COLL, on the script's
// database (COLL written db.coll: on database db), documents in relaxed
// Extended JSON (UPDATE may be a pipeline, [...]). update and delete apply
// to every match.
func cmdMongo(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: mongo insert|update|replace|delete|drop COLL [JSON...]")
	}
	err := mongoOp(ts, args)
	if err != nil && mongo.IsNetworkError(err) {
		// A connection dropped by the script itself (mongo-drop-connections):
		// multi-document writes are not retryable writes, so try once more.
		err = mongoOp(ts, args)
	}
	if neg {
		if err == nil {
			ts.Fatalf("mongo %s succeeded", args[0])
		}
		return
	}
	ts.Check(err)
}

func mongoOp(ts *testscript.TestScript, args []string) error {
	ctx, cancel := cmdCtx()
	defer cancel()
	coll := collIn(scriptMongo(ts), args[1])
	var err error
	switch op, rest := args[0], args[2:]; {
	case op == "insert" && len(rest) >= 1:
		docs := make([]any, len(rest))
		for i, s := range rest {
			docs[i] = extJSON(ts, s)
		}
		_, err = coll.InsertMany(ctx, docs)
	case op == "update" && len(rest) == 2:
		var res *mongo.UpdateResult
		var upd any
		if strings.HasPrefix(strings.TrimSpace(rest[1]), "[") {
			upd = extJSONArray(ts, rest[1]) // an update pipeline
		} else {
			upd = extJSON(ts, rest[1])
		}
		res, err = coll.UpdateMany(ctx, extJSON(ts, rest[0]), upd)
		if err == nil && res.MatchedCount == 0 {
			err = fmt.Errorf("update matched nothing")
		}
	case op == "replace" && len(rest) == 2:
		var res *mongo.UpdateResult
		res, err = coll.ReplaceOne(ctx, extJSON(ts, rest[0]), extJSON(ts, rest[1]))
		if err == nil && res.MatchedCount == 0 {
			err = fmt.Errorf("replace matched nothing")
		}
	case op == "delete" && len(rest) == 1:
		var res *mongo.DeleteResult
		res, err = coll.DeleteMany(ctx, extJSON(ts, rest[0]))
		if err == nil && res.DeletedCount == 0 {
			err = fmt.Errorf("delete matched nothing")
		}
	case op == "drop" && len(rest) == 0:
		err = coll.Drop(ctx)
	default:
		ts.Fatalf("usage: mongo insert|update|replace|delete|drop COLL [JSON...]")
	}
	return err
}

// cmdMongoBig: mongo-big COLL ID FIELD MB [SET] sets FIELD of the
// document ID (an integer) to a string of MB megabytes (creating the
// document if need be), with the fields of the JSON object SET in the same
// update: an update whose change event, with its post-image, is twice as
// large.
func cmdMongoBig(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 4 || len(args) > 5 {
		ts.Fatalf("usage: mongo-big COLL ID FIELD MB [SET]")
	}
	id, err := strconv.Atoi(args[1])
	ts.Check(err)
	mb, err := strconv.Atoi(args[3])
	ts.Check(err)
	set := bson.D{}
	if len(args) == 5 {
		set = extJSON(ts, args[4])
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	coll := collIn(scriptMongo(ts), args[0])
	// Another letter than the field holds, so that the field changes.
	c := byte('a')
	if raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw(); err == nil {
		if v, ok := raw.Lookup(args[2]).StringValueOK(); ok && len(v) > 0 && v[0] >= 'a' && v[0] < 'z' {
			c = v[0] + 1
		}
	}
	set = append(set, bson.E{Key: args[2], Value: strings.Repeat(string(c), mb<<20)})
	_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: set}}, options.UpdateOne().SetUpsert(true))
	ts.Check(err)
}

// cmdMongoSeed: mongo-seed COLL N [FIRST] inserts N generated articles of
// about 1 KB (bench/articles) with integer _ids FIRST.. (default 1), one in
// ten a draft.
func cmdMongoSeed(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: mongo-seed COLL N [FIRST]")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	first := 1
	if len(args) == 3 {
		first, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	coll := collIn(scriptMongo(ts), args[0])
	const chunk = 1000
	docs := make([]any, 0, chunk)
	for i := first; i < first+n; i++ {
		docs = append(docs, articles.Article(i))
		if len(docs) == chunk || i == first+n-1 {
			_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
			ts.Check(err)
			docs = docs[:0]
		}
	}
}

// cmdMongoFailCommand: mongo-failcommand [-ns COLL] [-block D] N CODE
// COMMAND... makes the next N of the named commands fail with CODE (the
// failCommand fail point: the test servers have it, real mongod with
// enableTestCommands; see [failpoints]), adding the
// ResumableChangeStreamError label so a change stream resumes after it.
// With -block D each of them first hangs for D (blockConnection); CODE 0
// then lets it run as usual after the wait.
// -ns COLL limits it to the commands on COLL of the script's database: on
// a shared server it must (the fail point is the server's, for all its
// clients), and then the script holds the server's fail point until
// "mongo-failcommand off" or its end. A getMore is on COLL when its
// cursor is (mongod and mongotest match it by the getMore's collection).
// "mongo-failcommand entered N" waits (30s at most) until the fail point
// failed N commands since it was set: a script asserts so that its fault
// happened (a fail point that never fires fails nothing).
func cmdMongoFailCommand(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("mongo-failcommand", flag.ContinueOnError)
	ns := fs.String("ns", "", "")
	block := fs.Duration("block", 0, "")
	if neg || fs.Parse(args) != nil || fs.NArg() < 1 || (fs.Arg(0) != "off" && fs.Arg(0) != "entered" && fs.NArg() < 3) ||
		(fs.Arg(0) == "entered" && fs.NArg() != 2) {
		ts.Fatalf("usage: mongo-failcommand [-ns COLL] [-block D] N CODE COMMAND... | mongo-failcommand entered N | mongo-failcommand off")
	}
	db := scriptMongo(ts)
	if failPointControl(ts, db, fs.Args()) {
		return
	}
	n, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	code, err := strconv.Atoi(fs.Arg(1))
	ts.Check(err)
	data := bson.D{{Key: "failCommands", Value: commandNames(fs.Args()[2:])}}
	if code != 0 || *block == 0 {
		data = append(data, bson.E{Key: "errorCode", Value: int32(code)}, bson.E{Key: "errorLabels", Value: bson.A{"ResumableChangeStreamError"}})
	}
	if *block > 0 {
		data = append(data, bson.E{Key: "blockConnection", Value: true}, bson.E{Key: "blockTimeMS", Value: int32(block.Milliseconds())})
	}
	if *ns != "" {
		data = append(data, bson.E{Key: "namespace", Value: db.Name() + "." + *ns})
	}
	setFailPoint(ts, db, bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: bson.D{{Key: "times", Value: int32(n)}}},
		{Key: "data", Value: data},
	})
}

// failPointControl runs the "off" and "entered N" forms shared by
// mongo-failcommand and replica-fail on db, reporting whether args was one.
func failPointControl(ts *testscript.TestScript, db *mongo.Database, args []string) bool {
	switch args[0] {
	case "off":
		setFailPoint(ts, db, failPointOff)
		return true
	case "entered":
		n, err := strconv.ParseInt(args[1], 10, 64)
		ts.Check(err)
		failPointEntered(ts, db, n, 30*time.Second)
		return true
	}
	return false
}

func commandNames(names []string) bson.A {
	a := bson.A{}
	for _, c := range names {
		a = append(a, c)
	}
	return a
}

// setFailPoint runs configureFailPoint cmd on db's server. On the server
// every script shares, a script sets it only in its turn (until it turns it
// off, or ends), and must scope it to a namespace of its own.
func setFailPoint(ts *testscript.TestScript, db *mongo.Database, cmd bson.D) {
	admin := db.Client().Database("admin")
	off := len(cmd) > 1 && cmd[1].Key == "mode" && cmd[1].Value == "off"
	if db.Client() == scriptClientOf(srv.mongoURI) {
		if !off {
			if data, _ := docValue(cmd, "data").(bson.D); docValue(data, "namespace") == nil {
				ts.Fatalf("a fail point on the shared MongoDB server needs -ns (it would fail every script's commands)")
			}
			takeFailPointTurn(ts, admin)
		} else if _, held := failPointHolder.Load(ts); !held {
			return // not ours to turn off
		}
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	res, err := admin.RunCommand(ctx, cmd).Raw()
	ts.Check(err)
	if off {
		releaseFailPointTurn(ts)
		return
	}
	// The times the server's fail point was entered before this one was
	// set: "entered" waits for more.
	count, _ := res.Lookup("count").AsInt64OK()
	failPointBase.Store(failPointKey{ts, db.Client()}, count)
}

type failPointKey struct {
	ts     *testscript.TestScript
	client *mongo.Client
}

// failPointBase holds, per script and server, the fail point's entry count
// when the script last set it.
var failPointBase sync.Map // failPointKey -> int64

// failPointEntered waits until the fail point the script last set on db's
// server was entered n times since (waitForFailPoint, as
// jstests/libs/fail_point_util.js does): that the fault happened, not just
// that it was set up. Call it before turning the fail point off on the
// shared server (the script's turn keeps other scripts' out meanwhile).
func failPointEntered(ts *testscript.TestScript, db *mongo.Database, n int64, timeout time.Duration) {
	base, ok := failPointBase.Load(failPointKey{ts, db.Client()})
	if !ok {
		ts.Fatalf("entered: this script set no fail point on that server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	err := db.Client().Database("admin").RunCommand(ctx, bson.D{
		{Key: "waitForFailPoint", Value: "failCommand"},
		{Key: "timesEntered", Value: base.(int64) + n},
		{Key: "maxTimeMS", Value: timeout.Milliseconds()},
	}).Err()
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == 50 {
		ts.Fatalf("the fail point was not entered %d times within %s of being set", n, timeout)
	}
	ts.Check(err)
}

func docValue(d bson.D, key string) any {
	for _, e := range d {
		if e.Key == key {
			return e.Value
		}
	}
	return nil
}

// scriptClientOf returns the cached client of uri, or nil.
func scriptClientOf(uri string) *mongo.Client {
	if c, ok := scriptClients.Load(uri); ok {
		return c.(*mongo.Client)
	}
	return nil
}

// loadScriptJob loads job name from the transforms folder of the script
// ($MEILISTREAM_TRANSFORMS, else $WORK/transforms).
func loadScriptJob(ts *testscript.TestScript, name string) *transform.Job {
	dir := ts.Getenv("MEILISTREAM_TRANSFORMS")
	if dir == "" {
		dir = filepath.Join(ts.Getenv("WORK"), "transforms")
	}
	// A monstache script reads the script's database as the sidecar's
	// does (its findId, findOne, find, pipe), through the engine's Reader.
	db := scriptMongo(ts)
	opts := transform.Options{Pool: 1, Database: db.Name(), Reader: engine.New(db, nil, nil, engine.Config{}, nil, nil).Reader()}
	// The job's overrides, as the sidecar applies them: one may move it
	// to another database.
	key := strings.ToUpper(transform.EnvKey(name))
	for _, o := range transform.EnvOptions() {
		if v := ts.Getenv("MEILISTREAM_JOB_" + key + "_" + strings.ToUpper(o)); v != "" {
			if opts.Overrides == nil {
				opts.Overrides = map[string]map[string]string{transform.EnvKey(name): {}}
			}
			opts.Overrides[transform.EnvKey(name)][o] = v
		}
	}
	set, err := transform.Load(ts.MkAbs(dir), opts)
	if set == nil {
		ts.Fatalf("load transforms in %s: %v", dir, err)
	}
	job := set.Job(name)
	if job == nil {
		ts.Fatalf("no job %q in %s (load: %v)", name, dir, err)
	}
	return job
}

// cmdSynced: synced [-timeout D] JOB polls until the job's index holds
// exactly transform(collection) minus the documents recorded in the errors
// collection (internal/synccheck, shared with the engine's tests): every
// document the transform keeps, as it makes it, and nothing else. On
// timeout it reports the last difference. With !, it polls until the two
// differ.
func cmdSynced(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("synced", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: synced [-timeout D] JOB")
	}
	job := loadScriptJob(ts, fs.Arg(0))
	db := scriptMongo(ts)
	coll := collIn(db, jobdef.Namespace(job.Database, job.Collection))
	state := stateCollection(ts)
	errorsColl := db.Collection(state + "_errors")
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + job.Index
	ms := scriptMeili(ts)
	deadline := time.Now().Add(*timeout)
	for {
		ctx, cancel := cmdCtx()
		diff, err := synccheck.Check(ctx, coll, errorsColl, job, ms, uid)
		cancel()
		if err != nil {
			diff = err.Error()
		}
		if (diff == "") != neg {
			return
		}
		if time.Now().After(deadline) {
			if neg {
				ts.Fatalf("index %s still equals transform(%s) after %s", uid, job.Collection, *timeout)
			}
			ts.Fatalf("index %s is not transform(%s) after %s: %s", uid, job.Collection, *timeout, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdIndexDocs: index-docs [-timeout D] INDEX N polls until index
// ($MEILISTREAM_INDEX_PREFIX+INDEX) holds N documents (! : until it does
// not).
func cmdIndexDocs(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("index-docs", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: index-docs [-timeout D] INDEX N")
	}
	n, err := strconv.ParseInt(fs.Arg(1), 10, 64)
	ts.Check(err)
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + fs.Arg(0)
	ms := scriptMeili(ts)
	deadline := time.Now().Add(*timeout)
	var last string
	for {
		ctx, cancel := cmdCtx()
		var res meilisearch.DocumentsResult
		err := ms.Index(uid).GetDocuments(ctx, &meilisearch.DocumentsQuery{Limit: 1}, &res)
		cancel()
		if err != nil {
			last = err.Error()
		} else {
			last = strconv.FormatInt(res.Total, 10) + " documents"
			if (res.Total == n) != neg {
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("index %s: want %s%d documents, last seen %s", uid, map[bool]string{true: "not ", false: ""}[neg], n, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdIndexDoc: index-doc [-timeout D] INDEX ID FIELDS polls until the
// document ID of index ($MEILISTREAM_INDEX_PREFIX+INDEX) holds FIELDS (a
// JSON object: each of its fields with that value).
func cmdIndexDoc(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("index-doc", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: index-doc [-timeout D] INDEX ID FIELDS")
	}
	var want map[string]any
	ts.Check(json.Unmarshal([]byte(fs.Arg(2)), &want))
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + fs.Arg(0)
	ms := scriptMeili(ts)
	deadline := time.Now().Add(*timeout)
	last := "nothing"
	for {
		ctx, cancel := cmdCtx()
		var got map[string]any
		err := ms.Index(uid).GetDocument(ctx, fs.Arg(1), nil, &got)
		cancel()
		if err != nil {
			last = err.Error()
		} else {
			b, _ := json.Marshal(got)
			last = string(b)
			ok := true
			for k, v := range want {
				gb, _ := json.Marshal(got[k])
				wb, _ := json.Marshal(v)
				ok = ok && bytes.Equal(gb, wb)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("index %s document %s: want %s, last seen %s", uid, fs.Arg(1), fs.Arg(2), last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdMongoChurn: mongo-churn COLL N updates N documents of COLL (of the
// script's database) in rounds of 100, each setting "churn" on the next
// hundred _ids from 1 (wrapping at the collection's size), and waits after
// each round until the sidecar's /status has counted the changes (less
// -slack, default 200): a writer no faster than the change stream, so a
// history sized against N is what the stream needs, not what a burst of
// the test's own process outruns.
func cmdMongoChurn(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("mongo-churn", flag.ContinueOnError)
	slack := fs.Int("slack", 200, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: mongo-churn [-slack N] COLL N")
	}
	n, err := strconv.Atoi(fs.Arg(1))
	ts.Check(err)
	coll := collIn(scriptMongo(ts), fs.Arg(0))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	size, err := coll.CountDocuments(ctx, bson.D{})
	ts.Check(err)
	addr, err := os.ReadFile(ts.MkAbs(ts.Getenv("MEILISTREAM_READY_FILE")))
	ts.Check(err)
	counted := func() int {
		v, err := getStatus(strings.TrimSpace(string(addr)), "jobs.0.counters.changes")
		ts.Check(err)
		c, _ := strconv.Atoi(v)
		return c
	}
	start := counted()
	written := 0
	for round := 0; written < n; round++ {
		lo := (round * 100) % max(int(size), 1)
		res, err := coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: lo + 1}, {Key: "$lte", Value: lo + 100}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "churn", Value: round}}}})
		ts.Check(err)
		written += int(res.ModifiedCount)
		for counted()-start < written-*slack {
			if ctx.Err() != nil {
				ts.Fatalf("mongo-churn: the sidecar counted %d of %d changes", counted()-start, written)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Fprintf(ts.Stdout(), "%d changes\n", written)
}

// cmdWaitStatus: wait-status [-timeout D] [-ready FILE] PATH REGEXP polls
// the sidecar's /status (its address from the ready file, default
// $MEILISTREAM_READY_FILE) until the value at PATH (dot-separated keys or
// indexes, e.g. jobs.0.state; a missing key or index is "" or null) matches
// REGEXP. With !, until it does not.
func cmdWaitStatus(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wait-status", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	ready := fs.String("ready", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: wait-status [-timeout D] [-ready FILE] PATH REGEXP")
	}
	if *ready == "" {
		*ready = ts.Getenv("MEILISTREAM_READY_FILE")
	}
	re, err := regexp.Compile(fs.Arg(1))
	ts.Check(err)
	deadline := time.Now().Add(*timeout)
	last := "nothing (no ready file yet)"
	for {
		if addr, err := os.ReadFile(ts.MkAbs(*ready)); err == nil && len(bytes.TrimSpace(addr)) > 0 {
			v, err := getStatus(strings.TrimSpace(string(addr)), fs.Arg(0))
			if errors.Is(err, errNoPath) {
				err, v = nil, "" // a job that is not (or no longer) there
			}
			if err != nil {
				last = err.Error()
			} else {
				last = v
				if re.MatchString(v) != neg {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("/status %s: want %s%q, last seen %s", fs.Arg(0), map[bool]string{true: "no match of ", false: ""}[neg], fs.Arg(1), last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var errNoPath = errors.New("no")

// getStatus GETs /status and returns the value at path (a string as it is,
// anything else as JSON; a missing key is null).
func getStatus(addr, path string) (string, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(addr, "/") + "/status")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("decode /status: %v: %s", err, b)
	}
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return "", fmt.Errorf("%w %s in %s", errNoPath, path, b)
			}
			v = x[i]
		default:
			return "", fmt.Errorf("%w %s in %s", errNoPath, path, b)
		}
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	out, _ := json.Marshal(v)
	return string(out), nil
}

// cmdWaitMetric: wait-metric [-timeout D] NAME LABELS VALUE polls the
// sidecar's /metrics (address from $MEILISTREAM_READY_FILE) until it has the
// sample line `NAME LABELS VALUE`, e.g.
// wait-metric meilistream_lease_held '{kind="search",pipeline="books"}' 1.
func cmdWaitMetric(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wait-metric", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: wait-metric [-timeout D] NAME LABELS VALUE")
	}
	want := fs.Arg(0) + fs.Arg(1) + " " + fs.Arg(2)
	deadline := time.Now().Add(*timeout)
	last := "no ready file"
	c := http.Client{Timeout: 5 * time.Second}
	for {
		if addr, err := os.ReadFile(ts.Getenv("MEILISTREAM_READY_FILE")); err == nil && len(bytes.TrimSpace(addr)) > 0 {
			resp, err := c.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = "no such line"
				for _, l := range strings.Split(string(b), "\n") {
					if l == want {
						return
					}
					if strings.HasPrefix(l, fs.Arg(0)+fs.Arg(1)+" ") {
						last = l
					}
				}
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("/metrics: no line %q after %s; last seen: %s", want, *timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdSigterm: sigterm [-ready FILE] sends a real SIGTERM (testscript's kill
// sends only INT and KILL) to the meilistream process serving at the
// address in FILE (default $MEILISTREAM_READY_FILE): its pid is read from
// the lease holder ("host:pid:random") of the first job in /status, which
// must be held by it.
func cmdSigterm(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("sigterm", flag.ContinueOnError)
	ready := fs.String("ready", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 0 {
		ts.Fatalf("usage: sigterm [-ready FILE] (no !)")
	}
	if *ready == "" {
		*ready = ts.Getenv("MEILISTREAM_READY_FILE")
	}
	addr, err := os.ReadFile(ts.MkAbs(*ready))
	ts.Check(err)
	holder, err := getStatus(strings.TrimSpace(string(addr)), "jobs.0.holder")
	ts.Check(err)
	// A standby job names another process's holder: never signal that one.
	if state, err := getStatus(strings.TrimSpace(string(addr)), "jobs.0.state"); err != nil || (state != "reindexing" && state != "following") {
		ts.Fatalf("sigterm: jobs.0 is %q (%v), want reindexing or following: its holder is this process then", state, err)
	}
	parts := strings.Split(holder, ":")
	if len(parts) != 3 {
		ts.Fatalf("sigterm: holder %q is not host:pid:random", holder)
	}
	pid, err := strconv.Atoi(parts[1])
	ts.Check(err)
	if pid == os.Getpid() || pid <= 1 {
		ts.Fatalf("sigterm: holder pid %d is not a child process", pid)
	}
	p, err := os.FindProcess(pid)
	ts.Check(err)
	ts.Check(p.Signal(syscall.SIGTERM))
}

// collIn is the collection name of db, or of another database when name
// is written db.coll (a script names a job's other databases so; its
// collections hold no dot).
func collIn(db *mongo.Database, name string) *mongo.Collection {
	if d, coll, dotted := strings.Cut(name, "."); dotted {
		return db.Client().Database(d).Collection(coll)
	}
	return db.Collection(name)
}
