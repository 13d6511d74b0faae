//go:build !unix

package scripttest

import "os"

// No SIGSTOP/SIGCONT here: the signal script command refuses STOP and CONT.
var sigStop, sigCont os.Signal
