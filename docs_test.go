package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// manualFiles are the Markdown files of the manual whose links are checked.
func manualFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md: run from the module root")
	}
	return append([]string{"README.md", "CONTRIBUTING.md", "bench/README.md"}, docs...)
}

// A Markdown inline link or image: [text](target) or [text](target "title").
// The text may span lines, as wrapped paragraphs do.
var mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestManualLinksResolve keeps the manual's relative links working: every
// link from README.md, CONTRIBUTING.md, bench/README.md and docs/*.md to a
// file of the repository names one that exists, and every #anchor names a
// heading of its Markdown file (as GitHub derives anchors from headings).
// Links to other sites are not fetched.
func TestManualLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		anchors[file] = headingAnchors(string(b))
		return anchors[file], nil
	}
	for _, file := range manualFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(proseOf(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file or folder %s", file, target, dest)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: an anchor into %s, which is not Markdown", file, target, dest)
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				t.Errorf("%s: link %q: %v", file, target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, target, dest, frag)
			}
		}
	}
}

// TestREADMEStaysShort keeps README.md a manual a user reads through; the
// reference depth belongs in docs/.
func TestREADMEStaysShort(t *testing.T) {
	const limit = 200
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n >= limit {
		t.Errorf("README.md has %d lines; keep it under %d and move reference depth to docs/", n, limit)
	}
}

// proseOf returns md without its fenced code blocks and inline code spans,
// where brackets and parentheses are code, not links. Code spans inside a
// link's text ([`x`](y)) leave the link itself in place.
func proseOf(md string) string {
	var out strings.Builder
	fenced := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			out.WriteString("\n")
			continue
		}
		if fenced {
			out.WriteString("\n")
			continue
		}
		out.WriteString(line)
	}
	// On the whole text: a code span may be wrapped across lines.
	return codeSpan.ReplaceAllString(out.String(), "``")
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors GitHub gives md's headings: the
// heading's text in lower case, without punctuation but '-' and '_', spaces
// made '-', and "-1", "-2", ... after repeats.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.Lines(md) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if len(text) == len(line) || len(line)-len(text) > 6 || !strings.HasPrefix(text, " ") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				slug.WriteRune(r)
			case r == ' ':
				slug.WriteRune('-')
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			anchors[s+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

// TestCIFuzzesEveryTarget: every fuzz target of the module is run by
// .ci/run, as "fuzz ./PKG NAME" with the package it is in, so a target
// added, or moved to another package, cannot drop out of CI unseen.
func TestCIFuzzesEveryTarget(t *testing.T) {
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	fuzzDecl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzDecl.FindAllSubmatch(src, -1) {
			found++
			want := "fuzz ./" + filepath.ToSlash(filepath.Dir(path)) + " " + string(m[1]) + "\n"
			if !strings.Contains(string(ci), want) {
				t.Errorf("%s: .ci/run does not fuzz it (want a line %q)", path, strings.TrimSpace(want))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 5 {
		t.Fatalf("found %d fuzz targets; the walk is broken", found)
	}
}
