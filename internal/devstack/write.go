package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// writeCommands are devstack's client subcommands: they change the MongoDB
// of a devstack that already runs, so a walkthrough can show a live change
// on a machine with no mongo shell.
//
//	go run ./internal/devstack insert COLLECTION '{"_id": 1, "title": "Dune"}'
//	go run ./internal/devstack update COLLECTION '{"_id": 1}' '{"$set": {"stock": 3}}'
//	go run ./internal/devstack delete COLLECTION '{"_id": 1}'
//
// Documents, filters and updates are MongoDB Extended JSON (relaxed or
// canonical). -db picks the database (default app), -mongo-uri the server
// (default the devstack's own, 127.0.0.1:27017). update and delete change
// one document, and fail when the filter matches none.
var writeCommands = map[string]bool{"insert": true, "update": true, "delete": true}

// runWrite runs one of writeCommands against a running devstack.
func runWrite(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devstack "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	uri := fs.String("mongo-uri", "mongodb://127.0.0.1:27017/?replicaSet=rs0", "the MongoDB to write to (a running devstack's)")
	db := fs.String("db", "app", "database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want := map[string]int{"insert": 2, "update": 3, "delete": 2}[verb]
	if fs.NArg() != want {
		return fmt.Errorf("%s: want %s, got %d arguments", verb, map[string]string{
			"insert": "COLLECTION DOCUMENT",
			"update": "COLLECTION FILTER UPDATE",
			"delete": "COLLECTION FILTER",
		}[verb], fs.NArg())
	}
	coll := fs.Arg(0)
	var parsed []bson.D
	for _, a := range fs.Args()[1:] {
		var d bson.D
		if err := bson.UnmarshalExtJSON([]byte(a), false, &d); err != nil {
			return fmt.Errorf("%s: %q is not an Extended JSON document: %w", verb, a, err)
		}
		parsed = append(parsed, d)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(*uri).SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	c := client.Database(*db).Collection(coll)
	ns := *db + "." + coll
	switch verb {
	case "insert":
		res, err := c.InsertOne(ctx, parsed[0])
		if err != nil {
			return fmt.Errorf("insert into %s (is devstack running?): %w", ns, err)
		}
		fmt.Fprintf(stdout, "inserted %s into %s\n", extJSON(res.InsertedID), ns)
	case "update":
		update := any(parsed[1])
		if len(parsed[1]) == 0 || !strings.HasPrefix(parsed[1][0].Key, "$") {
			return fmt.Errorf("update: %s is not an update document: its fields start with $ ($set, $unset, $inc...)", fs.Arg(2))
		}
		res, err := c.UpdateOne(ctx, parsed[0], update)
		if err != nil {
			return fmt.Errorf("update %s (is devstack running?): %w", ns, err)
		}
		if res.MatchedCount == 0 {
			return fmt.Errorf("update %s: no document matches %s", ns, fs.Arg(1))
		}
		fmt.Fprintf(stdout, "updated %d document in %s\n", res.ModifiedCount, ns)
	case "delete":
		res, err := c.DeleteOne(ctx, parsed[0])
		if err != nil {
			return fmt.Errorf("delete from %s (is devstack running?): %w", ns, err)
		}
		if res.DeletedCount == 0 {
			return fmt.Errorf("delete from %s: no document matches %s", ns, fs.Arg(1))
		}
		fmt.Fprintf(stdout, "deleted 1 document from %s\n", ns)
	}
	return nil
}

// extJSON prints a value as relaxed Extended JSON.
func extJSON(v any) string {
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimPrefix(string(b), `{"v":`)
	return strings.TrimSuffix(s, "}")
}
