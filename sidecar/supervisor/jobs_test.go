package supervisor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/supervisor"
	"github.com/meilistream/meilistream/transform"
)

func TestJobDefs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good.js", `module.exports = { transform(doc) { return { title: doc.title }; } };`)
	write("broken.js", `module.exports = { transform(doc) { return ; `)
	set, err := transform.Load(dir, transform.Options{Pool: 1})
	if set == nil {
		t.Fatalf("Load: %v", err)
	}
	defs, other := supervisor.JobDefs(set.Jobs(), err)
	if len(other) != 0 {
		t.Errorf("other problems: %v", other)
	}
	if len(defs) != 2 || defs[0].Name != "broken" || defs[1].Name != "good" {
		t.Fatalf("defs = %+v, want broken and good", defs)
	}
	if defs[0].Err == nil || errs.CodeOf(defs[0].Err) == "" {
		t.Errorf("broken has no error: %+v", defs[0])
	}
	if defs[1].Err != nil || defs[1].Hash == "" || defs[1].Spec.(*transform.Job).Name != "good" {
		t.Errorf("good = %+v, want a loaded job with a hash", defs[1])
	}

	t.Run("a running job whose file breaks keeps its loaded version", func(t *testing.T) {
		write("good.js", `module.exports = { transform(doc) { return ; `)
		next, err := set.Reload()
		defs, other := supervisor.JobDefs(next.Jobs(), err)
		if len(other) != 0 {
			t.Errorf("other = %v, want the broken edit on its job", other)
		}
		for _, d := range defs {
			if d.Name == "good" && (d.Err != nil || d.Spec == nil || d.LoadErr == nil) {
				t.Errorf("good = %+v, want the previous version kept and the load error on it", d)
			}
		}
	})
}

// A changed reindexRate keeps the transform hash (nothing to rebuild) but
// restarts the job: its definition's Hash, what the supervisor compares,
// changes with it.
func TestAReindexRateChangeRestartsButKeepsTheHash(t *testing.T) {
	def := func(src string) (supervisor.JobDef, *transform.Job) {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "a.js"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := transform.Load(dir, transform.Options{Pool: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(set.Close)
		defs, _ := supervisor.JobDefs(set.Jobs(), nil)
		return defs[0], set.Job("a")
	}
	slow, sj := def(`module.exports = { reindexRate: 100, transform(doc) { return { t: doc.t }; } };`)
	fast, fj := def(`module.exports = { reindexRate: 900, transform(doc) { return { t: doc.t }; } };`)
	if sj.Hash != fj.Hash {
		t.Error("the reindex rate changed the transform hash (a rebuild)")
	}
	if slow.Hash == fast.Hash {
		t.Error("a changed reindex rate would not restart the job")
	}
}
