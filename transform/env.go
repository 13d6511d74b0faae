package transform

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// EnvKey is the override key of a job name: MEILISTREAM_JOB_<NAME>_<OPTION>
// names a job case-insensitively, with '_' for '-' (environment variable
// names hold neither lower case reliably nor '-'), so "my-Books" is
// "my_books".
func EnvKey(name string) string { return strings.ToLower(strings.ReplaceAll(name, "-", "_")) }

// envVar is the variable that sets option of the job with override key key.
func envVar(key, option string) string {
	return "MEILISTREAM_JOB_" + strings.ToUpper(key) + "_" + strings.ToUpper(option)
}

// envJob builds a job declared by environment alone (no file): a search job
// of collection name into index name with every default, or a mirror with
// "mirror", and the identity transform.
func envJob(name string, ov map[string]string, opts Options) (*Job, error) {
	j := &Job{Job: jobdef.Job{
		Name: name, Database: opts.Database, Collection: name, Index: name, PrimaryKey: jobdef.DefaultPrimaryKey, Kind: jobdef.Search,
		Reindex: "swap", Sweep: true, Dates: "iso",
		OnDocumentError: opts.Defaults.OnDocumentError, OnHistoryLost: opts.Defaults.OnHistoryLost,
		BatchSize: opts.Defaults.BatchSize, FlushInterval: opts.Defaults.FlushInterval,
		SkipUnchanged: true, Mode: opts.Defaults.Mode, Key: jobdef.DefaultKey,
		ScanInterval: jobdef.DefaultScanInterval, SweepInterval: jobdef.DefaultSweepInterval, ScanOverlap: jobdef.DefaultScanOverlap,
	}, opts: opts, envOnly: true, sizes: &docSizes{}}
	j.log = opts.Logger.With("job", name)
	if err := j.applyEnv(ov, opts.IndexPrefix); err != nil {
		return nil, err
	}
	if err := j.resolveDatabases(); err != nil {
		return nil, err
	}
	return j, nil
}

// applyEnv sets j's options from its overrides ov (may be nil) and puts
// prefix before a search job's index uid, once, before the job's first
// Apply (LoadFile calls it right after reading the file's options, so the
// ctx objects see the final collection). The Hash then covers both, as
// sha256(file hash, "\x00option=value" in option order,
// "\x00index_prefix=prefix"): either can point the job elsewhere, which
// must then be rebuilt; skip_unchanged, which changes no document, is left
// out. A value that is not accepted, or an option that is
// not one of the job's kind, is CONFIG_INVALID naming the variable and
// what it accepts.
func (j *Job) applyEnv(ov map[string]string, prefix string) error {
	key := EnvKey(j.Name)
	var problems []error
	bad := func(option, format string, args ...any) {
		problems = append(problems, errs.New(errs.ConfigInvalid, j.Name, "%s: %s: %s", j.file(), envVar(key, option), fmt.Sprintf(format, args...)))
	}
	options := make([]string, 0, len(ov))
	for o := range ov {
		options = append(options, o)
	}
	sort.Strings(options)
	// "mirror" first: it changes the job's kind, which decides the rest.
	if v, ok := ov["mirror"]; ok {
		switch {
		case validCollection(v) != "":
			bad("mirror", "%s; accepts a collection name of the replica", validCollection(v))
		case j.Function:
			bad("mirror", "the file exports a monstache-style function, which is a search transform; accepts nothing for it")
		default:
			for _, k := range searchOnlyKeys() {
				if j.keys[k] {
					bad("mirror", "the file sets %q, which a mirror job does not have; remove it from the file or the variable", k)
				}
			}
		}
		if j.Kind == jobdef.Search {
			j.Kind, j.Index, j.Reindex, j.Sweep, j.PrimaryKey, j.Dates = jobdef.Mirror, "", "inplace", false, "", ""
		}
		j.Mirror = v
	}
	for _, o := range options {
		if o == "mirror" {
			continue
		}
		opt, known := envOption(o)
		if !known {
			bad(o, "unknown per-job option; accepts %s", strings.ToUpper(strings.Join(EnvOptions(), ", ")))
			continue
		}
		if opt.Jobs != allJobs && opt.Jobs != j.Kind {
			bad(o, "not an option of a %s job; accepts nothing for it", j.Kind)
			continue
		}
		x, problem := opt.fromText(ov[o])
		if problem == "" && o == "index" {
			// Checked with the prefix it is written with.
			problem = validIndexUID(prefix + ov[o])
		}
		if problem == "" {
			problem = opt.set(j, x)
		}
		if problem != "" {
			bad(o, "%s; accepts %s", problem, opt.Accepts)
		}
	}
	if j.Kind == jobdef.Search && prefix != "" {
		if _, set := ov["index"]; !set {
			if msg := validIndexUID(prefix + j.Index); msg != "" {
				problems = append(problems, errs.New(errs.ConfigInvalid, j.Name, "%s: MEILISTREAM_INDEX_PREFIX: %s", j.file(), msg))
			}
		}
		j.Index = prefix + j.Index
	}
	if len(ov) > 0 {
		j.env = ov
	}
	// skip_unchanged decides what is sent, never what a document becomes:
	// turning it off (to rule it out while debugging) must not rebuild the
	// index.
	// Nor do verify and verify_repair, which only read it back (and write
	// what the transform gives anyway).
	// Nor does reindex_rate, which only paces a reindex, nor parallel,
	// which only says how many pods share it (and pods must agree on the
	// hash to share it).
	hashed := slices.DeleteFunc(slices.Clone(options), func(o string) bool {
		return o == "skip_unchanged" || o == "verify" || o == "verify_repair" || o == "reindex_rate" || o == "parallel"
	})
	if len(hashed) > 0 || j.envOnly || prefix != "" {
		j.Hash = j.envHash(j.Hash, hashed, ov, prefix)
		j.LegacyHash = j.envHash(j.LegacyHash, hashed, ov, prefix)
	}
	return joinErrs(problems)
}

// envHash is base followed by the overrides and the index prefix: the same
// sum the main package computed before overrides moved here, so an upgrade
// does not reindex.
func (j *Job) envHash(base string, options []string, ov map[string]string, prefix string) string {
	sum := sha256.New()
	sum.Write([]byte(base))
	for _, o := range options {
		fmt.Fprintf(sum, "\x00%s=%s", o, ov[o])
	}
	if j.Kind == jobdef.Search && prefix != "" {
		fmt.Fprintf(sum, "\x00index_prefix=%s", prefix)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// targetBy says what set j's destination, for conflict messages: the
// variable when an override did, else the file's key.
func (j *Job) targetBy() string {
	option := "index"
	if j.Kind == jobdef.Mirror {
		option = "mirror"
	}
	if v, ok := j.env[option]; ok {
		return fmt.Sprintf("%s=%s", envVar(EnvKey(j.Name), option), v)
	}
	return fmt.Sprintf("key %q", option)
}
