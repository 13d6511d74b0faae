//go:build unix

package transform

import (
	"os"
	"syscall"
)

// openNoWait opens path for reading with O_NONBLOCK, so that opening a
// FIFO returns at once (readSource then refuses it).
func openNoWait(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
