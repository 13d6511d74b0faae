package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// module is a Go module version whose tests are run.
type module struct {
	Path, Version string
}

func (m module) String() string { return m.Path + "@" + m.Version }

// download puts the module in the module cache (`go mod download -json`)
// and returns its source directory there.
func download(ctx context.Context, m module) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", m.String())
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", m, err, strings.TrimSpace(stderr.String()))
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: read its answer: %w", m, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", m, info.Error)
	}
	return info.Dir, nil
}

// prepare copies the module's source out of the read-only module cache
// into work/<module@version>/src (the driver's spec tests read files under
// the module root, and `go test -c` wants a writable go.sum) and builds
// the test binary of pkg there, unless both exist already. It returns the
// source root and the binary's path.
func prepare(ctx context.Context, m module, pkg, work string, logf func(string, ...any)) (root, bin string, err error) {
	base := filepath.Join(work, strings.ReplaceAll(m.String(), "/", "_"))
	root = filepath.Join(base, "src")
	bin = filepath.Join(base, strings.ReplaceAll(pkg, "/", "_")+".test")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		dir, err := download(ctx, m)
		if err != nil {
			return "", "", err
		}
		logf("copying %s to %s", dir, root)
		if err := os.RemoveAll(root); err != nil {
			return "", "", err
		}
		if err := copyTree(dir, root); err != nil {
			return "", "", fmt.Errorf("copy %s: %w", m, err)
		}
	}
	if _, err := os.Stat(bin); err == nil {
		return root, bin, nil
	}
	logf("building the tests of %s/%s", m.Path, pkg)
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+pkg)
	cmd.Dir = root
	// The module's go.work names modules its zip does not hold; its go.sum
	// may lack test-only dependencies, which -mod=mod fetches.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build the tests of %s/%s: %w\n%s", m, pkg, err, out)
	}
	return root, bin, nil
}

// copyTree copies a directory tree, making everything writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

// provideSpecs makes root/testdata/specifications/source the "source"
// directory of a mongodb/specifications checkout, where the driver's spec
// runners look for their JSON files (internal/spectest.Path; the driver's
// repository has it as a git submodule, which its module zip leaves out).
// specs is a checkout, or a git directory from which rev is exported.
func provideSpecs(ctx context.Context, root, specs, rev string) error {
	dst := filepath.Join(root, "testdata", "specifications")
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if st, err := os.Stat(filepath.Join(specs, "source")); err == nil && st.IsDir() {
		return os.Symlink(filepath.Join(specs, "source"), filepath.Join(dst, "source"))
	}
	// A git directory (bare or not): export rev's source/ tree.
	archive := exec.CommandContext(ctx, "git", "--git-dir", specs, "archive", "--format=tar", rev, "source")
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var aerr, uerr bytes.Buffer
	archive.Stderr, untar.Stderr = &aerr, &uerr
	if err := untar.Start(); err != nil {
		return fmt.Errorf("export the specifications: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("export source/ of %s at %s (give -specs a checkout of github.com/mongodb/specifications or its git directory): %w: %s", specs, rev, err, strings.TrimSpace(aerr.String()))
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpack the specifications: %w: %s", err, strings.TrimSpace(uerr.String()))
	}
	return nil
}
