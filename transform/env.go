package transform

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
)

// EnvKey is the override key of a job name: MEILISTREAM_JOB_<NAME>_<OPTION>
// names a job case-insensitively, with '_' for '-' (environment variable
// names hold neither lower case reliably nor '-'), so "my-Books" is
// "my_books".
func EnvKey(name string) string { return strings.ToLower(strings.ReplaceAll(name, "-", "_")) }

// envOptions are the OPTION parts of MEILISTREAM_JOB_<NAME>_<OPTION> (as
// sidecar.JobOptions, which checks them first when the environment is read).
var envOptions = []string{
	"batch_size", "collection", "flush_interval", "index", "mirror", "on_document_error",
	"on_history_lost", "primary_key", "reindex", "sweep", "transform_timeout",
}

// envVar is the variable that sets option of the job with override key key.
func envVar(key, option string) string {
	return "MEILISTREAM_JOB_" + strings.ToUpper(key) + "_" + strings.ToUpper(option)
}

// envJob builds a job declared by environment alone (no file): a search job
// of collection name into index name with every default, or a mirror with
// "mirror", and the identity transform.
func envJob(name string, ov map[string]string, opts Options) (*Job, error) {
	j := &Job{
		Name: name, Collection: name, Index: name, PrimaryKey: DefaultPrimaryKey, Kind: Search,
		Reindex: "swap", Sweep: true, Dates: "iso",
		OnDocumentError: opts.Defaults.OnDocumentError, OnHistoryLost: opts.Defaults.OnHistoryLost,
		BatchSize: opts.Defaults.BatchSize, FlushInterval: opts.Defaults.FlushInterval,
		opts: opts, envOnly: true,
	}
	j.log = opts.Logger.With("job", name)
	if err := j.applyEnv(ov, opts.IndexPrefix); err != nil {
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
// must then be rebuilt. A value that is not accepted, or an option that is
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
			for _, k := range []string{"index", "primaryKey", "dates", "settings", "reindex"} {
				if j.keys[k] {
					bad("mirror", "the file sets %q, which a mirror job does not have; remove it from the file or the variable", k)
				}
			}
		}
		if j.Kind == Search {
			j.Kind, j.Index, j.Reindex, j.Sweep, j.PrimaryKey, j.Dates = Mirror, "", "inplace", false, "", ""
		}
		j.Mirror = v
	}
	oneOf := func(option, v string, dst *string, vals ...string) {
		for _, c := range vals {
			if v == c {
				*dst = v
				return
			}
		}
		bad(option, "%q is not a choice; accepts %s", v, strings.Join(vals, " or "))
	}
	duration := func(option, v string, dst *time.Duration) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad(option, "%q is not a positive Go duration; accepts e.g. 1s or 250ms", v)
			return
		}
		*dst = d
	}
	searchOnly := func(option string) bool {
		if j.Kind == Mirror {
			bad(option, "not an option of a mirror job; accepts nothing for it")
			return false
		}
		return true
	}
	for _, o := range options {
		v := ov[o]
		switch o {
		case "mirror":
		case "collection":
			if msg := validCollection(v); msg != "" {
				bad(o, "%s; accepts a collection name of the source database", msg)
			} else {
				j.Collection = v
			}
		case "index":
			if !searchOnly(o) {
				continue
			}
			if msg := validIndexUID(prefix + v); msg != "" {
				bad(o, "%s; accepts 1 to 400 characters of A-Z a-z 0-9 _ - (with MEILISTREAM_INDEX_PREFIX before them)", msg)
			} else {
				j.Index = v
			}
		case "primary_key":
			if !searchOnly(o) {
				continue
			}
			if msg := validPrimaryKey(v); msg != "" {
				bad(o, "%s; accepts a field name without dots", msg)
			} else {
				j.PrimaryKey = v
			}
		case "reindex":
			if searchOnly(o) {
				oneOf(o, v, &j.Reindex, "swap", "inplace")
			}
		case "sweep":
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad(o, "%q is not a boolean; accepts true or false", v)
			} else {
				j.Sweep = b
			}
		case "on_history_lost":
			oneOf(o, v, &j.OnHistoryLost, "reindex", "fail")
		case "on_document_error":
			oneOf(o, v, &j.OnDocumentError, "skip", "fail")
		case "batch_size":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100000 {
				bad(o, "%q is not a whole number from 1 to 100000; accepts a whole number from 1 to 100000", v)
			} else {
				j.BatchSize = n
			}
		case "flush_interval":
			duration(o, v, &j.FlushInterval)
		case "transform_timeout":
			duration(o, v, &j.Timeout)
			if j.Timeout > MaxTimeout {
				bad(o, "%q is more than the longest limit; accepts a positive Go duration up to %s", v, MaxTimeout)
				j.Timeout = 0
			}
		default:
			bad(o, "unknown per-job option; accepts %s", strings.ToUpper(strings.Join(envOptions, ", ")))
		}
	}
	if j.Kind == Search && prefix != "" {
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
	if len(options) > 0 || j.envOnly || prefix != "" {
		j.Hash = j.envHash(j.Hash, options, ov, prefix)
		j.LegacyHash = j.envHash(j.LegacyHash, options, ov, prefix)
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
	if j.Kind == Search && prefix != "" {
		fmt.Fprintf(sum, "\x00index_prefix=%s", prefix)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// targetBy says what set j's destination, for conflict messages: the
// variable when an override did, else the file's key.
func (j *Job) targetBy() string {
	option := "index"
	if j.Kind == Mirror {
		option = "mirror"
	}
	if v, ok := j.env[option]; ok {
		return fmt.Sprintf("%s=%s", envVar(EnvKey(j.Name), option), v)
	}
	return fmt.Sprintf("key %q", option)
}
