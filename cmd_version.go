package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with
// -ldflags "-X main.version=v1.2.3" (the Dockerfile does). Without it the
// module version from the build info is used ("go install ...@v1.2.3"), and
// "devel" for a build from a checkout.
var version = ""

// buildVersion returns the version string this binary reports.
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// runVersion is the body of "meilistream version".
func runVersion(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "meilistream %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
