package transform_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/transform"
)

// Where a job, its lookups and its relates read: the main database unless
// they name another, and db.collection split at the first dot only when
// no database is given beside it.
func TestAJobReadsTheDatabaseItNames(t *testing.T) {
	main := transform.Options{Database: "app"}
	cases := []struct {
		name, src      string
		ov             map[string]string
		db, collection string
	}{
		{"the main database by default", `module.exports = {};`, nil, "app", "job"},
		{"db.collection", `module.exports = { collection: "shop.orders" };`, nil, "shop", "orders"},
		{"db.collection with dots in the collection", `module.exports = { collection: "shop.orders.2024" };`, nil, "shop", "orders.2024"},
		{"database given: collection whole", `module.exports = { database: "shop", collection: "orders.2024" };`, nil, "shop", "orders.2024"},
		{"an override of the database", `module.exports = { collection: "orders" };`, map[string]string{"database": "shop"}, "shop", "orders"},
		{"an override of the collection as db.collection", `module.exports = {};`, map[string]string{"collection": "shop.orders"}, "shop", "orders"},
		{"an override of the database keeps a dotted collection whole", `module.exports = { collection: "a.b" };`, map[string]string{"database": "shop"}, "shop", "a.b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := main
			opts.Pool = 1
			if c.ov != nil {
				opts.Overrides = map[string]map[string]string{"job": c.ov}
			}
			j := loadJob(t, c.src, opts)
			if j.Database != c.db || j.Collection != c.collection {
				t.Fatalf("reads %s.%s, want %s.%s", j.Database, j.Collection, c.db, c.collection)
			}
		})
	}
}

// A lookup and a relate read the job's database unless they name another;
// a lookup names it with `database` or `from: "db.collection"`, a relate
// with monstache's db.collection namespace.
func TestLookupsAndRelatesReadTheDatabaseTheyName(t *testing.T) {
	j := loadJob(t, `module.exports = {
  collection: "shop.orders",
  lookups: {
    customer: { from: "customers", localField: "customerId", foreignField: "_id" },
    user: { from: "accounts.users", localField: "userId", foreignField: "_id" },
    tag: { database: "meta", from: "tags.v2", localField: "tagId", foreignField: "_id" },
  },
  relate: [{ namespace: "crm.notes", srcField: "orderId" }, { namespace: "coupons", srcField: "orderId" }],
};`, transform.Options{Database: "app", Pool: 1})
	got := []string{}
	for _, d := range j.Dependencies() {
		got = append(got, d.Database+"."+d.Collection)
	}
	want := "shop.customers accounts.users meta.tags.v2 crm.notes shop.coupons"
	if strings.Join(got, " ") != want {
		t.Fatalf("dependencies read %s, want %s", strings.Join(got, " "), want)
	}
}

