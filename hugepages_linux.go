package main

import (
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"
)

// hugeHeapBytes is how much of the Go heap reindexes ask to be backed by
// transparent huge pages: more than the heap's working size in a
// reindex (about 60-70 MB at GOGC=400, README "Performance"), well under
// the default soft memory limit. It is address space, not memory: nothing
// in it is resident until the heap uses it.
const hugeHeapBytes = 128 << 20

// thpEnabled is where Linux says when it backs memory with transparent
// huge pages: "always", "madvise" (only where asked) or "never", the one in
// use in brackets.
const thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"

// hugeRange is the low end of the heap set aside at start for huge pages
// while a reindex runs (reserveHugeRange); n is 0 when there is none.
var hugeRange struct{ start, n uintptr }

// reserveHugeRange sets aside the range of the Go heap that reindexes ask
// to be backed by transparent huge pages (2 MB) instead of 4 KB pages
// (hugePagesWhileReindexing), where huge pages are "madvise"-only, unless
// godebug (the GODEBUG value) sets disablethp=1, Go's own switch against
// huge pages for the heap.
//
// Why: each 4 KB page the heap touches for the first time is a page fault,
// dear on a virtual machine, and a reindex's heap grows to its working size
// at the start of every run. Where huge pages are "madvise"-only (a common
// default, and this project's build machine's setting) the Go runtime never
// asks for them (since Go 1.21.4 it marks no heap memory, golang/go#64342),
// so the heap is faulted in 4 KB at a time. With huge pages a reindex of
// 100 000 articles took 0.02 page faults per document instead of 0.19, and
// 15 % less CPU (README "Performance"). Under "always" the heap has huge
// pages already, and asking would only make the kernel try harder for them
// (see below); under "never" there are none to have. Either way it does
// nothing.
//
// How: madvise marks address ranges, and the heap maps its address space as
// it grows, so the range must exist first. One large allocation made before
// anything else maps it, and it is freed and handed back to the kernel
// untouched (FreeOSMemory), so it costs no resident memory. Go's page
// allocator is address-ordered first fit, so the heap's spans are then
// carved from that range before the heap grows past it.
//
// Why only while reindexing: with the kernel's default defrag setting, a
// fault in advised memory that finds no free 2 MB page reclaims and
// compacts memory on the spot, which on a host short of memory stalls that
// thread (100 ms and more were reported, golang/go#61718, why Go itself
// stopped asking). And advised memory stays resident in 2 MB pieces around
// the heap's live objects: advised for good, a quiet follow after a reindex
// of 300 000 articles stayed at 76 MB resident, against 44 MB without and
// 44-46 MB when the advice is taken back after the reindex. (The follow
// after a reindex still measured up to 7 % more CPU per change, with more
// page faults: README "Performance".)
func reserveHugeRange(godebug string) {
	enabled, _ := os.ReadFile(thpEnabled) // unreadable: let the kernel decide
	if shouldAdvise(godebug, string(enabled)) {
		reserve()
	}
}

// reserve is reserveHugeRange without the checks. Only the first call
// sets a range aside: the heap's lowest addresses are the ones it uses
// first, and a later range would be above the first.
func reserve() {
	if hugeRange.n != 0 {
		return
	}
	hugeRange.start, hugeRange.n = allocate(hugeHeapBytes), hugeHeapBytes
	debug.FreeOSMemory()
}

// allocate returns the address of n new bytes, never touched (fresh memory
// from the kernel is known to be zero) and no longer referenced. It is not
// inlined so that nothing of its frame keeps the allocation alive in the
// collection FreeOSMemory runs.
//
//go:noinline
func allocate(n int) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(make([]byte, n))))
}

// hugePagesWhileReindexing is the engine's Reindexes hook: it asks for huge
// pages on hugeRange while a reindex runs and takes the advice back when
// none does. Only the range's marking changes; what is resident stays.
func hugePagesWhileReindexing(running int) { _ = adviseHugeRange(running > 0) }

// adviseHugeRange marks hugeRange for huge pages (on) or against them, and
// returns madvise's error (EINVAL from a kernel built without transparent
// huge pages): a hint that fails only means no huge pages.
func adviseHugeRange(on bool) error {
	if hugeRange.n == 0 {
		return nil
	}
	advice := syscall.MADV_NOHUGEPAGE
	if on {
		advice = syscall.MADV_HUGEPAGE
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, hugeRange.start, hugeRange.n, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

// shouldAdvise reports whether huge pages have something to gain: not
// when GODEBUG sets disablethp=1 (as in Go, the last setting of a name
// wins), nor when the kernel's setting (enabled, the thpEnabled file's
// text; empty when unknown) is "always" or "never".
func shouldAdvise(godebug, enabled string) bool {
	off := false
	for kv := range strings.SplitSeq(godebug, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "disablethp" {
			off = v == "1"
		}
	}
	return !off && !strings.Contains(enabled, "[always]") && !strings.Contains(enabled, "[never]")
}
