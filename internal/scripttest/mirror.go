package scripttest

// Custom testscript commands of the mirror_ scenarios (mirror jobs into a
// replica MongoDB). The replica is $MEILISTREAM_REPLICA_URI, database
// $MEILISTREAM_REPLICA_DATABASE: a script points them at the shared server
// ($MONGODB_URI, $REPLICA_DB) or starts a private one with own-replica when
// it injects faults. The source side uses the sync_ commands (mongo,
// mongo-seed, wait-status, own-servers...).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/synccheck"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/transform"
)

func init() {
	for name, fn := range map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"mirrored":                 cmdMirrored,
		"replica-count":            cmdReplicaCount,
		"replica-indexes":          cmdReplicaIndexes,
		"own-replica":              cmdOwnReplica,
		"replica-fail":             cmdReplicaFail,
		"replica-drop-connections": cmdReplicaDropConnections,
		"mongo-index":              cmdMongoIndex,
		"mongo-indexes":            cmdMongoIndexes,
		"replica-insert":           cmdReplicaInsert,
		"mongo-rename":             cmdMongoRename,
		"mongo-drop-database":      cmdMongoDropDatabase,
		"replica-index":            cmdReplicaIndex,
		"replica-delete":           cmdReplicaDelete,
	} {
		Cmds[name] = fn
	}
}

var scriptOwnReplicas sync.Map // *testscript.TestScript -> *mongotest.Server

// scriptReplica returns the script's replica database.
func scriptReplica(ts *testscript.TestScript) *mongo.Database {
	uri := directURI(ts.Getenv("MEILISTREAM_REPLICA_URI"))
	if uri == "" {
		ts.Fatalf("MEILISTREAM_REPLICA_URI is not set (env MEILISTREAM_REPLICA_URI=$MONGODB_URI, or own-replica)")
	}
	db := ts.Getenv("MEILISTREAM_REPLICA_DATABASE")
	if db == "" {
		ts.Fatalf("MEILISTREAM_REPLICA_DATABASE is not set (env MEILISTREAM_REPLICA_DATABASE=$REPLICA_DB)")
	}
	c, ok := scriptClients.Load(uri)
	if !ok {
		cl, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second))
		ts.Check(err)
		if prev, loaded := scriptClients.LoadOrStore(uri, cl); loaded {
			_ = cl.Disconnect(context.Background())
			c = prev
		} else {
			c = cl
		}
	}
	return c.(*mongo.Client).Database(db)
}

