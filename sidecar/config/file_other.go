//go:build !unix

package config

// openNoBlock is 0 where named pipes do not block an open (see
// file_unix.go).
const openNoBlock = 0
