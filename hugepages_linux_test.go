package main

import (
	"bufio"
	"errors"
	"os"
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

// TestAdviseHeapMarksTheHeapItThenUses checks what the advice is for:
// a range of the heap marked for huge pages ("hg" in /proc/self/smaps),
// not resident when given back, and where the heap's next allocations land.
func TestAdviseHeapMarksTheHeapItThenUses(t *testing.T) {
	if err := adviseHeap(); errors.Is(err, syscall.EINVAL) {
		t.Skip("this kernel has no transparent huge pages:", err)
	} else if err != nil {
		t.Fatal(err)
	}
	marked := hugePageRanges(t)
	var big *vma
	for i := range marked {
		if marked[i].end-marked[i].start >= hugeHeapBytes {
			big = &marked[i]
		}
	}
	if big == nil {
		t.Fatalf("no range of %d MB marked for huge pages; marked: %+v", hugeHeapBytes>>20, marked)
	}
	if big.rssKB > 8<<10 {
		t.Errorf("the advised range is resident before use: %d kB", big.rssKB)
	}

	// 32 MB in pieces of 128 KB, as a reindex's parts and batches come.
	pieces := make([][]byte, 256)
	inside := 0
	for i := range pieces {
		pieces[i] = make([]byte, 128<<10)
		p := uintptr(unsafe.Pointer(unsafe.SliceData(pieces[i])))
		for _, r := range marked {
			if p >= r.start && p < r.end {
				inside++
				break
			}
		}
		for j := 0; j < len(pieces[i]); j += 4096 {
			pieces[i][j] = 1
		}
	}
	// The heap's free pages below the range come first; in a test binary
	// that is a few MB, so most pieces must land in the range.
	if inside < len(pieces)/2 {
		t.Errorf("%d of %d allocations landed in the advised range", inside, len(pieces))
	}
	huge := int64(0)
	for _, r := range hugePageRanges(t) {
		huge += r.hugeKB
	}
	t.Logf("%d of %d allocations in the advised range; %d kB of it in huge pages (what the kernel could give)", inside, len(pieces), huge)
}

type vma struct {
	start, end    uintptr
	rssKB, hugeKB int64
	flags         string
}

// hugePageRanges lists the mappings of this process marked for huge pages.
func hugePageRanges(t *testing.T) []vma {
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
		case len(all) == 0:
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
	var marked []vma
	for _, v := range all {
		if strings.Contains(" "+v.flags+" ", " hg ") {
			marked = append(marked, v)
		}
	}
	return marked
}