// cmdMirrored: mirrored [-timeout D] [-keep] JOB polls until the mirror
// job's replica collection holds exactly transform(source collection):
// every source document the transform keeps, byte for byte as the
// transform makes it (so every BSON type, _id's included), and nothing
// else. With -keep the replica may also hold documents the source no longer
// has (a mirror keeps what an accidental drop removed). On timeout it
// reports the last difference. With !, it polls until the two differ.
//
// A document whose transform fails is expected absent.
func cmdMirrored(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("mirrored", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	keep := fs.Bool("keep", false, "extra replica documents are allowed")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: mirrored [-timeout D] [-keep] JOB")
	}
	job := loadScriptJob(ts, fs.Arg(0))
	if job.Kind != jobdef.Mirror {
		ts.Fatalf("mirrored: job %s is not a mirror job", job.Name)
	}
	source := collIn(scriptMongo(ts), jobdef.Namespace(job.Database, job.Collection))
	replica := scriptReplica(ts).Collection(job.Mirror)
	deadline := time.Now().Add(*timeout)
	var diff string
	for {
		ctx, cancel := cmdCtx()
		want, werr := expectedMirror(ctx, source, job)
		got, gerr := collectionDocs(ctx, replica)
		cancel()
		switch {
		case werr != nil:
			diff = "read source: " + werr.Error()
		case gerr != nil:
			diff = "read replica: " + gerr.Error()
		default:
			diff = diffRaw(want, got, *keep)
		}
		if (diff == "") != neg {
			if !neg {
				ts.Logf("replica %s holds the %d documents transform(%s) makes", replica.Name(), len(want), job.Collection)
			}
			return
		}
		if time.Now().After(deadline) {
			if neg {
				ts.Fatalf("replica %s still equals transform(%s) after %s", replica.Name(), job.Collection, *timeout)
			}
			ts.Fatalf("replica %s is not transform(%s) after %s: %s", replica.Name(), job.Collection, *timeout, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rawKey names a document by its _id, type included: an int32 1, an int64
// 1 and a string "1" are three different keys.
func rawKey(id bson.RawValue) string {
	return id.Type.String() + " " + id.String()
}

// expectedMirror runs the job's transform over the whole source collection.
func expectedMirror(ctx context.Context, coll *mongo.Collection, job *transform.Job) (map[string]bson.Raw, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	want := map[string]bson.Raw{}
	for cur.Next(ctx) {
		doc := bson.Raw(bytes.Clone(cur.Current))
		lk, err := synccheck.Lookups(ctx, coll.Database(), job, doc)
		if err != nil {
			return nil, err
		}
		res, _, err := job.ApplyWith(ctx, nil, doc, transform.OpReindex, nil, lk)
		if err != nil || res.Skip {
			continue
		}
		want[rawKey(doc.Lookup("_id"))] = bytes.Clone(res.Raw)
	}
	return want, cur.Err()
}

func collectionDocs(ctx context.Context, coll *mongo.Collection) (map[string]bson.Raw, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	got := map[string]bson.Raw{}
	for cur.Next(ctx) {
		doc := bson.Raw(bytes.Clone(cur.Current))
		got[rawKey(doc.Lookup("_id"))] = doc
	}
	return got, cur.Err()
}

// diffRaw describes how got differs from want ("" when equal): missing,
// extra (unless keep) and different documents, a few of each.
func diffRaw(want, got map[string]bson.Raw, keep bool) string {
	var missing, extra, changed []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case !bytes.Equal(w, g):
			changed = append(changed, fmt.Sprintf("%s: want %s, got %s", k, short(w), short(g)))
		}
	}
	if !keep {
		for k := range got {
			if _, ok := want[k]; !ok {
				extra = append(extra, k)
			}
		}
	}
	if len(missing)+len(extra)+len(changed) == 0 {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		what string
		ids  []string
	}{{"missing", missing}, {"extra", extra}, {"different", changed}} {
		if len(p.ids) > 0 {
			sort.Strings(p.ids)
			parts = append(parts, fmt.Sprintf("%d %s (%s)", len(p.ids), p.what, firstFew(p.ids)))
		}
	}
	return fmt.Sprintf("want %d documents, replica holds %d: %s", len(want), len(got), strings.Join(parts, "; "))
}

func short(d bson.Raw) string {
	s := d.String()
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func firstFew(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + ", ..."
	}
	return strings.Join(ids, ", ")
}

// cmdReplicaCount: replica-count [-timeout D] COLL FILTER N polls until the
// replica collection COLL holds N documents matching FILTER (relaxed
// Extended JSON).
func cmdReplicaCount(ts *testscript.TestScript, neg bool, args []string) {
	pollCount(ts, neg, args, "replica-count", "replica ", scriptReplica)
}

// cmdReplicaIndexes: replica-indexes COLL NAME... asserts that the replica
// collection COLL has exactly the indexes NAME... besides _id_ (with !, that
// it does not have any of them).
func cmdReplicaIndexes(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: replica-indexes COLL NAME...")
	}
	assertIndexes(ts, neg, "replica ", scriptReplica(ts), args)
}

// cmdMongoIndexes: mongo-indexes COLL NAME... is replica-indexes for the
// source collection COLL (mongo-indexes COLL alone: it has only _id_).
func cmdMongoIndexes(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: mongo-indexes COLL NAME...")
	}
	assertIndexes(ts, neg, "", scriptMongo(ts), args)
}

