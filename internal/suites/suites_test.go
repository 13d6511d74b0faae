package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The framing of -test.v=test2json output as the testing package prints it
// (go1.26): a ^V before each framing line, none before the test's own
// output.
const sampleOutput = "\x16=== RUN   TestA\n" +
	"\x16=== RUN   TestA/x_y\n" +
	"    a_test.go:3: --- FAIL: not a result line\n" +
	"\x16--- PASS: TestA/x_y (0.00s)\n" +
	"\x16=== NAME  TestA\n" +
	"\x16=== RUN   TestA/s\n" +
	"\x16--- SKIP: TestA/s (0.00s)\n" +
	"\x16=== RUN   TestA/f_(with_parens)\n" +
	"    a_test.go:3: bad\n" +
	"\x16--- FAIL: TestA/f_(with_parens) (0.01s)\n" +
	"\x16=== RUN   TestA/hangs\n" +
	"    a_test.go:9: waiting\n" +
	"\x16--- FAIL: TestA (0.02s)\n" +
	"\x16FAIL\n"

func TestParseOutputCountsLeavesAndKeepsFailureLogs(t *testing.T) {
	p := parseOutput(strings.NewReader(sampleOutput))
	want := map[string]Outcome{
		"TestA": Fail, "TestA/x_y": Pass, "TestA/s": Skip,
		"TestA/f_(with_parens)": Fail, "TestA/hangs": Unfinished,
	}
	if !reflect.DeepEqual(p.results, want) {
		t.Fatalf("results %v, want %v", p.results, want)
	}
	if got := p.leaves(); !reflect.DeepEqual(got, []string{"TestA/x_y", "TestA/s", "TestA/f_(with_parens)", "TestA/hangs"}) {
		t.Fatalf("leaves %v", got)
	}
	if got := p.logs["TestA/f_(with_parens)"]; len(got) != 1 || !strings.Contains(got[0], "bad") {
		t.Fatalf("log of the failed case: %q", got)
	}
	if got := p.logs["TestA/hangs"]; len(got) != 1 || !strings.Contains(got[0], "waiting") {
		t.Fatalf("log of the unfinished case: %q", got)
	}
	r := unitResult{unit: unit{top: "TestA"}, out: p}
	if got := r.tally(); got != (tally{topFail: 1, pass: 1, skip: 1, fail: 2}) {
		t.Fatalf("tally %+v", got)
	}
}

func TestSubtestPatternSelectsADirectoryWithSlashes(t *testing.T) {
	pat := subtestPattern("TestUnifiedSpec", "change-streams/tests/unified")
	// -test.run matches level by level after splitting at slashes.
	levels := strings.Split(pat, "/")
	name := strings.Split("TestUnifiedSpec/change-streams/tests/unified", "/")
	if len(levels) != len(name) {
		t.Fatalf("pattern %q has %d levels, the name %d", pat, len(levels), len(name))
	}
	for i := range levels {
		if !regexp.MustCompile(levels[i]).MatchString(name[i]) {
			t.Fatalf("level %d: %q does not match %q", i, levels[i], name[i])
		}
	}
	if regexp.MustCompile(levels[1]).MatchString("change-streams-extra") {
		t.Fatalf("level pattern %q is not anchored", levels[1])
	}
}

func TestListUnitsSplitsSpecDirectories(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "pkg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package pkg
import "testing"
var dirs = []string{"a/tests", "b"}
func TestMain(m *testing.M) {}
func TestPlain(t *testing.T) {}
func TestSpecs(t *testing.T) {}
func Testlower(t *testing.T) {}
func TestBench(b *testing.B) {}
`
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &suite{name: "s", pkg: "pkg", split: map[string]string{"TestSpecs": "dirs"}}
	units, err := listUnits(s, root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range units {
		got = append(got, u.group+" "+u.run)
	}
	want := []string{"x ^TestPlain$", "a/tests ^TestSpecs$/^a$/^tests$", "b ^TestSpecs$/^b$"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("units %q, want %q", got, want)
	}
}
