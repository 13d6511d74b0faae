package scripttest

// Custom testscript commands of the read-your-writes scenarios (wait_*).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func init() {
	Cmds["read-your-writes"] = cmdReadYourWrites
	Cmds["mongo-optime"] = cmdMongoOptime
}

// scriptWrite sets the title of document id of coll to title with the
// real driver, in an explicit session, and returns the write's
// operationTime: what an application has after its write.
func scriptWrite(ctx context.Context, coll *mongo.Collection, id int, title string) (bson.Timestamp, error) {
	sess, err := coll.Database().Client().StartSession()
	if err != nil {
		return bson.Timestamp{}, err
	}
	defer sess.EndSession(ctx)
	err = mongo.WithSession(ctx, sess, func(ctx context.Context) error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: title}}}}, options.UpdateOne().SetUpsert(true))
		return err
	})
	if err != nil {
		return bson.Timestamp{}, err
	}
	if sess.OperationTime() == nil {
		return bson.Timestamp{}, fmt.Errorf("the write's reply has no operationTime")
	}
	return *sess.OperationTime(), nil
}

// cmdMongoOptime: mongo-optime NAME COLL ID TITLE sets the title of
// document ID of COLL and stores the write's operationTime, as S.I, in
// $NAME.
func cmdMongoOptime(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: mongo-optime NAME COLL ID TITLE")
	}
	var id int
	_, err := fmt.Sscan(args[2], &id)
	ts.Check(err)
	ctx, cancel := cmdCtx()
	defer cancel()
	op, err := scriptWrite(ctx, collIn(scriptMongo(ts), args[1]), id, args[3])
	ts.Check(err)
	ts.Setenv(args[0], fmt.Sprintf("%d.%d", op.T, op.I))
}

// readyAddr is the address a sidecar wrote to its ready file.
func readyAddr(ts *testscript.TestScript, file string) string {
	b, err := os.ReadFile(ts.MkAbs(file))
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		ts.Fatalf("no address in %s (waitfile first): %v", file, err)
	}
	return strings.TrimSpace(string(b))
}

// cmdReadYourWrites: read-your-writes [-n N] [-timeout D] READY_A READY_B
// JOB COLL makes N writes, one at a time, each a new title (a word found
// nowhere else) of document 1 of COLL with its operationTime, then a GET
// /wait for it on sidecar A (the even ones) or B (the odd ones), then, at
// once, a search of JOB's index for the new title, which must find
// document 1: it prints how many of N did, and fails unless all of them,
// and every wait, answered 200.
func cmdReadYourWrites(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("read-your-writes", flag.ContinueOnError)
	n := fs.Int("n", 200, "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 4 {
		ts.Fatalf("usage: read-your-writes [-n N] [-timeout D] READY_A READY_B JOB COLL")
	}
	addrs := [2]string{readyAddr(ts, fs.Arg(0)), readyAddr(ts, fs.Arg(1))}
	job, coll := fs.Arg(2), scriptMongo(ts).Collection(fs.Arg(3))
	index := scriptMeili(ts).Index(ts.Getenv("MEILISTREAM_INDEX_PREFIX") + loadScriptJob(ts, job).Index)
	client := &http.Client{Timeout: *timeout + 5*time.Second}
	found := 0
	var waits [2][]time.Duration
	var misses []string
	for i := 0; i < *n; i++ {
		ctx, cancel := cmdCtx()
		title := fmt.Sprintf("rw%dx%08x", i, rand.Uint32())
		op, err := scriptWrite(ctx, coll, 1, title)
		ts.Check(err)
		start := time.Now()
		u := fmt.Sprintf("http://%s/wait?job=%s&after=%d.%d&timeout=%s", addrs[i%2], url.QueryEscape(job), op.T, op.I, *timeout)
		status, body, err := get(client, u)
		waits[i%2] = append(waits[i%2], time.Since(start))
		if err != nil || status != http.StatusOK {
			cancel()
			ts.Fatalf("write %d: GET /wait on sidecar %c: status %d, %v: %s", i, 'A'+i%2, status, err, truncate(body, 300))
		}
		var a struct{ Durable string }
		if err := json.Unmarshal(body, &a); err != nil || a.Durable == "" {
			ts.Fatalf("write %d: GET /wait answered %s", i, body)
		}
		res, err := index.Search(ctx, title, &meilisearch.SearchRequest{Limit: 5})
		cancel()
		ts.Check(err)
		hit := false
		for _, h := range res.Hits {
			var id, got any
			if raw, ok := h["id"]; ok {
				_ = json.Unmarshal(raw, &id)
			}
			if raw, ok := h["title"]; ok {
				_ = json.Unmarshal(raw, &got)
			}
			hit = hit || fmt.Sprint(id) == "1" && got == title
		}
		if hit {
			found++
		} else if len(misses) < 5 {
			misses = append(misses, fmt.Sprintf("write %d (%s, after %d.%d, durable %s on %c)", i, title, op.T, op.I, a.Durable, 'A'+i%2))
		}
	}
	fmt.Fprintf(ts.Stdout(), "%d of %d searchable right after /wait (p50 of the wait: A %s, B %s)\n",
		found, *n, p50(waits[0]), p50(waits[1]))
	if found != *n {
		ts.Fatalf("%d of %d writes not found by a search right after their /wait: %s", *n-found, *n, strings.Join(misses, "; "))
	}
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2].Round(time.Millisecond)
}