func assertIndexes(ts *testscript.TestScript, neg bool, which string, db *mongo.Database, args []string) {
	ctx, cancel := cmdCtx()
	defer cancel()
	cur, err := db.Collection(args[0]).Indexes().List(ctx)
	ts.Check(err)
	var have []string
	for cur.Next(ctx) {
		if name := cur.Current.Lookup("name").StringValue(); name != "_id_" {
			have = append(have, name)
		}
	}
	ts.Check(cur.Err())
	sort.Strings(have)
	want := append([]string(nil), args[1:]...)
	sort.Strings(want)
	if neg {
		for _, w := range want {
			for _, h := range have {
				if w == h {
					ts.Fatalf("%s%s has index %s", which, args[0], w)
				}
			}
		}
		return
	}
	if strings.Join(have, ",") != strings.Join(want, ",") {
		ts.Fatalf("%s%s indexes [%s], want [%s]", which, args[0], strings.Join(have, " "), strings.Join(want, " "))
	}
}

// cmdOwnReplica: own-replica starts a MongoDB test server for this script's
// replica alone (fault injection must not disturb the scripts beside it) and
// sets MEILISTREAM_REPLICA_URI and MEILISTREAM_REPLICA_DATABASE=$REPLICA_DB.
// Scripts using it skip on [real].
func cmdOwnReplica(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: own-replica")
	}
	if _, ok := scriptOwnReplicas.Load(ts); ok {
		ts.Fatalf("own-replica: already started")
	}
	s, err := mongotest.Start(mongotest.Options{})
	ts.Check(err)
	scriptOwnReplicas.Store(ts, s)
	ts.Defer(func() {
		scriptOwnReplicas.Delete(ts)
		if c, ok := scriptClients.LoadAndDelete(s.URI()); ok {
			_ = c.(*mongo.Client).Disconnect(context.Background())
		}
		_ = s.Close()
	})
	ts.Setenv("MEILISTREAM_REPLICA_URI", s.URI())
	ts.Setenv("MEILISTREAM_REPLICA_DATABASE", ts.Getenv("REPLICA_DB"))
}

func ownReplica(ts *testscript.TestScript) *mongotest.Server {
	s, ok := scriptOwnReplicas.Load(ts)
	if !ok {
		ts.Fatalf("no private replica: run own-replica first")
	}
	return s.(*mongotest.Server)
}

// cmdReplicaFail: replica-fail [-ns COLL] CODE|wce=CODE|close|block=MS
// COMMAND... makes every named command on the replica fail with CODE, run
// but answer with a write concern error of CODE (applied, not known to be
// majority-committed), close its connection, or wait MS milliseconds before
// it runs (a slow replica), until
// "replica-fail off": the failCommand fail point, set through
// configureFailPoint on the replica's server (own-replica's, or the shared
// one: the test server, or real mongod with enableTestCommands, see
// [failpoints]). -ns COLL limits it to the commands on COLL of the replica
// database, which the shared server needs (see mongo-failcommand).
// "replica-fail entered N" waits until it acted on N commands since it was
// set (see mongo-failcommand entered).
func cmdReplicaFail(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("replica-fail", flag.ContinueOnError)
	ns := fs.String("ns", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() < 1 || (fs.Arg(0) != "off" && fs.NArg() < 2) || (fs.Arg(0) == "entered" && fs.NArg() != 2) {
		ts.Fatalf("usage: replica-fail [-ns COLL] CODE|wce=CODE|close|block=MS COMMAND... | replica-fail entered N | replica-fail off")
	}
	db := scriptReplica(ts)
	if failPointControl(ts, db, fs.Args()) {
		return
	}
	data := bson.D{{Key: "failCommands", Value: commandNames(fs.Args()[1:])}}
	if ms, ok := strings.CutPrefix(fs.Arg(0), "block="); ok {
		n, err := strconv.Atoi(ms)
		ts.Check(err)
		data = append(data, bson.E{Key: "blockConnection", Value: true}, bson.E{Key: "blockTimeMS", Value: int32(n)})
	} else if fs.Arg(0) == "close" {
		data = append(data, bson.E{Key: "closeConnection", Value: true})
	} else if c, ok := strings.CutPrefix(fs.Arg(0), "wce="); ok {
		code, err := strconv.Atoi(c)
		ts.Check(err)
		data = append(data, bson.E{Key: "writeConcernError", Value: bson.D{
			{Key: "code", Value: int32(code)}, {Key: "errmsg", Value: "failCommand write concern error"}}})
	} else {
		code, err := strconv.Atoi(fs.Arg(0))
		ts.Check(err)
		data = append(data, bson.E{Key: "errorCode", Value: int32(code)})
	}
	if *ns != "" {
		data = append(data, bson.E{Key: "namespace", Value: db.Name() + "." + *ns})
	}
	setFailPoint(ts, db, bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: data},
	})
}

