package main

import "context"

// runStatus is the body of "meilistream status".
//
// Placeholder from the CLI frame: the engine engineer owns this file and
// replaces this body with the real one. It receives the validated
// configuration and a logger in inv (see invocation in main.go).
func runStatus(ctx context.Context, inv *invocation) int {
	return notBuilt(inv.Stderr, "status")
}
