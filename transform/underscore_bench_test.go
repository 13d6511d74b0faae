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
		{"with", `module.exports = function (doc) { return _.omit(doc, "secret"); }; _.VERSION;`},
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