// cmdReplicaDropConnections: replica-drop-connections closes every client
// connection of the private replica, as a network blip would.
func cmdReplicaDropConnections(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: replica-drop-connections")
	}
	ownReplica(ts).DropConnections()
}

// cmdMongoIndex: mongo-index COLL KEYS [OPTIONS] creates an index on the
// source collection COLL (KEYS and OPTIONS in relaxed Extended JSON, OPTIONS
// as createIndexes takes them, e.g. {"unique": true}).
func cmdMongoIndex(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: mongo-index COLL KEYS [OPTIONS]")
	}
	createIndex(ts, scriptMongo(ts), args)
}

// cmdReplicaIndex: replica-index COLL KEYS [OPTIONS] creates an index on the
// replica collection COLL, as the replica's owner would.
func cmdReplicaIndex(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: replica-index COLL KEYS [OPTIONS]")
	}
	createIndex(ts, scriptReplica(ts), args)
}

func createIndex(ts *testscript.TestScript, db *mongo.Database, args []string) {
	ctx, cancel := cmdCtx()
	defer cancel()
	spec := bson.D{{Key: "key", Value: extJSON(ts, args[1])}}
	name := ""
	for _, e := range extJSON(ts, args[1]) {
		if name != "" {
			name += "_"
		}
		name += fmt.Sprintf("%s_%v", e.Key, e.Value)
	}
	if len(args) == 3 {
		for _, e := range extJSON(ts, args[2]) {
			if e.Key == "name" {
				name, _ = e.Value.(string)
				continue
			}
			spec = append(spec, e)
		}
	}
	spec = append(spec, bson.E{Key: "name", Value: name})
	ts.Check(db.RunCommand(ctx, bson.D{{Key: "createIndexes", Value: args[0]}, {Key: "indexes", Value: bson.A{spec}}}).Err())
}

// cmdReplicaInsert: replica-insert COLL DOC... inserts documents (relaxed
// Extended JSON) into the replica collection COLL, as someone writing to the
// replica directly would.
func cmdReplicaInsert(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: replica-insert COLL DOC...")
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	docs := make([]any, 0, len(args)-1)
	for _, a := range args[1:] {
		docs = append(docs, extJSON(ts, a))
	}
	_, err := scriptReplica(ts).Collection(args[0]).InsertMany(ctx, docs)
	ts.Check(err)
}

// cmdMongoRename: mongo-rename COLL NEW renames the source collection COLL
// to NEW (same database).
func cmdMongoRename(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mongo-rename COLL NEW")
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	db := scriptMongo(ts)
	cmd := bson.D{{Key: "renameCollection", Value: db.Name() + "." + args[0]}, {Key: "to", Value: db.Name() + "." + args[1]}}
	ts.Check(db.Client().Database("admin").RunCommand(ctx, cmd).Err())
}

// cmdMongoDropDatabase: mongo-drop-database [DB] drops the script's source
// database (its state collection included), or database DB.
func cmdMongoDropDatabase(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) > 1 {
		ts.Fatalf("usage: mongo-drop-database [DB]")
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	db := scriptMongo(ts)
	if len(args) == 1 {
		db = db.Client().Database(args[0])
	}
	ts.Check(db.Drop(ctx))
}

// cmdReplicaDelete: replica-delete COLL FILTER deletes the matching
// documents of the replica collection COLL.
func cmdReplicaDelete(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: replica-delete COLL FILTER")
	}
	ctx, cancel := cmdCtx()
	defer cancel()
	_, err := scriptReplica(ts).Collection(args[0]).DeleteMany(ctx, extJSON(ts, args[1]))
	ts.Check(err)
}
