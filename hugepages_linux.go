package main

import (
	"os"
	"runtime/debug"
	"strings"
	"syscall"
)

// hugeHeapBytes is how much of the Go heap adviseHugePages asks to be
// backed by transparent huge pages: more than the heap's working size in a
// reindex (about 60-70 MB at GOGC=400, README "Performance"), well under
// the default soft memory limit. It is address space, not memory: nothing
// in it is resident until the heap uses it.
const hugeHeapBytes = 128 << 20

// thpEnabled is where Linux says when it backs memory with transparent
// huge pages: "always", "madvise" (only where asked) or "never", the one in
// use in brackets.
const thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"

// adviseHugePages asks Linux to back the low end of the Go heap with
// transparent huge pages (2 MB) instead of 4 KB pages, where huge pages are
// "madvise"-only, unless godebug (the GODEBUG value) sets disablethp=1, Go's
// own switch against huge pages for the heap.
//
// Why: each 4 KB page the heap touches for the first time is a page fault,
// dear on a virtual machine, and a reindex's heap grows to its working size
// at the start of every run. Where huge pages are "madvise"-only (a common
// default, and this project's build machine's setting) the Go runtime never
// asks for them (since Go 1.21.4 it marks no heap memory, golang/go#64342),
// so the heap is faulted in 4 KB at a time. With this, a reindex of 100 000
// articles took 0.02 page faults per document instead of 0.19, and 15 % less
// CPU (README "Performance"). Under "always" the heap has huge pages
// already, and asking would only make the kernel try harder for them (see
// below); under "never" there are none to have. Either way it does nothing.
//
// How: madvise marks address ranges, and the heap maps its address space as
// it grows, so the range must exist first. One large allocation made before
// anything else maps it; after the advice it is freed and handed back to the
// kernel untouched (FreeOSMemory), so it costs no resident memory. Go's page
// allocator is address-ordered first fit, so the heap's spans are then
// carved from that range before the heap grows past it.
//
// The cost, and why Go itself stopped asking (golang/go#61718): with the
// kernel's default defrag setting, a fault in advised memory that finds no
// free 2 MB page reclaims and compacts memory on the spot, which on a host
// short of memory stalls that thread (100 ms and more were reported). Here
// that can happen at most once per 2 MB of the range, mostly while a reindex
// first grows the heap. And memory stays resident in 2 MB pieces around the
// heap's live objects: peak RSS measured about the same, but a quiet follow
// after a reindex 76 MB against 44 MB. GODEBUG=disablethp=1 turns it off
// (README "Deployment").
//
// It returns madvise's error (EINVAL from a kernel built without transparent
// huge pages); main ignores it, as the advice is only a hint.
func adviseHugePages(godebug string) error {
	enabled, _ := os.ReadFile(thpEnabled) // unreadable: let the kernel decide
	if !shouldAdvise(godebug, string(enabled)) {
		return nil
	}
	return adviseHeap()
}

// adviseHeap is adviseHugePages without the checks: it advises a range of
// hugeHeapBytes at the heap's low end and gives the range back untouched.
func adviseHeap() error {
	err := adviseRange(hugeHeapBytes)
	debug.FreeOSMemory()
	return err
}

// shouldAdvise reports whether adviseHugePages has something to gain: not
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

// adviseRange allocates n bytes, never touched (fresh memory from the
// kernel is known to be zero), advises them, and drops them. It is not
// inlined so that nothing of its frame keeps the allocation alive in the
// collection FreeOSMemory runs.
//
//go:noinline
func adviseRange(n int) error {
	return syscall.Madvise(make([]byte, n), syscall.MADV_HUGEPAGE)
}
