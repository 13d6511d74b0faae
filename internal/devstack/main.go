// Command devstack runs the project's test servers for trying meilistream by
// hand: internal/mongotest (a single-node replica set) on 127.0.0.1:27017 and
// internal/meilitest (Meilisearch's HTTP API) on 127.0.0.1:7700. It prints
// the environment for meilistream (MEILISTREAM_REPLICA_URI names the same
// server's database <db>_replica, for mirror jobs) and runs until SIGINT or
// SIGTERM.
//
//	go run ./internal/devstack [-mongo-addr 127.0.0.1:27017] [-meili-addr 127.0.0.1:7700]
//	                           [-master-key KEY] [-db app] [-seed DIR]
//	                           [-history N] [-max-payload BYTES] [-proxy-body-limit BYTES]
//	                           [-standalone]
//
// -standalone runs MongoDB as a standalone mongod (one started without
// --replSet) instead: hello names no replica set and change streams are
// refused (40573), as on a development machine's plain mongod; the printed
// URIs then name no replica set.
//
// -history N keeps only the newest N changes for change streams (mongotest's
// Options.HistorySize, the oplog's size in changes; default 100000): a
// stream or a resume that falls behind it fails with
// ChangeStreamHistoryLost, as one that outlives a real oplog window does.
// -max-payload limits Meilisearch request bodies, as
// --http-payload-size-limit (default 100 MB); larger ones get 413
// payload_too_large. -proxy-body-limit plays a reverse proxy in front of
// Meilisearch that refuses larger bodies with an HTML 413, as nginx's
// client_max_body_size (1 MB by default) does; 0 (the default) means none.
//
// -seed DIR loads every *.json and *.ndjson file of DIR into MongoDB before
// printing: a file holds one Extended JSON document per line (mongoexport's
// format) or a JSON array of them; its name is the collection
// ("articles.json" -> -db's articles) or database and collection
// ("shop.items.json" -> shop.items). Everything lives in memory and is gone
// when devstack stops.
//
// While it runs, "go run ./internal/devstack insert|update|delete ..."
// changes its MongoDB from another terminal (write.go).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// ready, when set (by the test), receives the servers once they run.
var ready func(mongo *mongotest.Server, meili *meilitest.Server)

