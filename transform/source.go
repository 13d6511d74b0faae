package transform

import (
	"fmt"
	"io"
)

// readSource reads a transform file without ever blocking on it: it is
// opened without waiting (opening a FIFO for reading waits for a writer,
// for good if none comes), anything but a regular file is refused (a
// FIFO, a device, a socket, even behind a symbolic link, as Kubernetes
// mounts files), and at most maxFileSource+1 bytes are read.
func readSource(path string) ([]byte, error) {
	return readRegular(path, maxFileSource+1)
}

// readRegular reads at most limit bytes of the regular file path, never
// blocking on a file of another kind (see readSource).
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := openNoWait(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	return io.ReadAll(io.LimitReader(f, limit))
}
