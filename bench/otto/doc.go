// Package otto measures the articles example against monstache's way of
// running the same logic: a module of its own (bench/otto/go.mod), so
// monstache's JavaScript engine, otto, is never a dependency of the
// sidecar. Run it from this folder:
//
//	go test -run '^$' -bench ArticlesVsOtto -cpu 1
package otto
