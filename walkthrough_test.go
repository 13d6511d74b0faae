package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// TestTheWalkthroughDoesWhatItSays runs README.md's walkthrough as written:
// its data (in a folder git ignores), its transform, the output `check`
// prints, the log lines `run` prints, the searches and what they find, the live change (as devstack's update makes it) and the
// transform edit of step 8, against the test servers, with the real
// `meilistream run`. A step whose promise the sidecar does not keep fails
// here, naming the step.
func TestTheWalkthroughDoesWhatItSays(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	walk := text[strings.Index(text, "## Walkthrough"):]
	walk = walk[:strings.Index(walk[3:], "\n## ")+3]
	grab := func(what, pattern string) []string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(walk)
		if m == nil {
			t.Fatalf("the walkthrough has no %s (%s)", what, pattern)
		}
		return m
	}
	data := grab("data", `(?s)cat > try/data/books.ndjson <<'EOF'\n(.*?)\nEOF`)[1]
	js := grab("transform", "(?s)\\*\\*3\\.\\*\\*.*?```js\n(.*?)```")[1]
	checkOut := grab("check output", `\$ \./meilistream check try/transforms\n(.*)\n`)[1]
	logLines := strings.Split(grab("step 5's log", "(?s)\\*\\*5\\.\\*\\*.*?```\n\\$ [^\n]*\n(.*?)\n```")[1], "\n")
	update := grab("live change", "`go run ./internal/devstack update (\\w+) '(.+?)' '(.+?)'`")
	newBody := grab("new transform body", "(?s)\\*\\*8\\.\\*\\*.*?with `(return \\{.*?\\};)` and save")[1]
	newBody = strings.Join(strings.Fields(newBody), " ")

	// Step 1's files, made in the clone, stay out of git.
	if ignore, err := os.ReadFile(".gitignore"); err != nil || !regexp.MustCompile(`(?m)^/?try/?$`).Match(ignore) {
		t.Errorf("step 1: .gitignore does not ignore try/ (%v)", err)
	}

	mg, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()
	ml, err := meilitest.Start(meilitest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(mg.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	books := client.Database("app").Collection("books")
	for _, line := range strings.Split(data, "\n") {
		var d bson.D
		if err := bson.UnmarshalExtJSON([]byte(line), false, &d); err != nil {
			t.Fatalf("step 1's data %q: %v", line, err)
		}
		if _, err := books.InsertOne(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	transforms := filepath.Join(dir, "transforms")
	if err := os.Mkdir(transforms, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(transforms, "books.js")
	if err := os.WriteFile(file, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}

	// Step 4: check prints what the README shows.
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"check", transforms}, nil, &out, &errOut); code != exitOK || !strings.Contains(out.String(), checkOut) {
		t.Fatalf("step 4: check exits %d and prints %q (%s), the README shows %q", code, out.String(), errOut.String(), checkOut)
	}

	// Step 5: run.
	ready := filepath.Join(dir, "ready")
	environ := []string{
		"MEILISTREAM_MONGODB_URI=" + strings.Replace(mg.URI(), "/?", "/app?", 1),
		"MEILISTREAM_MEILI_URL=" + ml.URL(),
		"MEILISTREAM_TRANSFORMS=" + transforms,
		"MEILISTREAM_HTTP_ADDR=127.0.0.1:0",
		"MEILISTREAM_READY_FILE=" + ready,
		"MEILISTREAM_LOG_FORMAT=text",
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var logs testutil.SyncBuffer
	go func() { done <- run(rctx, []string{"run"}, environ, &logs, &logs) }()
	defer func() {
		stop()
		if code := <-done; code != exitOK {
			t.Errorf("step 9: Ctrl-C ends the sidecar with exit %d, want 0\n%s", code, logs.String())
		}
	}()

	search := func(q string) []map[string]any {
		resp, err := http.Post(ml.URL()+"/indexes/books/search", "application/json", strings.NewReader(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var r struct{ Hits []map[string]any }
		if json.NewDecoder(resp.Body).Decode(&r) != nil {
			return nil
		}
		return r.Hits
	}
	until := func(step, q string, ok func([]map[string]any) bool) {
		t.Helper()
		var last []map[string]any
		testutil.Until(t, 60*time.Second, step, func() bool { last = search(q); return ok(last) },
			func() string { return fmt.Sprintf("search %s: %v\n%s", q, last, logs.String()) })
	}
	titles := func(hits []map[string]any) string {
		var ts []string
		for _, h := range hits {
			ts = append(ts, fmt.Sprint(h["title"]))
		}
		return strings.Join(ts, "|")
	}
	// Step 6: the search the README shows.
	until("step 6: the search finds The Left Hand of Darkness alone", `{"q":"le guin"}`, func(h []map[string]any) bool {
		return titles(h) == "The Left Hand of Darkness" && h[0]["id"] == float64(1)
	})
	// Step 5: the log shows the lines the README shows, after their time
	// ("..." stands for what varies), by now; no time in it is year one.
	for _, line := range logLines {
		re := regexp.MustCompile(`(?m)^(?:\S+ )?` + strings.ReplaceAll(regexp.QuoteMeta(line), regexp.QuoteMeta("..."), ".*") + `$`)
		if !re.MatchString(logs.String()) {
			t.Errorf("step 5: the log has no line like %q\n%s", line, logs.String())
		}
	}
	if strings.Contains(logs.String(), "0001-01-01") {
		t.Errorf("step 5: the log prints year one\n%s", logs.String())
	}
	// Step 7: the live change, as devstack's update makes it.
	var filter, change bson.D
	if bson.UnmarshalExtJSON([]byte(update[2]), false, &filter) != nil || bson.UnmarshalExtJSON([]byte(update[3]), false, &change) != nil {
		t.Fatalf("step 7's update is not Extended JSON: %q %q", update[2], update[3])
	}
	if res, err := client.Database("app").Collection(update[1]).UpdateOne(ctx, filter, change); err != nil || res.MatchedCount != 1 {
		t.Fatalf("step 7: update: %v, %+v", err, res)
	}
	until("step 7: Dune is gone from the index", `{"q":"dune"}`, func(h []map[string]any) bool { return len(h) == 0 })
	// Step 8: the body's two lines replaced.
	body := regexp.MustCompile(`(?s)\n\s*if \(doc\.stock === 0\).*?\n\s*return \{.*?\};`).ReplaceAllString(js, "\n    "+newBody)
	if body == js {
		t.Fatalf("step 8: no if-and-return body to replace in %s", js)
	}
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	until("step 8: the filtered search finds A Wizard of Earthsea, not in stock", `{"q":"le guin","filter":"year < 1969"}`, func(h []map[string]any) bool {
		return titles(h) == "A Wizard of Earthsea" && h[0]["inStock"] == false
	})
}
