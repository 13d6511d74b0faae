package main

import "io"

// runCheck is the body of "meilistream check".
//
// Placeholder from the CLI frame: the transform engineer owns this file and
// replaces this body. check needs no server, so it reads its own arguments
// and environment (sidecar.LoadLocal(os.Environ()) gives the configuration
// without requiring MEILISTREAM_MONGODB_URI).
func runCheck(args []string, stdout, stderr io.Writer) int {
	return notBuilt(stderr, "check")
}
