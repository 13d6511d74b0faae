package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The parts of a sidecar's CPU profile, as bench/README.md's breakdown
// names them. A sample is charged to the first frame from its leaf that
// one of the rules claims; frames no rule claims (the runtime's malloc,
// BSON reading, syscalls) are charged to their caller, so an allocation
// or a read is the cost of whoever asked for it. A sample anywhere under
// the collector's own goroutines, or an assist, is GC.
var (
	gcFrame = regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep|bgscavenge|gcStart|gcMarkDone|gcMarkTermination|GC|forEachP|gcDrain|markroot|scanobject|greyobject|(\(\*mheap\)\.)?(scavenge|sysUnused)|deductAssistCredit|sweepone|\(\*sweepLocked\)\.sweep|\(\*mspan\)\.sweep)`)
	parts   = []struct {
		name string
		re   *regexp.Regexp
	}{
		{"conversion (BSON to JS)", regexp.MustCompile(`meilistream/transform\.(\(\*?(inConv|lazyDoc|lazyArray|lazyObj[A-Za-z]*)\)|\(\*vm\)\.(str|date|lazy[A-Za-z]*|value|doc|array[A-Za-z]*|oid|special)\b|eachValue|newLazy)`)},
		{"encoding (JS and BSON to JSON)", regexp.MustCompile(`meilistream/transform\.\(\*outConv\)|meilistream/jobdef\.(AppendJSON|appendJSON|DecimalText)|meilistream/sidecar/meili\.(encode|appendDoc|\(\*body)`)},
		{"transform (goja, the pool, guards)", regexp.MustCompile(`github\.com/dop251/goja|github\.com/dlclark/regexp2|meilistream/transform\.`)},
		{"driver (MongoDB reads, change stream)", regexp.MustCompile(`go\.mongodb\.org/mongo-driver/v2/(x/mongo|mongo|internal)`)},
		{"HTTP (Meilisearch)", regexp.MustCompile(`^net/http\.|meilisearch-go|meilistream/sidecar/meili\.`)},
		{"engine (stream, pipe, coalescing, state)", regexp.MustCompile(`meilistream/`)},
		{"network and syscalls (no caller above)", regexp.MustCompile(`^(internal/poll|syscall|net)\.`)},
	}
	gojaRun = regexp.MustCompile(`dop251/goja\.(\(\*vm\)\.run|\(\*baseJsFuncObject\)\.(call|_call)|\(\*Runtime\)\.RunProgram|AssertFunction)`)
	gcPart  = "GC (collector, sweep, scavenger, assists)"
	// A sample in asyncPreempt is a goroutine stopped by the scheduler or
	// the collector (its registers saved), whatever it was running.
	preemptPart = "preemption (runtime.asyncPreempt)"
	otherPart   = "runtime (scheduler, timers) and other"
	locLine     = regexp.MustCompile(`^\s*(\d+): 0x[0-9a-f]+ M=\d+ (\S+)`)
	inLine      = regexp.MustCompile(`^\s+(\S+) \S+:\d+`)
	sampLine    = regexp.MustCompile(`^\s*(\d+)\s+(\d+): ([\d ]+)$`)
)

// breakdown reads a CPU profile of bin (go tool pprof -raw) and returns the
// share of its samples each part took, and the profile's total in
// seconds.
func breakdown(bin, profile string) (map[string]float64, float64, error) {
	out, err := exec.Command("go", "tool", "pprof", "-raw", bin, profile).Output()
	if err != nil {
		return nil, 0, fmt.Errorf("go tool pprof -raw %s: %w", profile, err)
	}
	type sample struct {
		ns   int64
		locs []int
	}
	var (
		samples []sample
		frames  = map[int][]string{} // location -> functions, leaf first
		section string
		cur     int
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "Samples:"), strings.HasPrefix(l, "Locations"), strings.HasPrefix(l, "Mappings"):
			section = l
			continue
		}
		switch {
		case strings.HasPrefix(section, "Samples"):
			if m := sampLine.FindStringSubmatch(l); m != nil {
				ns, _ := strconv.ParseInt(m[2], 10, 64)
				s := sample{ns: ns}
				for _, f := range strings.Fields(m[3]) {
					id, _ := strconv.Atoi(f)
					s.locs = append(s.locs, id)
				}
				samples = append(samples, s)
			}
		case strings.HasPrefix(section, "Locations"):
			if m := locLine.FindStringSubmatch(l); m != nil {
				cur, _ = strconv.Atoi(m[1])
				frames[cur] = append(frames[cur], m[2])
			} else if m := inLine.FindStringSubmatch(l); m != nil && cur != 0 {
				frames[cur] = append(frames[cur], m[1])
			}
		}
	}
	share := map[string]float64{}
	var total int64
	for _, s := range samples {
		total += s.ns
		share[classify(s.locs, frames)] += float64(s.ns)
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("%s: no samples", profile)
	}
	for k := range share {
		share[k] /= float64(total)
	}
	return share, float64(total) / 1e9, nil
}

func classify(locs []int, frames map[int][]string) string {
	if len(locs) > 0 && len(frames[locs[0]]) > 0 && frames[locs[0]][0] == "runtime.asyncPreempt" {
		return preemptPart
	}
	for _, id := range locs {
		for _, fn := range frames[id] {
			if gcFrame.MatchString(fn) {
				return gcPart
			}
		}
	}
	// goja's own functions are the transform's only when the interpreter
	// called them: called by the conversion or the encoding (making a
	// string, reading a result's keys) they are that part's.
	inGoja := false
	for _, id := range locs {
		for _, fn := range frames[id] {
			if inGoja && gojaRun.MatchString(fn) {
				return parts[2].name
			}
			for _, p := range parts {
				if !p.re.MatchString(fn) {
					continue
				}
				if p.name == parts[2].name && strings.Contains(fn, "dop251/goja") {
					inGoja = true
					break
				}
				if inGoja && p.name != parts[0].name && p.name != parts[1].name {
					return parts[2].name
				}
				return p.name
			}
		}
	}
	if inGoja {
		return parts[2].name
	}
	return otherPart
}

// printBreakdown prints the parts of each profile in dir (by default
// reindex.pprof and follow.pprof), largest first.
func printBreakdown(dir string, names ...string) error {
	if len(names) == 0 {
		names = []string{"reindex.pprof", "follow.pprof"}
	}
	for _, name := range names {
		share, secs, err := breakdown(dir+"/meilistream", dir+"/"+name)
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(share))
		for k := range share {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool { return share[keys[a]] > share[keys[b]] })
		fmt.Printf("%s (%.2f s of samples):", name, secs)
		for _, k := range keys {
			fmt.Printf(" %s %.1f%%;", k, 100*share[k])
		}
		fmt.Println()
	}
	return nil
}
