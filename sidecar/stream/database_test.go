package stream_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/stream"
)

// A job reading the main database alone keeps a database stream; one
// whose collection or a lookup's is elsewhere needs a cluster-wide one, to
// see its watermarks in the main database's state collection in the same
// order as its collection.
func TestAJobBeyondTheMainDatabaseNeedsAClusterStream(t *testing.T) {
	own := &jobdef.Job{Name: "a", Database: "app", Collection: "a"}
	unresolved := &jobdef.Job{Name: "a", Collection: "a"}
	moved := &jobdef.Job{Name: "a", Database: "shop", Collection: "a"}
	looksAway := &jobdef.Job{Name: "a", Database: "app", Collection: "a",
		Lookups: []jobdef.Lookup{{Name: "u", Database: "crm", From: "users", LocalField: "u", ForeignField: "_id"}}}
	for _, c := range []struct {
		job  *jobdef.Job
		want bool
	}{{own, false}, {unresolved, false}, {moved, true}, {looksAway, true}} {
		if got := stream.Cluster(c.job, "app"); got != c.want {
			t.Errorf("%+v: cluster %v, want %v", c.job, got, c.want)
		}
	}
}

// A cluster-wide stream passes the job's namespaces only: its collection in
// its database, its watermarks in the main database, its lookups'
// collections in theirs; the same names in other databases, and other
// databases' drops, never.
func TestAClusterStreamPassesTheJobsNamespacesOnly(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	_, client := testutil.StartMongo(t, mongotest.Options{})
	main := client.Database("app")
	job := &jobdef.Job{Name: "orders", Database: "shop", Collection: "orders", Fields: []string{"a"},
		Lookups: []jobdef.Lookup{{Name: "u", Database: "crm", From: "users", LocalField: "u", ForeignField: "_id"}}}
	cs, err := stream.Open(ctx, main, job, "meilistream", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	ins := func(db, coll string, d bson.D) {
		t.Helper()
		if _, err := client.Database(db).Collection(coll).InsertOne(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	ins("app", "orders", bson.D{{Key: "_id", Value: 1}})                                                 // another database's orders
	ins("shop", "orders", bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}, {Key: "b", Value: 2}})    // trimmed to a
	ins("shop", "meilistream", bson.D{{Key: "_id", Value: bson.D{{Key: "watermark", Value: "orders"}}}}) // not the state collection
	ins("app", "meilistream", bson.D{{Key: "_id", Value: bson.D{{Key: "watermark", Value: "orders"}}}})  // the job's watermark
	ins("app", "meilistream", bson.D{{Key: "_id", Value: bson.D{{Key: "watermark", Value: "other"}}}})   // another job's
	ins("crm", "users", bson.D{{Key: "_id", Value: 7}})                                                  // a lookup's
	ins("app", "users", bson.D{{Key: "_id", Value: 7}})                                                  // not the lookup's
	ins("elsewhere", "x", bson.D{{Key: "_id", Value: 1}})                                                // to drop
	if err := client.Database("elsewhere").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	ins("shop", "orders", bson.D{{Key: "_id", Value: 99}})
	var got []string
	for cs.Next(ctx) {
		db, _ := cs.Current.Lookup("ns", "db").StringValueOK()
		coll, _ := cs.Current.Lookup("ns", "coll").StringValueOK()
		op, _ := cs.Current.Lookup("operationType").StringValueOK()
		s := db + "." + coll + " " + op
		if full, err := cs.Current.LookupErr("fullDocument"); err == nil {
			s += " " + full.String()
		}
		if id, ok := cs.Current.Lookup("documentKey", "_id").AsInt64OK(); ok && id == 99 {
			break
		}
		got = append(got, s)
	}
	want := []string{
		`shop.orders insert {"_id": {"$numberInt":"1"},"a": {"$numberInt":"1"}}`,
		`app.meilistream insert {"_id": {"watermark": "orders"}}`,
		`crm.users insert {"_id": {"$numberInt":"7"}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s (err %v)", strings.Join(got, "\n"), strings.Join(want, "\n"), cs.Err())
	}
}
