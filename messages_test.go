package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// scaleDown matches advice to stop the sidecars. In the sidecar model they
// run in the application's pods, so scaling them down stops the
// application: a message says which command asks the job's holder
// instead (reindex, pause, resume, retry and verify --repair do).
// "Run it where no sidecar runs the job" is the same advice in other
// words.
var scaleDown = regexp.MustCompile(`(?i)scal(e|ing)\b[^.;]{0,40}\bdown|\bwhere no sidecar (runs|holds)\b`)

// TestNoMessageSaysScaleDown reads every string literal of the module's
// code (tests aside) for such advice.
func TestNoMessageSaysScaleDown(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		seen++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				s = lit.Value
			}
			if scaleDown.MatchString(s) {
				t.Errorf("%s: a message advises scaling down: %q; name the command that asks the job's holder", fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 20 {
		t.Fatalf("read only %d Go files: run from the module root", seen)
	}
}

// TestScaleDownMatchesTheAdvice keeps the pattern honest: it catches the
// advice as it was written, and not the words apart.
func TestScaleDownMatchesTheAdvice(t *testing.T) {
	for _, s := range []string{
		"run it where no sidecar runs the job (scale the sidecars down, run it, scale them back up)",
		"Scale down the deployment first",
		"scaling the sidecars down",
		"try again, or run %s where no sidecar runs the job",
	} {
		if !scaleDown.MatchString(s) {
			t.Errorf("not caught: %q", s)
		}
	}
	for _, s := range []string{"the scale of the index. Shut down", "gc scale; slow down", "no sidecar holds the job's lease, so nothing makes its changes durable"} {
		if scaleDown.MatchString(s) {
			t.Errorf("caught, though no advice: %q", s)
		}
	}
}
