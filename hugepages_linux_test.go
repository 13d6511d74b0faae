package main

import (
	"bufio"
	"errors"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestShouldAdvise(t *testing.T) {
	const madvise, always, never = "always [madvise] never\n", "[always] madvise never\n", "always madvise [never]\n"
	tests := []struct {
		godebug, enabled string
		want             bool
	}{
		{"", madvise, true},
		{"", "", true}, // the setting unknown: the kernel decides
		{"", always, false},
		{"", never, false},
		{"disablethp=1", madvise, false},
		{"gctrace=1, disablethp=1", madvise, false},
		{"disablethp=1,disablethp=0", madvise, true}, // the last one wins
		{"disablethp=0", madvise, true},
		{"xdisablethp=1", madvise, true},
	}
	for _, tt := range tests {
		if got := shouldAdvise(tt.godebug, tt.enabled); got != tt.want {
			t.Errorf("shouldAdvise(%q, %q) = %v, want %v", tt.godebug, tt.enabled, got, tt.want)
		}
	}
}

// TestHugeRangeIsTheHeapsAndAdvisedOnlyWhileReindexing checks what the
// range is for: set aside at start, not resident, marked for huge pages
// ("hg" in /proc/self/smaps) while a reindex runs and against them ("nh")
// after, and where the heap's next allocations land.
func TestHugeRangeIsTheHeapsAndAdvisedOnlyWhileReindexing(t *testing.T) {
	reserve()
	debug.FreeOSMemory() // as at start, also when the test runs again
	lo, hi := hugeRange.start, hugeRange.start+hugeRange.n
	in := func(v vma) bool { return v.start < hi && lo < v.end }
	for _, v := range mappings(t) {
		if in(v) && (v.flagged("hg") || v.rssKB > 8<<10) {
			t.Fatalf("the range before any reindex: %+v", v)
		}
	}

	if err := adviseHugeRange(false); errors.Is(err, syscall.EINVAL) {
		t.Skip("this kernel has no transparent huge pages:", err)
	} else if err != nil {
		t.Fatal(err)
	}
	hugePagesWhileReindexing(1)
	marked := uintptr(0)
	for _, v := range mappings(t) {
		if in(v) && v.flagged("hg") {
			marked += min(v.end, hi) - max(v.start, lo)
		}
	}
	if marked != hugeRange.n {
		t.Fatalf("%d of the range's %d bytes marked for huge pages while reindexing", marked, hugeRange.n)
	}

	// 32 MB in pieces of 128 KB, as a reindex's parts and batches come.
	pieces := make([][]byte, 256)
	inside := 0
	for i := range pieces {
		pieces[i] = make([]byte, 128<<10)
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(pieces[i]))); p >= lo && p < hi {
			inside++
		}
		for j := 0; j < len(pieces[i]); j += 4096 {
			pieces[i][j] = 1
		}
	}
	// The heap's free pages below the range come first; in a test binary
	// that is a few MB, so most pieces must land in the range.
	if inside < len(pieces)/2 {
		t.Errorf("%d of %d allocations landed in the range", inside, len(pieces))
	}

	hugePagesWhileReindexing(0)
	huge := int64(0)
	for _, v := range mappings(t) {
		if in(v) && (v.flagged("hg") || !v.flagged("nh")) {
			t.Errorf("after the reindex the range is not marked against huge pages: %+v", v)
		}
		if in(v) {
			huge += v.hugeKB
		}
	}
	t.Logf("%d of %d allocations in the range; %d kB of it in huge pages (what the kernel could give)", inside, len(pieces), huge)
}

type vma struct {
	start, end    uintptr
	rssKB, hugeKB int64
	flags         string
}

// mappings lists this process's memory mappings from /proc/self/smaps.
func mappings(t *testing.T) []vma {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	defer f.Close()
	var all []vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			lo, hi, _ := strings.Cut(fields[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("smaps: %q", line)
			}
			all = append(all, vma{start: uintptr(s), end: uintptr(e)})
		case len(fields) < 2 || len(all) == 0:
		case fields[0] == "Rss:":
			all[len(all)-1].rssKB, _ = strconv.ParseInt(fields[1], 10, 64)
		case fields[0] == "AnonHugePages:":
			all[len(all)-1].hugeKB, _ = strconv.ParseInt(fields[1], 10, 64)
		case fields[0] == "VmFlags:":
			all[len(all)-1].flags = strings.Join(fields[1:], " ")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

// flagged reports whether the mapping's VmFlags include flag.
func (v vma) flagged(flag string) bool {
	return strings.Contains(" "+v.flags+" ", " "+flag+" ")
}
