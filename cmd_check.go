package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/config"
	"github.com/meilistream/meilistream/sidecar/engine"
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
// with config.LoadLocal, so MEILISTREAM_MONGODB_URI may be unset; when it
// is set, monstache-style transforms read that MongoDB (findId, findOne,
// find, pipe) as in run, and without it (or when it cannot be reached,
// said once) their samples that read are reported as not run, which is
// not a problem: the rest of the check stands. The
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
	opts.NoReaderHint = "set MEILISTREAM_MONGODB_URI to run it against the source MongoDB"
	if cfg.MongoDBURI != "" && mayRead(paths, opts) {
		reader, closeReader, err := checkReader(cfg)
		if err != nil {
			// The transforms are what check judges: the samples that
			// read MongoDB are reported as not run, the rest stands.
			fmt.Fprintf(stderr, "meilistream check: %s\n", errs.Format(err))
			opts.NoReaderHint = "MongoDB could not be reached (above)"
		} else {
			defer closeReader()
			opts.Reader = reader
		}
	}
	if err := transform.CheckFiles(stdout, paths, sample, opts); err != nil {
		fmt.Fprintln(stderr, "meilistream check: the transforms have problems (listed above)")
		return exitFailed
	}
	return exitOK
}

// mayRead says whether a job of paths is a monstache-style function, the
// only transforms that read MongoDB: check connects to it for them alone,
// so a CI step whose MEILISTREAM_MONGODB_URI it cannot reach is not held
// up by transforms that never read.
func mayRead(paths []string, opts transform.Options) bool {
	opts.Logger = hclog.NewNullLogger() // CheckFiles reports the problems
	set, _ := transform.LoadFiles(paths, opts)
	if set == nil {
		return false
	}
	defer set.Close()
	for _, j := range set.Jobs() {
		if j.Function {
			return true
		}
	}
	return false
}

// checkTimeout bounds check's wait for the source MongoDB: check is a CI
// step, where a wrong address must not hang it for the driver's 30 s.
const checkTimeout = 5 * time.Second

// checkReader is what monstache-style transforms read during check when
// MEILISTREAM_MONGODB_URI is set: the source MongoDB, as run reads it
// (its primary, the configured database), reached once before the
// samples run so an unreachable server is said once, not per sample.
func checkReader(cfg config.Config) (transform.Reader, func(), error) {
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.MongoDBURI).SetAppName("meilistream").SetServerSelectionTimeout(checkTimeout))
	if err != nil {
		return nil, nil, errs.Wrap(errs.ConfigInvalid, "", err, "MEILISTREAM_MONGODB_URI")
	}
	closeClient := func() {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		_ = client.Disconnect(ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		closeClient()
		return nil, nil, errs.Wrap(errs.Failed, "", err, "reach the source MongoDB (MEILISTREAM_MONGODB_URI) to run the samples of transforms that read it; they are not run")
	}
	db := client.Database(cfg.MongoDBDatabase)
	return engine.New(db, nil, nil, engine.Config{}, nil, nil).Reader(), closeClient, nil
}