// run starts both servers, prints how to reach them and waits for ctx.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && writeCommands[args[0]] {
		return runWrite(ctx, args[0], args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mongoAddr := fs.String("mongo-addr", "127.0.0.1:27017", "address of the MongoDB test server")
	meiliAddr := fs.String("meili-addr", "127.0.0.1:7700", "address of the Meilisearch test server")
	masterKey := fs.String("master-key", "", "Meilisearch master key (none: every route is open)")
	db := fs.String("db", "app", "database named in the printed MEILISTREAM_MONGODB_URI, and of -seed files without one")
	seed := fs.String("seed", "", "directory of Extended JSON files to load into MongoDB (see the package doc)")
	history := fs.Int("history", mongotest.DefaultHistorySize, "changes kept for change streams (the oplog window, in changes)")
	maxPayload := fs.Int64("max-payload", meilitest.DefaultMaxPayloadBytes, "largest Meilisearch request body in bytes (--http-payload-size-limit)")
	proxyLimit := fs.Int64("proxy-body-limit", 0, "largest request body a proxy in front of Meilisearch lets through, in bytes (0: no proxy)")
	standalone := fs.Bool("standalone", false, "run MongoDB as a standalone mongod (no replica set, no change streams)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *history < 1 {
		return fmt.Errorf("-history %d: keep at least one change", *history)
	}
	if *maxPayload < 1 {
		return fmt.Errorf("-max-payload %d: must be a positive number of bytes", *maxPayload)
	}
	if *proxyLimit < 0 {
		return fmt.Errorf("-proxy-body-limit %d: must be 0 (no proxy) or a number of bytes", *proxyLimit)
	}

	mg, err := mongotest.Start(mongotest.Options{Addr: *mongoAddr, HistorySize: *history, Standalone: *standalone})
	if err != nil {
		return fmt.Errorf("start mongotest: %w", err)
	}
	defer mg.Close()
	ml, err := meilitest.Start(meilitest.Options{Addr: *meiliAddr, MasterKey: *masterKey, MaxPayloadBytes: *maxPayload, ProxyBodyLimit: *proxyLimit})
	if err != nil {
		return fmt.Errorf("start meilitest: %w", err)
	}
	defer ml.Close()

	if *seed != "" {
		if err := seedDir(ctx, mg.URI(), *db, *seed, stdout); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	uri := withDatabase(mg.URI(), *db)
	if *standalone {
		fmt.Fprintf(stdout, "mongotest:  %s (standalone: no change streams)\n", mg.URI())
	} else {
		fmt.Fprintf(stdout, "mongotest:  %s (replica set %s)\n", mg.URI(), mongotest.ReplicaSetName)
	}
	fmt.Fprintf(stdout, "meilitest:  %s\n", ml.URL())
	fmt.Fprintf(stdout, "# for meilistream:\n")
	fmt.Fprintf(stdout, "export MEILISTREAM_MONGODB_URI=%s\n", shellQuote(uri))
	fmt.Fprintf(stdout, "export MEILISTREAM_MEILI_URL=%s\n", shellQuote(ml.URL()))
	if *masterKey != "" {
		fmt.Fprintf(stdout, "export MEILISTREAM_MEILI_API_KEY=%s\n", shellQuote(*masterKey))
	}
	// Mirror jobs (examples/transforms/people.js) need a replica: the same
	// server, another database.
	fmt.Fprintf(stdout, "export MEILISTREAM_REPLICA_URI=%s\n", shellQuote(withDatabase(mg.URI(), *db+"_replica")))
	fmt.Fprintf(stdout, "# running; stop with Ctrl-C\n")
	if ready != nil {
		ready(mg, ml)
	}
	<-ctx.Done()
	fmt.Fprintf(stdout, "# stopping\n")
	return nil
}

// withDatabase puts db in the path of a mongodb:// URI.
func withDatabase(uri, db string) string {
	if db == "" {
		return uri
	}
	if i := strings.Index(uri, "/?"); i >= 0 {
		return uri[:i] + "/" + db + uri[i+1:]
	}
	return strings.TrimSuffix(uri, "/") + "/" + db
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// seedDir loads the files of dir into MongoDB through the driver.
func seedDir(ctx context.Context, uri, defaultDB, dir string, stdout io.Writer) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".json") || strings.HasSuffix(e.Name(), ".ndjson")) {
			files = append(files, e.Name())
		}
	}
	slices.Sort(files)
	if len(files) == 0 {
		return fmt.Errorf("no *.json or *.ndjson file in %s", dir)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, name := range files {
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".json"), ".ndjson")
		dbName, coll := defaultDB, base
		if d, c, ok := strings.Cut(base, "."); ok {
			dbName, coll = d, c
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		docs, err := parseExtJSON(data)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(docs) > 0 {
			if _, err := client.Database(dbName).Collection(coll).InsertMany(ctx, docs); err != nil {
				return fmt.Errorf("%s: insert into %s.%s: %w", name, dbName, coll, err)
			}
		}
		fmt.Fprintf(stdout, "seeded %s.%s with %d documents from %s\n", dbName, coll, len(docs), name)
	}
	return nil
}

// parseExtJSON reads a JSON array of Extended JSON documents, or one
// document per line.
func parseExtJSON(data []byte) ([]any, error) {
	data = bytes.TrimSpace(data)
	var raws []json.RawMessage
	if bytes.HasPrefix(data, []byte("[")) {
		if err := json.Unmarshal(data, &raws); err != nil {
			return nil, err
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				raws = append(raws, json.RawMessage(bytes.Clone(line)))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	docs := make([]any, 0, len(raws))
	for i, raw := range raws {
		var d bson.D
		if err := bson.UnmarshalExtJSON(raw, false, &d); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		docs = append(docs, d)
	}
	return docs, nil
}
