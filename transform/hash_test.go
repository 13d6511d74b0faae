package transform_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// hashOf loads src as job.js and returns its Hash.
func hashOf(t *testing.T, src string) string {
	t.Helper()
	return loadJob(t, src).Hash
}

const hashBase = `// users: what the search shows of a user
module.exports = {
  index: "users",
  transform(doc) {
    const re = /^[a-z]+\/\/x$/i; // a regular expression holding "//"
    const n = doc.n / 2 / 3;     /* two divisions */
    return {
      name: doc.name,
      tag: ` + "`user-${doc.name + \"}\"}-${ {a: 1}.a }`" + `,
      ok: re.test(doc.name),
      n: n,
      café: "é",
    };
  },
};
`

func TestTheHashIgnoresCommentsAndWhitespace(t *testing.T) {
	base := hashOf(t, hashBase)
	edits := map[string]string{
		"a comment edited":                           strings.Replace(hashBase, "what the search shows", "what search shows", 1),
		"a comment removed":                          strings.Replace(hashBase, "// a regular expression holding \"//\"", "", 1),
		"a block comment edited":                     strings.Replace(hashBase, "/* two divisions */", "/* 2 divisions, n/6 */", 1),
		"a comment added":                            strings.Replace(hashBase, "ok: re", "ok: /* tested */ re", 1),
		"indentation changed":                        strings.ReplaceAll(hashBase, "  ", "\t"),
		"spaces added and removed":                   strings.Replace(strings.Replace(hashBase, "doc.n / 2", "doc.n/2", 1), "name: doc.name,", "name :  doc.name ,", 1),
		"blank lines added":                          strings.Replace(hashBase, "\n", "\n\n\n", -1),
		"trailing spaces":                            strings.ReplaceAll(hashBase, ",\n", ",   \n"),
		"CRLF line ends":                             strings.ReplaceAll(hashBase, "\n", "\r\n"),
		"a line break becomes a comment holding one": strings.Replace(hashBase, "{\n      name", "{/*\n*/name", 1),
		"a comment in a substitution":                strings.Replace(hashBase, "${ {a: 1}.a }", "${ /* one */ {a: 1}.a }", 1),
	}
	for name, src := range edits {
		if src == hashBase {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if got := hashOf(t, src); got != base {
			t.Errorf("%s: the hash changed", name)
		}
	}
}

func TestAnyTokenChangeChangesTheHash(t *testing.T) {
	base := hashOf(t, hashBase)
	edits := map[string]string{
		"inside a string":                  strings.Replace(hashBase, `"users"`, `"users2"`, 1),
		"the quotes of a string":           strings.Replace(hashBase, `"users"`, `'users'`, 1),
		"inside a template":                strings.Replace(hashBase, "`user-", "`member-", 1),
		"inside a substitution's string":   strings.Replace(hashBase, `"}"`, `"{"`, 1),
		"inside a regular expression":      strings.Replace(hashBase, `\/\/x$`, `\/\/y$`, 1),
		"a regular expression's flags":     strings.Replace(hashBase, `$/i`, `$/g`, 1),
		"a number":                         strings.Replace(hashBase, "/ 3", "/ 4", 1),
		"an operator":                      strings.Replace(hashBase, "doc.n / 2", "doc.n * 2", 1),
		"a name":                           strings.Replace(hashBase, "name: doc.name,", "name: doc.title,", 1),
		"a key":                            strings.Replace(hashBase, "café:", "cafe:", 1),
		"a token added":                    strings.Replace(hashBase, "n: n,", "n: -n,", 1),
		"a line break between two tokens":  strings.Replace(hashBase, "doc.n / 2", "doc.n\n/ 2", 1),
		"a line break removed":             strings.Replace(hashBase, "{\n      name", "{ name", 1),
		"two pluses become an increment":   strings.Replace(hashBase, "n: n,", "n: n + +1,", 1),
		"an increment becomes two pluses":  strings.Replace(hashBase, "n: n,", "n: n++ +1,", 1),
		"code moved into a line comment":   strings.Replace(hashBase, "n: n,", "// n: n,", 1),
		"a character in the last position": strings.Replace(hashBase, "};\n", "};;\n", 1),
	}
	seen := map[string]string{base: "the base"}
	for name, src := range edits {
		if src == hashBase {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		set, err := loadSrc(t, src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := set.Job("job").Hash
		if other, dup := seen[got]; dup {
			t.Errorf("%s: the same hash as %s", name, other)
		}
		seen[got] = name
	}
}

// A fixed file has a fixed hash: the scheme must not change by accident
// (every job would reindex on upgrade).
func TestTheTokenHashIsStable(t *testing.T) {
	const want = "6dd0c0330b297040b68902619d8593568337ca5b8e21e05c821422148db830d1"
	if got := hashOf(t, hashBase); got != want {
		t.Fatalf("hash %s, want %s: a change of tokenHash must bump tokenHashVersion on purpose", got, want)
	}
}

// loadSrc loads src as job.js and returns the set and its problems.
func loadSrc(t *testing.T, src string) (*transform.Set, error) {
	t.Helper()
	set, err := transform.Load(writeFiles(t, map[string]string{"job.js": src}), transform.Options{Pool: 1})
	if set != nil {
		t.Cleanup(set.Close)
	}
	return set, err
}

// A "//# sourceMappingURL=" comment names a file goja's parser would read
// (here a FIFO no one writes to, which would block the read for good):
// neither loading nor eval may read it.
func TestASourceMapCommentReadsNoFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "map.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	// goja resolves the path from the process's working directory.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, fifo)
	if err != nil {
		t.Fatal(err)
	}
	fifo = filepath.ToSlash(rel)
	src := "module.exports = { transform(doc) { return {v: eval(\"1\\n//# sourceMappingURL=" + fifo + "\")}; } };\n//# sourceMappingURL=" + fifo + "\n"
	done := make(chan error, 1)
	go func() {
		set, err := loadSrc(t, src)
		if err == nil {
			_, err = set.Job("job").Apply(context.Background(), marshal(t, bson.D{{Key: "_id", Value: 1}}), transform.OpInsert, nil)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("loading or eval read the source map (a FIFO) and blocked")
	}
}

// A comment-only edit keeps the very Job: what runs stays what the Set
// says (a supervisor restarts a job on a new Hash only).
func TestACommentEditKeepsTheJob(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.js": hashBase})
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte("// edited\n"+hashBase), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	if err != nil || next.Job("a") != set.Job("a") {
		t.Fatalf("a comment edit made a new Job (%v)", err)
	}
	// A change of meaning makes a new Job.
	if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte("// edited\n"+strings.Replace(hashBase, `"users"`, `"people"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := next.Reload()
	if err != nil || third.Job("a") == next.Job("a") || third.Job("a").Index != "people" {
		t.Fatalf("a real edit must make a new Job (%v)", err)
	}
}

func TestSettingsAreOutOfTheHashAndInTheSettingsHash(t *testing.T) {
	const base = `module.exports = {
  index: "users",
  settings: { searchableAttributes: ["name"], synonyms: { nyc: ["new york"] } },
  transform(doc) { return { name: doc.name }; },
};
`
	b := loadJob(t, base)
	if b.SettingsHash == "" {
		t.Fatal("no SettingsHash for a file with settings")
	}
	settingsOnly := map[string]string{
		"a synonym added":          strings.Replace(base, `nyc: ["new york"]`, `nyc: ["new york"], la: ["los angeles"]`, 1),
		"a setting added":          strings.Replace(base, `synonyms:`, `stopWords: ["the"], synonyms:`, 1),
		"the settings removed":     strings.Replace(base, "  settings: { searchableAttributes: [\"name\"], synonyms: { nyc: [\"new york\"] } },\n", "", 1),
		"the settings moved first": strings.Replace(strings.Replace(base, "  settings: { searchableAttributes: [\"name\"], synonyms: { nyc: [\"new york\"] } },\n", "", 1), "  index:", "  settings: { searchableAttributes: [\"name\"], synonyms: { nyc: [\"new york\"] } },\n  index:", 1),
	}
	for name, src := range settingsOnly {
		j := loadJob(t, src)
		if j.Hash != b.Hash {
			t.Errorf("%s: the document hash changed (a reindex)", name)
		}
		if name != "the settings moved first" && j.SettingsHash == b.SettingsHash {
			t.Errorf("%s: the settings hash did not change (not applied)", name)
		}
	}
	if j := loadJob(t, strings.Replace(base, "{ searchableAttributes: [\"name\"], synonyms: { nyc: [\"new york\"] } }", "{ synonyms: { nyc: [\"new york\"] }, searchableAttributes: [\"name\"] }", 1)); j.SettingsHash != b.SettingsHash {
		t.Error("the same settings in another order changed the settings hash")
	}
	if j := loadJob(t, strings.Replace(base, "name: doc.name }", "name: doc.name.toUpperCase() }", 1)); j.Hash == b.Hash {
		t.Error("a change of the transform kept the document hash")
	}
	// Settings built in a variable stay code: a change there reindexes.
	const viaVar = "const s = { stopWords: [\"the\"] };\nmodule.exports = { settings: s, transform(doc) { return { name: doc.name }; } };\n"
	if loadJob(t, viaVar).Hash == loadJob(t, strings.Replace(viaVar, `"the"`, `"a"`, 1)).Hash {
		t.Error("a change of code outside module.exports' settings literal kept the hash")
	}
}

// A reindex's rate changes no document: neither the file's reindexRate
// nor MEILISTREAM_JOB_<NAME>_REINDEX_RATE rebuilds the index, but an edit
// of it makes a new Job (the supervisor restarts it at the new rate).
func TestTheReindexRateIsOutOfTheHash(t *testing.T) {
	const base = `module.exports = {
  index: "users",
  reindexRate: 500,
  transform(doc) { return { name: doc.name }; },
};
`
	b := loadJob(t, base)
	if b.ReindexRate != 500 {
		t.Fatalf("reindexRate %d, want 500", b.ReindexRate)
	}
	for name, src := range map[string]string{
		"another rate":    strings.Replace(base, "500", "2000", 1),
		"the rate gone":   strings.Replace(base, "  reindexRate: 500,\n", "", 1),
		"the rate at end": strings.Replace(strings.Replace(base, "  reindexRate: 500,\n", "", 1), "  transform(", "  reindexRate: 9,\n  transform(", 1),
	} {
		if j := loadJob(t, src); j.Hash != b.Hash {
			t.Errorf("%s: the document hash changed (a reindex)", name)
		}
	}
	dir := writeFiles(t, map[string]string{"a.js": base})
	hash := func(ov map[string]string) string {
		set, err := transform.Load(dir, transform.Options{Pool: 1, Overrides: map[string]map[string]string{"a": ov}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
		if r := set.Job("a").ReindexRate; ov != nil && r != 70 {
			t.Fatalf("MEILISTREAM_JOB_A_REINDEX_RATE=70 gave rate %d", r)
		}
		return set.Job("a").Hash
	}
	if hash(nil) != hash(map[string]string{"reindex_rate": "70"}) {
		t.Error("MEILISTREAM_JOB_A_REINDEX_RATE changed the hash")
	}
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte(strings.Replace(base, "500", "2000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	next, err := set.Reload()
	if err != nil || next.Job("a") == set.Job("a") || next.Job("a").ReindexRate != 2000 {
		t.Fatalf("an edit of reindexRate kept the running Job (%v)", err)
	}
}
