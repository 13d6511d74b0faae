package main

import "fmt"

// identityJS is the job of -identity: the articles collection into the
// articles index with no transform function, every document as it is.
const identityJS = `module.exports = { collection: "articles", index: "articles", primaryKey: "id" };
`

// printFloorRatios prints each sidecar's CPU per document and per change
// as a ratio to the floor build's, which ran beside it: how far the real
// sidecar is from what the work itself costs.
func printFloorRatios(runs []*sidecar, floor *sidecar, docs, published, changes int) {
	per := func(p phase, n int) float64 {
		if n == 0 {
			return 0
		}
		return float64(p.cpu.Microseconds()) / float64(n)
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fr, ff := per(floor.reindex, docs), per(floor.follow, changes)
	for _, r := range runs {
		if r == floor {
			continue
		}
		rr, rf := per(r.reindex, docs), per(r.follow, changes)
		line := fmt.Sprintf("to the floor: %s reindex %.1f / %.1f µs per document = %s, peak RSS %.1f / %.1f MB",
			r.label, rr, fr, ratio(rr, fr), float64(r.peak)/(1<<20), float64(floor.peak)/(1<<20))
		if changes > 0 {
			line += fmt.Sprintf("; follow %.1f / %.1f µs per change = %s", rf, ff, ratio(rf, ff))
		}
		if each, _, ok := r.middle(docs, published); ok {
			if feach, _, fok := floor.middle(docs, published); fok {
				line += fmt.Sprintf("; middle half of the reindex %.1f / %.1f µs = %s", each, feach, ratio(each, feach))
			}
		}
		fmt.Println(line)
	}
}
