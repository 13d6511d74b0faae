package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// profileDirEnv names the directory the profiling hook writes into. It is
// not a MEILISTREAM_ variable: the sidecar refuses unknown ones.
const profileDirEnv = "BENCH_CPUPROFILE_DIR"

// memProfileDirEnv names the directory the heap hook writes into (with
// -memprofile).
const memProfileDirEnv = "BENCH_MEMPROFILE_DIR"

// profileHook is added to the sidecar's main package with go build
// -overlay when -cpuprofile is given, so the product carries no profiling
// code: each SIGUSR1 starts the next CPU profile (reindex.pprof, then
// follow.pprof), the one after stops it. The profiler costs the sidecar a
// little CPU: compare figures of runs without -cpuprofile.
const profileHook = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"syscall"
	"time"
)

// The heap at the process's peak: every 10 ms the memory the runtime holds
// from the system (mapped, less what it gave back) is read; at each new
// peak (by 2 MiB, at most every 200 ms: writing a profile allocates too,
// and so moves the peak it measures) the heap profile and the memory
// classes are written again, so what is left is the peak's. The heap profile is as of the
// last collection (what was live), the classes as of the peak (live plus
// the garbage the collector's goal lets accumulate).
func init() {
	dir := os.Getenv("` + memProfileDirEnv + `")
	if dir != "" && len(os.Args) > 1 && os.Args[1] == "verify" {
		// What the verify process allocated, all of its run, written
		// when Main returns (benchExit).
		runtime.MemProfileRate = 64 << 10
		benchStops = append(benchStops, func() {
			f, err := os.Create(filepath.Join(dir, "verify-allocs.pprof"))
			if err != nil {
				panic(err)
			}
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		})
		return
	}
	if dir == "" || len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	// One sample every 64 KB allocated rather than 512 KB: the live heap
	// is some megabytes, in objects of a few kilobytes.
	runtime.MemProfileRate = 64 << 10
	began := time.Now()
	var names []string
	for _, d := range metrics.All() {
		if d.Kind == metrics.KindUint64 && (filepath.Dir(d.Name) == "/memory/classes" ||
			filepath.Dir(d.Name) == "/memory/classes/heap" || d.Name == "/gc/heap/goal:bytes" || d.Name == "/gc/heap/live:bytes" ||
			filepath.Dir(d.Name) == "/memory/classes/metadata" || filepath.Dir(d.Name) == "/memory/classes/os-stacks") {
			names = append(names, d.Name)
		}
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	write := func(name string, f func(*os.File) error) {
		tmp := filepath.Join(dir, name+".tmp")
		out, err := os.Create(tmp)
		if err != nil {
			panic(err)
		}
		if err := f(out); err != nil {
			panic(err)
		}
		out.Close()
		os.Rename(tmp, filepath.Join(dir, name))
	}
	go func() {
		var peak uint64
		var wrote time.Time
		for range time.Tick(10 * time.Millisecond) {
			metrics.Read(s)
			var total, released uint64
			for _, v := range s {
				switch v.Name {
				case "/memory/classes/total:bytes":
					total = v.Value.Uint64()
				case "/memory/classes/heap/released:bytes":
					released = v.Value.Uint64()
				}
			}
			if total-released < peak+2<<20 || time.Since(wrote) < 200*time.Millisecond {
				continue
			}
			peak, wrote = total-released, time.Now()
			write("peak-heap.pprof", func(f *os.File) error { return pprof.Lookup("heap").WriteTo(f, 0) })
			write("peak-mem.txt", func(f *os.File) error {
				fmt.Fprintf(f, "held (total less released) %.1f MiB, %s after the start\n", float64(peak)/(1<<20), time.Since(began).Round(time.Millisecond))
				for _, v := range s {
					fmt.Fprintf(f, "%-50s %8.1f MiB\n", v.Name, float64(v.Value.Uint64())/(1<<20))
				}
				return nil
			})
		}
	}()
}

// benchStops write the profiles of a process that ends by itself.
var benchStops []func()

// benchExit is what main's os.Exit(Main()) becomes in the profiled build
// (profileOverlay): the profile is written before the process exits.
func benchExit(code int) int {
	for _, stop := range benchStops {
		stop()
	}
	return code
}

func init() {
	dir := os.Getenv("` + profileDirEnv + `")
	if dir == "" {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "verify" {
		// The verify process ends by itself: its whole run is profiled,
		// stopped by benchExit once Main returns (os.Exit runs no defer).
		f, err := os.Create(filepath.Join(dir, "verify.pprof"))
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		benchStops = append(benchStops, func() {
			pprof.StopCPUProfile()
			f.Close()
		})
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

// mainExit is the line of main.go the profiled build wraps in benchExit.
const mainExit = "os.Exit(Main())"

// profileOverlay writes the hook, a main.go whose exit goes through
// benchExit, and a go build -overlay file naming them as files of the
// module's main package (the working directory), and returns the overlay
// file's path.
func profileOverlay(tmp string) (string, error) {
	hook := filepath.Join(tmp, "zz_benchprofile.go")
	if err := os.WriteFile(hook, []byte(profileHook), 0o644); err != nil {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	src, err := os.ReadFile(filepath.Join(wd, "main.go"))
	if err != nil {
		return "", err
	}
	if strings.Count(string(src), mainExit) != 1 {
		return "", fmt.Errorf("main.go has no single %q for the profiling hook to wrap", mainExit)
	}
	mainGo := filepath.Join(tmp, "main.go")
	wrapped := strings.Replace(string(src), mainExit, "os.Exit(benchExit(Main()))", 1)
	if err := os.WriteFile(mainGo, []byte(wrapped), 0o644); err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(wd, "zz_benchprofile.go"): hook, filepath.Join(wd, "main.go"): mainGo},
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