// A name that is not a database, or a db.collection whose parts are not
// names, is CONFIG_INVALID naming the key or the variable.
func TestABadDatabaseIsConfigInvalidNamingTheOption(t *testing.T) {
	cases := []struct {
		name, src string
		ov        map[string]string
		says      string
	}{
		{"a database with a dot", `module.exports = { database: "a.b" };`, nil, `key "database": "a.b" is not a database name`},
		{"a database too long", `module.exports = { database: "` + strings.Repeat("d", 64) + `" };`, nil, `key "database"`},
		{"a db.collection with a space", `module.exports = { collection: "my db.orders" };`, nil, `key "collection": "my db.orders" is not db.collection`},
		{"a db.collection with no collection", `module.exports = { collection: "shop." };`, nil, `key "collection"`},
		{"an override", `module.exports = {};`, map[string]string{"collection": "my db.orders"}, `MEILISTREAM_JOB_JOB_COLLECTION: "my db.orders" is not db.collection`},
		{"an override of the database", `module.exports = {};`, map[string]string{"database": "a/b"}, `MEILISTREAM_JOB_JOB_DATABASE: "a/b" is not a database name`},
		{"a lookup's from", `module.exports = { lookups: { u: { from: "a b.users", localField: "u", foreignField: "_id" } } };`, nil, `lookup "u": from "a b.users" is not db.collection`},
		{"a lookup's database", `module.exports = { lookups: { u: { database: "", from: "users", localField: "u", foreignField: "_id" } } };`, nil, `"" is not a database name`},
		{"a relate's namespace", `module.exports = { relate: [{ namespace: "a b.notes" }] };`, nil, `relate 1: namespace "a b.notes"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := transform.Options{Database: "app", Pool: 1}
			if c.ov != nil {
				opts.Overrides = map[string]map[string]string{"job": c.ov}
			}
			_, err := transform.Load(writeFiles(t, map[string]string{"job.js": c.src}), opts)
			if errs.CodeOf(err) != errs.ConfigInvalid || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want CONFIG_INVALID saying %s", err, c.says)
			}
		})
	}
}

// Moving a job to another database changes its hash, so the move
// reindexes from the new database: by the file (its tokens) or by the
// override (the overrides are in the hash).
func TestMovingAJobToAnotherDatabaseChangesItsHash(t *testing.T) {
	src := `module.exports = { collection: "orders" };`
	base := loadJob(t, src, transform.Options{Database: "app", Pool: 1})
	moved := loadJob(t, src, transform.Options{Database: "app", Pool: 1, Overrides: map[string]map[string]string{"job": {"database": "shop"}}})
	byFile := loadJob(t, `module.exports = { collection: "shop.orders" };`, transform.Options{Database: "app", Pool: 1})
	if base.Hash == moved.Hash || base.Hash == byFile.Hash {
		t.Fatalf("hash unchanged by a move: %s, override %s, file %s", base.Hash, moved.Hash, byFile.Hash)
	}
	// A collection written with a dot read the main database's collection
	// of that whole name before jobs named databases: the same file, read
	// now as db.collection, is not the job its old position was recorded
	// for, by either hash.
	dotted := `module.exports = { collection: "shop.orders" };`
	sum := sha256.Sum256([]byte(dotted))
	if byFile.LegacyHash == hex.EncodeToString(sum[:]) {
		t.Fatal("a db.collection job takes a position recorded for its file's bytes as its own")
	}
	plain := loadJob(t, src, transform.Options{Database: "app", Pool: 1})
	sum = sha256.Sum256([]byte(src))
	if plain.LegacyHash != hex.EncodeToString(sum[:]) || plain.Hash != base.Hash {
		t.Fatal("a job of the main database changed its hashes")
	}
}

// Only the main database's state and errors collections are the
// sidecar's: the same names in another database are collections like any
// other.
func TestOnlyTheMainDatabasesStateCollectionsAreRefused(t *testing.T) {
	opts := transform.Options{Database: "app", Pool: 1, Private: private}
	for _, from := range []string{"meilistream", "app.meilistream"} {
		src := `module.exports = { collection: "shop.orders", lookups: { s: { from: "` + from + `", localField: "x", foreignField: "_id" } } };`
		_, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), opts)
		if from == "meilistream" {
			// The job's database is shop: shop.meilistream is not the sidecar's.
			if err != nil {
				t.Fatalf("from %s of a job on shop: %v", from, err)
			}
			continue
		}
		if errs.CodeOf(err) != errs.ConfigInvalid || !strings.Contains(err.Error(), "no job may read") {
			t.Fatalf("from %s: got %v, want CONFIG_INVALID", from, err)
		}
	}
	src := `module.exports = { relate: [{ namespace: "app.meilistream_errors" }] };`
	if _, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), opts); errs.CodeOf(err) != errs.ConfigInvalid {
		t.Fatalf("a relate on the main database's errors collection: %v", err)
	}
	src = `module.exports = { relate: [{ namespace: "shop.meilistream_errors" }] };`
	if _, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), opts); err != nil {
		t.Fatalf("a relate on another database's collection of that name: %v", err)
	}
}

// Two mirror jobs of two databases' collections of one name write two
// replica collections by default (each its job's name); made to write one,
// neither runs: the replica database is one, whatever the sources are.
func TestMirrorsOfTwoDatabasesWritingOneCollectionAreRefused(t *testing.T) {
	opts := transform.Options{Database: "app", Pool: 1}
	set, err := transform.Load(writeFiles(t, map[string]string{
		"shop_users.js": `module.exports = { collection: "shop.users", mirror: "shop_users" };`,
		"crm_users.js":  `module.exports = { collection: "crm.users", mirror: "crm_users" };`,
	}), opts)
	if err != nil || len(set.Jobs()) != 2 {
		t.Fatalf("two mirrors into two collections: %v", err)
	}
	set.Close()
	_, err = transform.Load(writeFiles(t, map[string]string{
		"shop_users.js": `module.exports = { collection: "shop.users", mirror: "users" };`,
		"crm_users.js":  `module.exports = { collection: "crm.users", mirror: "users" };`,
	}), opts)
	if errs.CodeOf(err) != errs.ConfigInvalid || !strings.Contains(err.Error(), `"users" is also written by job`) {
		t.Fatalf("two mirrors into one collection: %v", err)
	}
}
