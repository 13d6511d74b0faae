//go:build !unix

package transform

import "os"

// openNoWait opens path for reading (no FIFOs to wait for here).
func openNoWait(path string) (*os.File, error) {
	return os.Open(path)
}
