package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/transform"
)

// checkFlags are the flags of "meilistream check".
type checkFlags struct {
	sample string
}

func (f *checkFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.sample, "sample", "", "run the documents of `FILE` (MongoDB Extended JSON, one a line)\nthrough every job instead of each job's own samples")
}

// runCheck is "meilistream check [--sample FILE] [PATH...]": it loads every
// transform (the PATHs, each a *.js file or a folder, else
// MEILISTREAM_TRANSFORMS), prints each job and what it writes for each
// sample document (FILE: MongoDB Extended JSON, one document a line, run
// through every job; else each job's own `samples`), and exits 1 on any
// problem, 2 on bad usage. It needs no server: the configuration is read
// with config.LoadLocal, so MEILISTREAM_MONGODB_URI may be unset. The
// MEILISTREAM_JOB_<NAME>_<OPTION> overrides and MEILISTREAM_INDEX_PREFIX
// apply as in run, and the jobs they declare alone are checked too.
// console output of the transforms goes to stderr.
func runCheck(paths []string, f checkFlags, stdout, stderr io.Writer) int {
	sample := f.sample
	cfg, err := config.LoadLocal(os.Environ())
	if err != nil {
		return fail(stderr, err)
	}
	if len(paths) == 0 {
		paths = []string{cfg.Transforms}
	}
	if sample != "" {
		if _, err := os.Stat(sample); err != nil {
			return usageError(stderr, "check", "--sample: %v", err)
		}
	}
	// The options run loads with (transformOptions), per-job environment
	// overrides and the index prefix included, so check shows what run
	// would do; one runtime per job is enough here.
	opts := transformOptions(cfg, hclog.New(&hclog.LoggerOptions{Name: "check", Output: stderr, Level: hclog.Debug}))
	opts.Pool = 1
	if err := transform.CheckFiles(stdout, paths, sample, opts); err != nil {
		fmt.Fprintln(stderr, "meilistream check: the transforms have problems (listed above)")
		return exitFailed
	}
	return exitOK
}
