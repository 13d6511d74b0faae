package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// suite is one package of a client's integration tests.
type suite struct {
	name string
	mod  module
	pkg  string // the test package, relative to the module root
	// needs says which test servers a process of this suite talks to.
	mongo, meili bool
	// shared: the suite's processes run one after the other against one
	// pair of servers, as the suite's own CI runs every test against one
	// server (meilisearch-go's tests expect what earlier tests left: task
	// uids above 0, experimental features turned on); otherwise each
	// process gets fresh servers.
	shared bool
	// split names top-level tests that run one process per element of a
	// []string variable of their file (a directory of spec files each),
	// so that one hang costs one directory, not the suite.
	split map[string]string
}

var (
	driverModule = module{"go.mongodb.org/mongo-driver/v2", "v2.10.0"}
	meiliModule  = module{"github.com/meilisearch/meilisearch-go", "v0.37.0"}
)

// specsRev is the commit of github.com/mongodb/specifications that the
// driver's repository pins as its testdata/specifications submodule.
const specsRev = "d9d69f5f9dd7e5a58b7cae8064f6786ffaf19ebb"

var allSuites = []suite{
	{
		name: "driver", mod: driverModule, pkg: "internal/integration", mongo: true,
		split: map[string]string{"TestUnifiedSpecs": "directories"},
	},
	{
		name: "unified", mod: driverModule, pkg: "internal/integration/unified", mongo: true,
		split: map[string]string{"TestUnifiedSpec": "passDirectories,failDirectories"},
	},
	{name: "meili", mod: meiliModule, pkg: "integration", meili: true, shared: true},
}

// unit is what one test process runs.
type unit struct {
	suite *suite
	group string // the test's file (without _test.go), or spec directory
	top   string // the top-level test
	run   string // the -test.run pattern
	// long: a whole directory of spec tests, given a longer timeout.
	long bool
}

func (u unit) String() string {
	if u.run == "^"+regexp.QuoteMeta(u.top)+"$" {
		return u.suite.name + " " + u.top
	}
	return u.suite.name + " " + u.top + " " + u.group
}

// listUnits finds the top-level tests of the suite's package by reading
// its source (the test binaries connect to a server before they can even
// list their tests) and turns them into units.
func listUnits(s *suite, root string) ([]unit, error) {
	dir := filepath.Join(root, s.pkg)
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	fset := token.NewFileSet()
	var units []unit
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("read the tests of %s: %w", s.mod, err)
		}
		group := strings.TrimSuffix(filepath.Base(f), "_test.go")
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !isTestFunc(fd) {
				continue
			}
			name := fd.Name.Name
			vars, ok := s.split[name]
			if !ok {
				units = append(units, unit{suite: s, group: group, top: name, run: "^" + regexp.QuoteMeta(name) + "$"})
				continue
			}
			dirs := stringSliceVars(af, strings.Split(vars, ","))
			if len(dirs) == 0 {
				return nil, fmt.Errorf("%s: %s splits %s by %s, which the file no longer declares", s.mod, f, name, vars)
			}
			for _, d := range dirs {
				units = append(units, unit{suite: s, group: d, top: name, run: subtestPattern(name, d), long: true})
			}
		}
	}
	if len(units) == 0 {
		return nil, fmt.Errorf("no tests found in %s", dir)
	}
	return units, nil
}

// isTestFunc: func TestXxx(t *testing.T), not TestMain.
func isTestFunc(fd *ast.FuncDecl) bool {
	name := fd.Name.Name
	if !strings.HasPrefix(name, "Test") || name == "TestMain" {
		return false
	}
	if len(name) > 4 {
		if c := name[4]; c >= 'a' && c <= 'z' {
			return false
		}
	}
	params := fd.Type.Params.List
	if len(params) != 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "T"
}

// stringSliceVars returns the string literals of the named []string
// package variables, in order.
func stringSliceVars(af *ast.File, names []string) []string {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []string
	for _, decl := range af.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if !want[id.Name] || i >= len(vs.Values) {
					continue
				}
				cl, ok := vs.Values[i].(*ast.CompositeLit)
				if !ok {
					continue
				}
				for _, el := range cl.Elts {
					if bl, ok := el.(*ast.BasicLit); ok && bl.Kind == token.STRING {
						if s, err := strconv.Unquote(bl.Value); err == nil {
							out = append(out, s)
						}
					}
				}
			}
		}
	}
	return out
}

// subtestPattern selects one subtest whose name may hold slashes: -test.run
// splits both the pattern and the test's name at slashes and matches level
// by level (src/testing/match.go).
func subtestPattern(top, sub string) string {
	parts := []string{"^" + regexp.QuoteMeta(top) + "$"}
	for _, p := range strings.Split(sub, "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	return strings.Join(parts, "/")
}

// workDir is where module copies, test binaries and logs are kept between
// runs.
func workDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "meilistream-suites"), nil
}

func unitTimeout(u unit, perTest, perDir time.Duration) time.Duration {
	if u.long {
		return perDir
	}
	return perTest
}
