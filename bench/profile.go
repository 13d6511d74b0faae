package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// profileDirEnv names the directory the profiling hook writes into. It is
// not a MEILISTREAM_ variable: the sidecar refuses unknown ones.
const profileDirEnv = "BENCH_CPUPROFILE_DIR"

// profileHook is added to the sidecar's main package with go build
// -overlay when -cpuprofile is given, so the product carries no profiling
// code: each SIGUSR1 starts the next CPU profile (reindex.pprof, then
// follow.pprof), the one after stops it. The profiler costs the sidecar a
// little CPU: compare figures of runs without -cpuprofile.
const profileHook = `package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"
)

func init() {
	dir := os.Getenv("` + profileDirEnv + `")
	if dir == "" {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "verify" {
		// The verify process ends by itself (os.Exit runs no defer,
		// and a profile not stopped is lost): profile its first 5 s,
		// which -docs 150000 makes most of its run.
		f, err := os.Create(filepath.Join(dir, "verify.pprof"))
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		go func() {
			time.Sleep(5 * time.Second)
			pprof.StopCPUProfile()
			f.Close()
		}()
		return
	}
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGUSR1)
	go func() {
		for _, name := range []string{"reindex.pprof", "follow.pprof"} {
			<-c
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				panic(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				panic(err)
			}
			<-c
			pprof.StopCPUProfile()
			f.Close()
		}
	}()
}
`

// profileOverlay writes the hook and a go build -overlay file naming it as
// a file of the module's main package (the working directory), and returns
// the overlay file's path.
func profileOverlay(tmp string) (string, error) {
	hook := filepath.Join(tmp, "zz_benchprofile.go")
	if err := os.WriteFile(hook, []byte(profileHook), 0o644); err != nil {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(wd, "zz_benchprofile.go"): hook},
	})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(tmp, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

// toggleProfile starts or stops the sidecar's next CPU profile (with
// -cpuprofile); it gives the signal a moment to arrive, so the window
// matches the CPU counted.
func toggleProfile(c config, pid int) {
	if c.profile == "" {
		return
	}
	syscall.Kill(pid, syscall.SIGUSR1)
	time.Sleep(10 * time.Millisecond)
}
