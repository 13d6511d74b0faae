//go:build !linux

package main

// Huge pages for the heap are Linux only (hugepages_linux.go): elsewhere
// the sidecar leaves its heap's pages to the runtime.

func reserveHugeRange(string) {}

func hugePagesWhileReindexing(int) {}
