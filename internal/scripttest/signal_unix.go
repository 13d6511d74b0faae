//go:build unix

package scripttest

import (
	"os"
	"syscall"
)

// The signals of the signal script command that not every OS has.
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)
