package jobstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// indexKeys lists the key patterns of coll's indexes, as relaxed JSON.
func indexKeys(t *testing.T, ctx context.Context, coll *mongo.Collection) []string {
	t.Helper()
	cur, err := coll.Indexes().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for cur.Next(ctx) {
		out = append(out, cur.Current.Lookup("key").String())
	}
	return out
}

func TestEnsureErrorIndexCreatesItOnceAndToleratesWhatServesAsWell(t *testing.T) {
	ctx := testutil.Context(t, 30*time.Second)
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	errColl := client.Database("app").Collection("meilistream_errors")
	s := New(client.Database("app").Collection("meilistream"), errColl, nil)
	for range 2 { // the second start finds it there
		if err := s.EnsureErrorIndex(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"job": {"$numberInt":"1"},"at": {"$numberInt":"-1"},"_id": {"$numberInt":"-1"}}`
	keys := indexKeys(t, ctx, errColl)
	if len(keys) != 2 || strings.ReplaceAll(keys[1], " ", "") != strings.ReplaceAll(want, " ", "") {
		t.Fatalf("indexes %v, want _id's and %s", keys, want)
	}

	// An operator created the same keys under another name first.
	other := client.Database("app").Collection("other_errors")
	if _, err := other.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ErrorIndexKeys, Options: options.Index().SetName("by_job")}); err != nil {
		t.Fatal(err)
	}
	if err := New(nil, other, nil).EnsureErrorIndex(ctx); err != nil {
		t.Fatalf("the same keys under another name: %v", err)
	}

	// A user without createIndex: a FAILED error wrapping ErrNoErrorIndex
	// that says what to do.
	srv.FailCommand(bson.D{{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"createIndexes"}}, {Key: "errorCode", Value: 13}}}})
	defer srv.FailCommand(bson.D{{Key: "mode", Value: "off"}, {Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"createIndexes"}}}}})
	err := New(nil, client.Database("app").Collection("third_errors"), nil).EnsureErrorIndex(ctx)
	if !errors.Is(err, ErrNoErrorIndex) || errs.CodeOf(err) != errs.Failed || !strings.Contains(err.Error(), "createIndex") {
		t.Fatalf("without the privilege: %v", err)
	}
}

// servedBy says whether an index with keys serves a find of filter in the
// order of sort without a blocking sort and without reading records of
// other jobs: each branch of a top-level $or (or the filter itself) names
// only index keys, equalities on a prefix and then at most one range, and
// the sort is the index's order (or its reverse) once the branch's
// equalities are left out. It is how mongod's planner picks an index
// scan (and a MERGE_SORT of such scans for an $or); the test server uses
// no secondary index, so the shape is what is tested here.
func servedBy(filter, sort, keys bson.D) error {
	branches := []bson.D{filter}
	if len(filter) == 1 && filter[0].Key == "$or" {
		branches = nil
		for _, b := range filter[0].Value.(bson.A) {
			branches = append(branches, b.(bson.D))
		}
	}
	for _, b := range branches {
		fields := map[string]any{}
		for _, e := range b {
			fields[e.Key] = e.Value
		}
		eq := map[string]bool{}
		ranged := false
		for _, k := range keys {
			v, ok := fields[k.Key]
			if !ok {
				break
			}
			delete(fields, k.Key)
			if d, isOp := v.(bson.D); isOp && len(d) > 0 && strings.HasPrefix(d[0].Key, "$") {
				ranged = true
				break
			}
			eq[k.Key] = true
		}
		if len(fields) > 0 {
			return fmt.Errorf("branch %v: fields outside the index's usable prefix: %v", b, fields)
		}
		if !eq[keys[0].Key] {
			return fmt.Errorf("branch %v: no equality on %s: the scan reads other jobs' records", b, keys[0].Key)
		}
		_ = ranged
		var rest, order bson.D
		for _, k := range keys {
			if !eq[k.Key] {
				rest = append(rest, k)
			}
		}
		for _, k := range sort {
			if !eq[k.Key] {
				order = append(order, k)
			}
		}
		if len(order) > len(rest) {
			return fmt.Errorf("branch %v: sort %v longer than the index's rest %v", b, sort, rest)
		}
		same, reversed := true, true
		for i, k := range order {
			d, _ := k.Value.(int32)
			if rest[i].Key != k.Key {
				return fmt.Errorf("branch %v: sort %v is not the index's order %v", b, sort, rest)
			}
			r := int32(rest[i].Value.(int))
			same = same && d == r
			reversed = reversed && d == -r
		}
		if !same && !reversed {
			return fmt.Errorf("branch %v: sort %v mixes the index's directions %v", b, sort, rest)
		}
	}
	return nil
}

// commandLog keeps the finds a client sends to the errors collection.
type commandLog struct {
	mu    sync.Mutex
	finds []bson.Raw
}

func (c *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" {
			c.mu.Lock()
			c.finds = append(c.finds, append(bson.Raw(nil), e.Command...))
			c.mu.Unlock()
		}
	}}
}

func (c *commandLog) take() []bson.Raw {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.finds
	c.finds = nil
	return out
}

// `meilistream errors` over 100,000 records of one job (and others of
// another): pages hold the records newest first, ties on the time broken by
// _id, each once, wherever a page starts (inside a run of equal times, at
// the end); and every query is a range of the errors index in its order,
// so a page reads about one page of index keys on MongoDB however many
// records the job has. The test server scans for every query (it uses no
// secondary index), so pages are checked at sampled places rather than all
// hundred.
func TestErrorPagesOverAHundredThousandRecordsAreCorrectAndIndexed(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 records")
	}
	ctx := testutil.Context(t, 5*time.Minute)
	log := &commandLog{}
	_, client := testutil.StartMongo(t, mongotest.Options{}, options.Client().SetMonitor(log.monitor()))
	errColl := client.Database("app").Collection("meilistream_errors")
	s := New(client.Database("app").Collection("meilistream"), errColl, nil)
	if err := s.EnsureErrorIndex(ctx); err != nil {
		t.Fatal(err)
	}
	const n, times = 100_000, 250
	base := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	// 250 distinct times: pages end inside runs of equal times.
	at := func(i int64) time.Time { return base.Add(time.Duration(i%times) * time.Millisecond) }
	batch := make([]any, 0, 10_000)
	for i := range int64(n + 5_000) {
		job := "books"
		if i >= n {
			job = "films"
		}
		batch = append(batch, bson.D{
			{Key: "_id", Value: bson.D{{Key: "job", Value: job}, {Key: "id", Value: i}}},
			{Key: "job", Value: job}, {Key: "sourceId", Value: i}, {Key: "code", Value: "TRANSFORM_FAILED"},
			{Key: "message", Value: "boom"}, {Key: "at", Value: at(i)}, {Key: "attempts", Value: int64(1)},
		})
		if len(batch) == cap(batch) {
			if _, err := errColl.InsertMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// The order pages must follow: time descending, then _id ({job, id})
	// descending, which for one job is id descending.
	want := make([]int64, 0, n)
	for r := int64(times - 1); r >= 0; r-- {
		top := int64(n-1) - (int64(n-1)-r+times)%times // the largest id with this time
		for i := top; i >= 0; i -= times {
			want = append(want, i)
		}
	}
	cursorAfter := func(pos int) string {
		id := want[pos]
		_, key, _ := bson.MarshalValue(bson.D{{Key: "job", Value: "books"}, {Key: "id", Value: id}})
		return errorCursor{At: at(id), Key: bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: key}}.String()
	}
	log.take()

	check := func(from int, after string) DocErrorPage {
		t.Helper()
		page, err := ListDocErrors(ctx, errColl, "books", MaxDocErrorPage, after)
		if err != nil {
			t.Fatal(err)
		}
		end := min(from+MaxDocErrorPage, n)
		if len(page.Errors) != end-from {
			t.Fatalf("the page from %d holds %d records, want %d", from, len(page.Errors), end-from)
		}
		for k, e := range page.Errors {
			if got := e.SourceID.Int64(); got != want[from+k] || !e.At.Equal(at(got)) {
				t.Fatalf("the page from %d: record %d is %d at %v, want %d", from, k, got, e.At, want[from+k])
			}
		}
		if (page.Next == "") != (end == n) {
			t.Fatalf("the page from %d: next %q at record %d of %d", from, page.Next, end, n)
		}
		return page
	}
	// The first pages, each from the one before.
	after, pages := "", 0
	for from := 0; from < 3*MaxDocErrorPage; from += MaxDocErrorPage {
		after = check(from, after).Next
		pages++
	}
	// Pages starting anywhere: inside a run of equal times, at the start
	// of one, the last page, a page of one record.
	for _, pos := range []int{4321, 40_000 - 1, 50_000, 77_777, n - MaxDocErrorPage - 1, n - 2} {
		check(pos+1, cursorAfter(pos))
		pages++
	}
	if p := check(n, cursorAfter(n-1)); len(p.Errors) != 0 {
		t.Fatal("a page after the last record holds records")
	}
	pages++

	finds := log.take()
	if len(finds) != pages {
		t.Fatalf("%d finds for %d pages", len(finds), pages)
	}
	for i, f := range finds {
		var cmd struct {
			Filter bson.D `bson:"filter"`
			Sort   bson.D `bson:"sort"`
			Limit  int64  `bson:"limit"`
		}
		if err := bson.Unmarshal(f, &cmd); err != nil {
			t.Fatal(err)
		}
		if err := servedBy(cmd.Filter, cmd.Sort, ErrorIndexKeys); err != nil {
			t.Fatalf("page %d's find is not served by the errors index: %v", i+1, err)
		}
		if cmd.Limit != MaxDocErrorPage+1 {
			t.Fatalf("page %d's find has limit %d, want %d", i+1, cmd.Limit, MaxDocErrorPage+1)
		}
	}
	// A job start reads the job's ids: a range of the same index.
	ids, err := s.DocErrorIDs(ctx, "books")
	if err != nil || len(ids) != n {
		t.Fatalf("DocErrorIDs: %d ids, %v", len(ids), err)
	}
	for _, f := range log.take() {
		var cmd struct {
			Filter bson.D `bson:"filter"`
		}
		if err := bson.Unmarshal(f, &cmd); err != nil {
			t.Fatal(err)
		}
		if err := servedBy(cmd.Filter, nil, ErrorIndexKeys); err != nil {
			t.Fatalf("DocErrorIDs' find: %v", err)
		}
	}
}

// servedBy itself refuses the shapes that would scan or sort.
func TestServedByRefusesShapesThatScanOrSort(t *testing.T) {
	at := bson.D{{Key: "$lt", Value: time.Now()}}
	for name, f := range map[string]struct{ filter, sort bson.D }{
		"no equality on job":           {bson.D{{Key: "at", Value: at}}, ErrorPageSort},
		"a field outside the index":    {bson.D{{Key: "job", Value: "a"}, {Key: "code", Value: "X"}}, ErrorPageSort},
		"a sort the index cannot give": {bson.D{{Key: "job", Value: "a"}}, bson.D{{Key: "at", Value: -1}, {Key: "_id", Value: 1}}},
		"an $or beside the job":        {bson.D{{Key: "job", Value: "a"}, {Key: "$or", Value: bson.A{bson.D{{Key: "at", Value: at}}}}}, ErrorPageSort},
	} {
		if servedBy(f.filter, f.sort, ErrorIndexKeys) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
