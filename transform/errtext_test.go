package transform_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/transform"
)

// Text cut for an error or a log line is cut between characters, never
// inside one, and stays short.
func TestCutTextStaysValidUTF8(t *testing.T) {
	long := strings.Repeat("é", 3000)
	_, err := apply(t, loadJob(t, `module.exports = { transform(doc) { return { [doc.k]: NaN }; } };`), bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	wantErr(t, err, errs.NotADocument, "NaN")
	if !utf8.ValidString(err.Error()) || len(err.Error()) > 600 {
		t.Fatalf("%d bytes, valid %v", len(err.Error()), utf8.ValidString(err.Error()))
	}
	_, err = apply(t, loadJob(t, `module.exports = { transform(doc) { throw new Error("x" + doc.k); } };`), bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	wantErr(t, err, errs.TransformFailed)
	if !utf8.ValidString(err.Error()) || len(err.Error()) > 1300 {
		t.Fatalf("%d bytes, valid %v", len(err.Error()), utf8.ValidString(err.Error()))
	}
	var logs testutil.SyncBuffer
	j := loadJob(t, `module.exports = { transform(doc) { console.log("x" + doc.k); console.log({k: doc.k}); return {}; } };`,
		transform.Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, JSONFormat: true})})
	mustApply(t, j, bson.D{{Key: "_id", Value: 1}, {Key: "k", Value: long}})
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		msg, _ := m["@message"].(string)
		if strings.ContainsRune(msg, utf8.RuneError) || len(msg) > 4200 || !strings.HasSuffix(msg, "…") {
			t.Fatalf("line of %d bytes: %q", len(msg), msg[len(msg)-10:])
		}
	}
}
