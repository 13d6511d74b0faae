// Command demo runs meilistream on the example transforms in one step, with
// no infrastructure:
//
//	go run ./examples/demo
//
// It starts the project's test servers in this process (internal/mongotest
// as the source and as a replica, internal/meilitest as Meilisearch), seeds
// the example collections (a thousand generated articles plus every
// example's `samples` and `related` documents), builds and runs the real
// meilistream binary on examples/transforms, waits until every job
// follows, makes a live write and a change to a looked-up document, and
// prints what searches find and /status. Then it stops the sidecar with
// SIGINT (a clean shutdown) and exits. It says what it is doing before each
// slow step: the first build compiles the sidecar's own dependencies, and a
// silent minute looks like a hang.
package main

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
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/bench/articles"
	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/transform"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("articles", 1000, "generated articles to seed")
	verbose := flag.Bool("v", false, "show the sidecar's log (info level)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "meilistream-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// The servers.
	step("starting the test servers: a MongoDB source, a MongoDB replica, Meilisearch")
	source, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		return err
	}
	defer source.Close()
	replica, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		return err
	}
	defer replica.Close()
	meili, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		return err
	}
	defer meili.Close()
	step("MongoDB at %s, replica at %s, Meilisearch at %s", source.URI(), replica.URI(), meili.URL())

	// The example collections.
	mc, err := mongo.Connect(options.Client().ApplyURI(source.URI()))
	if err != nil {
		return err
	}
	defer mc.Disconnect(context.Background())
	db := mc.Database("demo")
	transforms := filepath.Join(root, "examples", "transforms")
	if err := seed(ctx, db, transforms, *n); err != nil {
		return err
	}

	// The real sidecar.
	bin := filepath.Join(tmp, "meilistream")
	step("building meilistream (go build; the first time it compiles what the demo did not need, about half a minute of CPU)")
	if err := buildSidecar(ctx, root, bin); err != nil {
		return err
	}
	ready := filepath.Join(tmp, "ready")
	level := "warn"
	if *verbose {
		level = "info"
	}
	sidecar := exec.Command(bin, "run")
	sidecar.Env = append(os.Environ(),
		"MEILISTREAM_MONGODB_URI="+source.URI(),
		"MEILISTREAM_MONGODB_DATABASE=demo",
		"MEILISTREAM_REPLICA_URI="+replica.URI(),
		"MEILISTREAM_REPLICA_DATABASE=demo_replica",
		"MEILISTREAM_MEILI_URL="+meili.URL(),
		"MEILISTREAM_TRANSFORMS="+transforms,
		"MEILISTREAM_HTTP_ADDR=127.0.0.1:0",
		"MEILISTREAM_READY_FILE="+ready,
		"MEILISTREAM_FLUSH_INTERVAL=100ms",
		"MEILISTREAM_LOG_FORMAT=text",
		"MEILISTREAM_LOG_LEVEL="+level,
	)
	sidecar.Stdout, sidecar.Stderr = os.Stderr, os.Stderr
	step("starting meilistream run on examples/transforms (MEILISTREAM_TRANSFORMS)")
	if err := sidecar.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- sidecar.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = sidecar.Process.Kill()
		}
	}()

	addr, err := waitReady(ctx, ready, exited)
	if err != nil {
		return err
	}
	step("serving on %s; waiting for every job to reindex and follow its change stream", addr)
	status, err := waitFollowing(ctx, addr, exited)
	if err != nil {
		return err
	}
	step("every job reindexed and follows the change stream")

	// A live write, followed into the index.
	step("inserting an article into MongoDB and searching Meilisearch until it is found")
	coll := db.Collection("articles")
	t0 := time.Now()
	_, err = coll.InsertOne(ctx, bson.D{
		{Key: "_id", Value: int64(1_000_000)},
		{Key: "title", Value: "Meilistream demo: a live write"},
		{Key: "body", Value: "Written to MongoDB while the sidecar runs; searchable a moment later."},
		{Key: "status", Value: "published"},
		{Key: "tags", Value: bson.A{"Demo", "live"}},
		{Key: "author", Value: bson.D{{Key: "name", Value: "You"}}},
		{Key: "publishedAt", Value: bson.NewDateTimeFromTime(time.Now())},
	})
	if err != nil {
		return err
	}
	ms := meilisearch.New(meili.URL())
	var res *meilisearch.SearchResponse
	for {
		res, err = ms.Index("articles").Search(ctx, "live write", &meilisearch.SearchRequest{
			Limit: 3, AttributesToRetrieve: []string{"id", "title", "tags", "author"},
		})
		if err == nil && len(res.Hits) > 0 {
			break
		}
		if err := pause(ctx, exited, 20*time.Millisecond); err != nil {
			return err
		}
		if time.Since(t0) > 30*time.Second {
			return fmt.Errorf("the live write did not become searchable in 30s (last error: %v)", err)
		}
	}
	step("inserted an article into MongoDB; searchable in Meilisearch after %s", time.Since(t0).Round(time.Millisecond))
	hits, _ := json.MarshalIndent(res.Hits, "  ", "  ")
	total := int64(0)
	if st, err := ms.Index("articles").GetStats(ctx, nil); err == nil {
		total = st.NumberOfDocuments
	}
	fmt.Printf("\nsearch the articles index (%d documents) for %q: %d hits\n  %s\n", total, "live write", len(res.Hits), hits)

	// A related change: the order joined with the product follows it.
	step("renaming product 2 (\"Gift card\") in MongoDB; its order, which looks it up, follows")
	t0 = time.Now()
	if _, err := db.Collection("products").UpdateOne(ctx, bson.D{{Key: "_id", Value: 2}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "Gift voucher"}}}}); err != nil {
		return err
	}
	for {
		res, err = ms.Index("orders").Search(ctx, "voucher", &meilisearch.SearchRequest{Limit: 3})
		if err == nil && len(res.Hits) > 0 {
			break
		}
		if err := pause(ctx, exited, 20*time.Millisecond); err != nil {
			return err
		}
		if time.Since(t0) > 30*time.Second {
			return fmt.Errorf("the renamed product did not reach its order in 30s (last error: %v)", err)
		}
	}
	step("the order's search document shows the new name after %s", time.Since(t0).Round(time.Millisecond))
	hits, _ = json.MarshalIndent(res.Hits, "  ", "  ")
	fmt.Printf("\nsearch the orders index for %q: %d hits\n  %s\n", "voucher", len(res.Hits), hits)

	if status, err = get(addr, "/status"); err != nil {
		return err
	}
	fmt.Printf("\nGET http://%s/status:\n%s\n", addr, indent(status))

	step("stopping the sidecar (SIGINT: flush, record, release)")
	_ = sidecar.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("sidecar exit: %w", err)
		}
	case <-time.After(30 * time.Second):
		return errors.New("the sidecar did not stop within 30s")
	}
	step("done. Next, your own job by hand: the walkthrough in README.md")
	step("(go run ./internal/devstack, a transform of your own, meilistream check, run, and a search with curl)")
	return nil
}

