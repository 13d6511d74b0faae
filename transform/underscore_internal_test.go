package transform

import (
	"context"
	"testing"
)

// BenchmarkRuntimeUnderscore measures what a new runtime costs (a runtime
// is made per worker, and again after every interrupt) for a monstache
// script that does not read `_` and for one that does, side by side: the
// difference is what loading Underscore adds to a runtime that uses it.
func BenchmarkRuntimeUnderscore(b *testing.B) {
	for _, c := range []struct{ name, src string }{
		{"without", `module.exports = function (doc) { return doc; };`},
		{"with", `module.exports = function (doc) { return _.omit(doc, "secret"); };`},
	} {
		b.Run(c.name, func(b *testing.B) {
			j, err := LoadFile("job.js", []byte(c.src), Options{Pool: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v, err := newVM(context.Background(), j, j.rt.program, j.rt.console, nil)
				if err != nil {
					b.Fatal(err)
				}
				close(v.work)
			}
		})
	}
}

// A file naming `_` loads Underscore when its runtimes are made; `_id`,
// `my_var` or `__proto__` are not `_`.
func TestNamesUnderscore(t *testing.T) {
	for src, want := range map[string]bool{
		`return _.omit(doc, "x")`:            true,
		`var u = _;`:                         true,
		`_`:                                  true,
		`f(_)`:                               true,
		`doc._id`:                            false,
		`var my_var = 1, __proto__ = 2;`:     false,
		`globalThis["_"]`:                    true, // in a string: loaded for nothing, harmlessly
		`globalThis["\x5f"]`:                 false,
		`var é_ = 1, _é = 2, $_ = 3, _$ = 4`: false,
	} {
		if got := namesUnderscore([]byte(src)); got != want {
			t.Errorf("namesUnderscore(%q) = %v, want %v", src, got, want)
		}
	}
}
