//go:build !linux

package main

// adviseHugePages is Linux only (hugepages_linux.go): elsewhere the
// sidecar leaves its heap's pages to the runtime.
func adviseHugePages(string) error { return nil }