// buildSidecar builds the meilistream binary at bin, saying every 15s that
// it still builds: a cold build cache makes this the demo's slowest step.
func buildSidecar(ctx context.Context, root, bin string) error {
	t0 := time.Now()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Start(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- build.Wait() }()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("go build: %w", err)
			}
			step("built in %s", time.Since(t0).Round(100*time.Millisecond))
			return nil
		case <-tick.C:
			step("still building meilistream (%s so far)", time.Since(t0).Round(time.Second))
		}
	}
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "==> "+format+"\n", args...)
}

// seed loads the example collections: generated articles, and every example
// transform's samples into its collection.
func seed(ctx context.Context, db *mongo.Database, dir string, n int) error {
	step("seeding %d generated articles and the examples' samples", n)
	docs := make([]any, 0, n)
	for i := 1; i <= n; i++ {
		docs = append(docs, articles.Article(i))
	}
	if _, err := db.Collection("articles").InsertMany(ctx, docs); err != nil {
		return err
	}
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if set == nil {
		return err
	}
	counts := []string{fmt.Sprintf("articles: %d generated", n)}
	for _, j := range set.Jobs() {
		if len(j.Samples) == 0 {
			continue
		}
		docs := make([]any, len(j.Samples))
		for i, s := range j.Samples {
			docs[i] = s
		}
		if _, err := db.Collection(j.Collection).InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("seed %s: %w", j.Collection, err)
		}
		counts = append(counts, fmt.Sprintf("%s: %d samples", j.Collection, len(docs)))
	}
	// The documents the examples' lookups find, unless an example's
	// samples put them there already.
	for _, j := range set.Jobs() {
		for coll, rel := range j.Related {
			for _, d := range rel {
				_, err := db.Collection(coll).UpdateOne(ctx, bson.D{{Key: "_id", Value: d.Lookup("_id")}},
					bson.D{{Key: "$setOnInsert", Value: d}}, options.UpdateOne().SetUpsert(true))
				if err != nil {
					return fmt.Errorf("seed %s: %w", coll, err)
				}
			}
		}
	}
	step("seeded %s", strings.Join(counts, ", "))
	return nil
}

func waitReady(ctx context.Context, ready string, exited chan error) (string, error) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if b, err := os.ReadFile(ready); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return strings.TrimSpace(string(b)), nil
		}
		if err := pause(ctx, exited, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
	return "", errors.New("the sidecar did not start serving within 30s")
}

// waitFollowing polls /status until every job follows, printing the jobs'
// states (with a reindex's progress) whenever they change, at most once a
// second.
func waitFollowing(ctx context.Context, addr string, exited chan error) ([]byte, error) {
	var (
		last      []byte
		shownAt   time.Time
		lastShown string
	)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		b, err := get(addr, "/status")
		if err == nil {
			last = b
			var st struct {
				Jobs []struct {
					Name, State string
					Reindex     *struct {
						Done          int64 `json:"done"`
						TotalEstimate int64 `json:"total_estimate"`
					} `json:"reindex"`
				} `json:"jobs"`
			}
			if json.Unmarshal(b, &st) == nil && len(st.Jobs) > 0 {
				all := true
				parts := make([]string, 0, len(st.Jobs))
				for _, j := range st.Jobs {
					all = all && j.State == "following"
					p := j.Name + " " + j.State
					switch {
					case j.Reindex != nil && j.Reindex.TotalEstimate > 0:
						p += fmt.Sprintf(" (%d of ~%d documents)", j.Reindex.Done, j.Reindex.TotalEstimate)
					case j.Reindex != nil:
						p += fmt.Sprintf(" (%d documents)", j.Reindex.Done)
					}
					parts = append(parts, p)
				}
				shown := strings.Join(parts, ", ")
				if shown != lastShown && (time.Since(shownAt) >= time.Second || all) {
					step("jobs: %s", shown)
					lastShown, shownAt = shown, time.Now()
				}
				if all {
					return b, nil
				}
			}
		}
		if err := pause(ctx, exited, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("not every job follows after 60s; /status: %s", last)
}

func pause(ctx context.Context, exited chan error, d time.Duration) error {
	select {
	case err := <-exited:
		exited <- err
		return fmt.Errorf("the sidecar exited: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func get(addr, path string) ([]byte, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func indent(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

// moduleRoot is the directory of go.mod (the demo builds the sidecar there).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the demo from the meilistream repository: go run ./examples/demo")
	}
	return filepath.Dir(gomod), nil
}
