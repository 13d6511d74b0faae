//go:build unix

package config

import "syscall"

// openNoBlock makes opening a named pipe return at once instead of
// waiting for a writer, so readSecretFile can refuse it (see there).
const openNoBlock = syscall.O_NONBLOCK
