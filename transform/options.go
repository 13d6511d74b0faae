package transform

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"

	"github.com/meilistream/meilistream/jobdef"
)

// JobOption is one option of a job, as a transform file's exported object
// sets it (Key) and as MEILISTREAM_JOB_<NAME>_<OPTION> overrides it (Env).
// JobOptions is the one list of them: it decides the keys a file may have,
// the variables that override them, how the configuration checks those
// variables at start, what `meilistream check` shows of a job, and the
// list in the manual (JobOptionsMarkdown).
type JobOption struct {
	// Key is the key in the transform file: "primaryKey".
	Key string
	// Env is the OPTION part of MEILISTREAM_JOB_<NAME>_<OPTION>, in lower
	// case ("primary_key"); "" when only the file sets it.
	Env string
	// Jobs is the kind of job that has the option; -1: every kind.
	Jobs jobdef.Kind
	// Accepts says what values it takes, for messages and the manual.
	Accepts string
	// Default is its default, for the manual.
	Default string
	// Doc is one line for the manual.
	Doc string

	value   valueKind
	choices []string
	// form checks a variable's value beyond its kind, before any job is
	// known (at start); "" when fine.
	form func(v string) string
	// set checks a value of the option's kind against what a job accepts
	// and sets it on j; it returns what is wrong, "" when nothing.
	set func(j *Job, v any) string
	// label names the option in `check`'s one line about a search job
	// ("primary key id"); "" when the line leaves it out.
	label string
	get   func(j *Job) string
}

// valueKind is what kind of value an option holds, which decides how a
// file's value and a variable's text are read.
type valueKind int

const (
	textValue     valueKind = iota // a string
	choiceValue                    // one of the option's choices
	boolValue                      // true or false
	countValue                     // a whole number from 1 to maxCount
	durationValue                  // a positive Go duration
	listValue                      // names: an array of strings, or a variable's comma-separated list
	fileOnlyValue                  // read by code of its own (settings, samples, transform)
)

// maxCount bounds batchSize.
const maxCount = 100000

// MaxParallel bounds parallel (and MEILISTREAM_REINDEX_PARALLEL): the
// slots of a job's reindex.
const MaxParallel = 64

// allJobs marks an option of every kind of job.
const allJobs jobdef.Kind = -1

// JobOptions are every option of a job, in the manual's order.
var JobOptions = []JobOption{
	{Key: "collection", Env: "collection", Jobs: allJobs, value: textValue,
		Accepts: "a collection name of the source database, or `db.collection` (split at the first dot when no `database` is given)", Default: "the job name",
		Doc: "the source collection whose changes the job follows",
		set: func(j *Job, v any) string { return setName(&j.Collection, v.(string), validCollection) }},
	{Key: "database", Env: "database", Jobs: allJobs, value: textValue,
		Accepts: "a MongoDB database name (1 to 63 bytes, none of `/\\. \"$` or NUL)", Default: "`MEILISTREAM_MONGODB_DATABASE`",
		Doc:  "the source database of the collection; `collection` is then taken whole, dots and all",
		form: validDatabase,
		set: func(j *Job, v any) string {
			if msg := setName(&j.Database, v.(string), validDatabase); msg != "" {
				return msg
			}
			j.dbGiven = true
			return ""
		}},
	{Key: "index", Env: "index", Jobs: jobdef.Search, value: textValue,
		Accepts: "1 to 400 characters of A-Z a-z 0-9 _ - (with MEILISTREAM_INDEX_PREFIX before them)", Default: "the job name",
		Doc:  "the Meilisearch index uid the job writes",
		form: indexAlphabet,
		set:  func(j *Job, v any) string { j.Index = v.(string); return "" }},
	{Key: "primaryKey", Env: "primary_key", Jobs: jobdef.Search, value: textValue,
		Accepts: "a field name without dots", Default: "`\"" + jobdef.DefaultPrimaryKey + "\"`",
		Doc:   "the index's primary key, made from each document's _id",
		set:   func(j *Job, v any) string { return setName(&j.PrimaryKey, v.(string), validPrimaryKey) },
		label: "primary key", get: func(j *Job) string { return j.PrimaryKey }},
	{Key: "mirror", Env: "mirror", Jobs: jobdef.Mirror, value: textValue,
		Accepts: "a collection name of the replica", Default: "none: a search job",
		Doc: "makes the job a mirror job writing this collection of the replica MongoDB",
		set: func(j *Job, v any) string { return setName(&j.Mirror, v.(string), validCollection) }},
	{Key: "dates", Jobs: jobdef.Search, value: choiceValue, choices: []string{"iso", "epoch"},
		Accepts: "iso or epoch", Default: "`\"iso\"`",
		Doc:   "how dates are written to Meilisearch: ISO 8601 text, or milliseconds since 1970",
		set:   func(j *Job, v any) string { j.Dates = v.(string); return "" },
		label: "dates", get: func(j *Job) string { return j.Dates }},
	{Key: "reindex", Env: "reindex", Jobs: jobdef.Search, value: choiceValue, choices: []string{"swap", "inplace"},
		Accepts: "swap or inplace", Default: "`\"swap\"`",
		Doc:   "a reindex builds a new index and swaps it in, or rewrites the live one",
		set:   func(j *Job, v any) string { j.Reindex = v.(string); return "" },
		label: "reindex", get: func(j *Job) string { return j.Reindex }},
	{Key: "sweep", Env: "sweep", Jobs: allJobs, value: boolValue,
		Accepts: "true or false", Default: "true for search, false for mirror",
		Doc: "after an in-place reindex, delete what the reindex did not write",
		set: func(j *Job, v any) string { j.Sweep = v.(bool); return "" }},
	{Key: "onDocumentError", Env: "on_document_error", Jobs: allJobs, value: choiceValue, choices: []string{"skip", "fail"},
		Accepts: "skip or fail", Default: "`MEILISTREAM_ON_DOCUMENT_ERROR`",
		Doc: "a document the transform or the destination refuses is recorded and left out, or stops the job",
		set: func(j *Job, v any) string { j.OnDocumentError = v.(string); return "" }},
	{Key: "onHistoryLost", Env: "on_history_lost", Jobs: allJobs, value: choiceValue, choices: []string{"reindex", "fail"},
		Accepts: "reindex or fail", Default: "`MEILISTREAM_ON_HISTORY_LOST`",
		Doc: "a recorded position gone from the change history reindexes, or stops the job",
		set: func(j *Job, v any) string { j.OnHistoryLost = v.(string); return "" }},
	{Key: "batchSize", Env: "batch_size", Jobs: allJobs, value: countValue,
		Accepts: fmt.Sprintf("a whole number from 1 to %d", maxCount), Default: "`MEILISTREAM_BATCH_SIZE`",
		Doc: "how many pending changes trigger a send",
		set: func(j *Job, v any) string { j.BatchSize = v.(int); return "" }},
	{Key: "flushInterval", Env: "flush_interval", Jobs: allJobs, value: durationValue,
		Accepts: "a positive Go duration, e.g. 1s or 250ms", Default: "`MEILISTREAM_FLUSH_INTERVAL`",
		Doc: "the longest a pending change waits before a send",
		set: func(j *Job, v any) string { j.FlushInterval = v.(time.Duration); return "" }},
	{Key: "parallel", Env: "parallel", Jobs: allJobs, value: countValue,
		Accepts: fmt.Sprintf("a whole number from 1 to %d", MaxParallel), Default: "`MEILISTREAM_REINDEX_PARALLEL`",
		Doc: "the most chunks of a reindex read and transformed at once, by any of the pods running the same transform; 1: the holder reads alone",
		set: func(j *Job, v any) string {
			if n := v.(int); n > MaxParallel {
				return fmt.Sprintf("%d is more than %d", n, MaxParallel)
			}
			j.Parallel = v.(int)
			return ""
		}},
	{Key: "transformTimeout", Env: "transform_timeout", Jobs: allJobs, value: durationValue,
		Accepts: "a positive Go duration up to 1m, e.g. 1s or 250ms", Default: "`MEILISTREAM_TRANSFORM_TIMEOUT`",
		Doc: "how long one call of the transform may take",
		set: func(j *Job, v any) string {
			if d := v.(time.Duration); d > MaxTimeout {
				return fmt.Sprintf("%s is more than the longest limit, %s", d, MaxTimeout)
			}
			j.Timeout = v.(time.Duration)
			return ""
		}},
	{Key: "skipUnchanged", Env: "skip_unchanged", Jobs: allJobs, value: boolValue,
		Accepts: "true or false", Default: "`true`",
		Doc: "an update that touches no field the transform read sends nothing (the destination holds its result already); a transform asking the clock or `Math.random()` is always sent",
		set: func(j *Job, v any) string { j.SkipUnchanged = v.(bool); return "" }},
	{Key: "verify", Env: "verify", Jobs: allJobs, value: boolValue,
		Accepts: "true or false", Default: "`false`",
		Doc: "the job's holder compares its destination with the transform of the collection every `MEILISTREAM_VERIFY_INTERVAL`, at `MEILISTREAM_VERIFY_RATE`, as `meilistream verify` does, and counts the drift in metrics",
		set: func(j *Job, v any) string { j.Verify = v.(bool); return "" }},
	{Key: "verifyRepair", Env: "verify_repair", Jobs: allJobs, value: boolValue,
		Accepts: "true or false", Default: "`false`",
		Doc: "the background verify (`verify`) also writes again what differs, in order with the stream",
		set: func(j *Job, v any) string { j.VerifyRepair = v.(bool); return "" }},
	{Key: "reindexRate", Env: "reindex_rate", Jobs: allJobs, value: countValue,
		Accepts: fmt.Sprintf("a whole number of documents per second from 1 to %d", maxCount), Default: "`MEILISTREAM_REINDEX_RATE`",
		Doc: "bounds the documents per second the job's reindex reads, across all pods; a change restarts the job, which resumes its reindex, and rebuilds nothing",
		set: func(j *Job, v any) string { j.ReindexRate = v.(int); return "" }},
	{Key: "fields", Env: "fields", Jobs: allJobs, value: listValue,
		Accepts: fmt.Sprintf("up to %d top-level field names, without dots or a leading `$` (a variable: separated by commas)", maxFields), Default: "none: every field",
		Doc: "the fields the transform reads: the server drops updates touching none of them, and trims every document the transform sees to them and `_id`",
		set: func(j *Job, v any) string { return setFields(j, v.([]string)) }},
	{Key: "mode", Env: "mode", Jobs: allJobs, value: choiceValue, choices: []string{jobdef.ModeStream, jobdef.ModeScan, jobdef.ModeAuto},
		Accepts: "stream, scan or auto", Default: "`MEILISTREAM_MODE`",
		Doc: "how the job learns of changes: the change stream, a scan of the collection by `key` (a source without change streams, such as a standalone mongod; see docs/scan-mode.md), or the stream when the source has one and the scan otherwise",
		set: func(j *Job, v any) string { j.Mode = v.(string); return "" }},
	{Key: "key", Env: "key", Jobs: allJobs, value: textValue,
		Accepts: "a field path (dots allowed) whose value is a date, or a number that grows with every write", Default: "`\"" + jobdef.DefaultKey + "\"`",
		Doc:  "scan mode: the field every write of the application sets, which the scan reads the collection by",
		form: keyForm,
		set:  func(j *Job, v any) string { return setName(&j.Key, v.(string), keyForm) }},
	{Key: "scanInterval", Env: "scan_interval", Jobs: allJobs, value: durationValue,
		Accepts: "a positive Go duration, e.g. 5s", Default: "`5s`",
		Doc: "scan mode: the pause between two passes of the scan",
		set: func(j *Job, v any) string { j.ScanInterval = v.(time.Duration); return "" }},
	{Key: "sweepInterval", Env: "sweep_interval", Jobs: allJobs, value: durationValue,
		Accepts: "a positive Go duration, e.g. 5m", Default: "`5m`",
		Doc: "scan mode: how often the destination's ids are compared with the collection's, deleting what the collection no longer holds",
		set: func(j *Job, v any) string { j.SweepInterval = v.(time.Duration); return "" }},
	{Key: "scanOverlap", Env: "scan_overlap", Jobs: allJobs, value: textValue,
		Accepts: "a Go duration or a plain number, 0 or more", Default: "`\"" + jobdef.DefaultScanOverlap + "\"`",
		Doc:  "scan mode: how far behind its cursor each pass reads again, for writes that land late with an older key: for a date key a duration (a plain number: milliseconds), for a number key that many of its units (a duration: its seconds)",
		form: overlapForm,
		set:  func(j *Job, v any) string { return setName(&j.ScanOverlap, v.(string), overlapForm) }},
	{Key: "scanKeys", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "an object of field paths by collection the job looks up or relates to (`coll`, or `db.coll`)", Default: "none: each by `key`",
		Doc: "scan mode: the field a related collection is scanned by, where it is not the job's `key`"},
	{Key: "settings", Jobs: jobdef.Search, value: fileOnlyValue,
		Accepts: "an object of Meilisearch index settings", Default: "none: a reindex copies the live index's",
		Doc: "index settings applied when the job starts and to the index of each reindex"},
	{Key: "lookups", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "an object of lookups by name: `{from, database, localField, foreignField, project, many, as}` (`from` may be `db.collection` when no `database` is given)", Default: "none",
		Doc: "documents of other collections, of the job's database or another, joined in, one query per batch; a change to one sends its dependents again"},
	{Key: "relate", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "an array of `{namespace, srcField, matchField}` (monstache's [[relate]]; namespace `db.collection`, or a collection of the job's database)", Default: "none",
		Doc: "a change to a document of namespace sends again the job's documents whose matchField equals its srcField"},
	{Key: "related", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "an object of arrays of documents by collection, in MongoDB Extended JSON", Default: "none",
		Doc: "the related collections' documents `meilistream check` resolves the lookups against"},
	{Key: "samples", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "an array of documents in MongoDB Extended JSON", Default: "none",
		Doc: "documents `meilistream check` runs the transform on"},
	{Key: "transform", Jobs: allJobs, value: fileOnlyValue,
		Accepts: "a function `transform(doc, ctx)`", Default: "the identity",
		Doc: "turns a source document into what the job writes; null leaves it out"},
}

// jobOption returns the option of file key key, or false.
func jobOption(key string) (JobOption, bool) {
	for _, o := range JobOptions {
		if o.Key == key {
			return o, true
		}
	}
	return JobOption{}, false
}

// envOption returns the option of MEILISTREAM_JOB_<NAME>_<option> (option
// in lower case), or false.
func envOption(option string) (JobOption, bool) {
	for _, o := range JobOptions {
		if o.Env != "" && o.Env == option {
			return o, true
		}
	}
	return JobOption{}, false
}

// EnvOptions returns the OPTION parts MEILISTREAM_JOB_<NAME>_<OPTION>
// accepts, in lower case and the manual's order.
func EnvOptions() []string {
	var out []string
	for _, o := range JobOptions {
		if o.Env != "" {
			out = append(out, o.Env)
		}
	}
	return out
}

// fileKeys lists the keys a transform file may set, sorted, for messages.
func fileKeys() string {
	keys := make([]string, len(JobOptions))
	for i, o := range JobOptions {
		keys[i] = o.Key
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// searchOnlyKeys are the file keys of search jobs alone, in the manual's
// order.
func searchOnlyKeys() []string {
	var out []string
	for _, o := range JobOptions {
		if o.Jobs == jobdef.Search {
			out = append(out, o.Key)
		}
	}
	return out
}

// CheckOverride checks the value of MEILISTREAM_JOB_<NAME>_<option> (option
// in lower case) as far as it can be without the job: that the option
// exists and the value is of its kind. It returns what is wrong with the
// value and what the option accepts, or "" when the value is fine, and
// known false for an option that does not exist.
func CheckOverride(option, value string) (problem, accepts string, known bool) {
	o, ok := envOption(option)
	if !ok {
		return "", "", false
	}
	if _, problem := o.fromText(value); problem != "" {
		return problem, o.Accepts, true
	}
	return "", "", true
}

// fromText reads a variable's value of the option's kind.
func (o JobOption) fromText(v string) (any, string) {
	q := strconv.Quote(v)
	switch o.value {
	case choiceValue:
		for _, c := range o.choices {
			if v == c {
				return v, ""
			}
		}
		return nil, q + " is not a choice"
	case boolValue:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, q + " is not a boolean"
		}
		return b, ""
	case countValue:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCount {
			return nil, fmt.Sprintf("%s is not a whole number from 1 to %d", q, maxCount)
		}
		return n, ""
	case durationValue:
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, q + " is not a positive Go duration"
		}
		return d, ""
	case listValue:
		var names []string
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if problem := checkFields(names); problem != "" {
			return nil, problem
		}
		return names, ""
	}
	if o.form != nil {
		if problem := o.form(v); problem != "" {
			return nil, problem
		}
	}
	return v, ""
}

// fromJS reads a file's value of the option's kind.
func (o JobOption) fromJS(val goja.Value) (any, string) {
	switch o.value {
	case boolValue:
		if b, isBool := val.Export().(bool); isBool && !isObject(val) {
			return b, ""
		}
		return nil, fmt.Sprintf("must be true or false, not %s", typeName(val))
	case countValue:
		f := val.ToFloat()
		if isObject(val) || !goja.IsNumber(val) || f != math.Trunc(f) || f < 1 || f > maxCount {
			return nil, fmt.Sprintf("must be an integer from 1 to %d", maxCount)
		}
		return int(f), ""
	case durationValue:
		s, isStr := val.Export().(string)
		d, err := time.ParseDuration(s)
		if !isStr || isObject(val) || err != nil || d <= 0 {
			return nil, `must be a positive Go duration string such as "500ms" or "2s"`
		}
		return d, ""
	case listValue:
		o, isObj := val.(*goja.Object)
		if !isObj || o.ClassName() != "Array" {
			return nil, fmt.Sprintf("must be an array of field names, not %s", typeName(val))
		}
		n := o.Get("length").ToInteger()
		if n > maxFields {
			return nil, fmt.Sprintf("holds %d names, more than %d", n, maxFields)
		}
		names := make([]string, 0, n)
		for i := int64(0); i < n; i++ {
			e := o.Get(strconv.FormatInt(i, 10))
			s, isStr := e.Export().(string)
			if !isStr || isObject(e) {
				return nil, fmt.Sprintf("element %d must be a field name, not %s", i, typeName(e))
			}
			names = append(names, s)
		}
		if problem := checkFields(names); problem != "" {
			return nil, problem
		}
		return names, ""
	}
	s, isStr := val.Export().(string)
	if !isStr || isObject(val) {
		return nil, fmt.Sprintf("must be a string, not %s", typeName(val))
	}
	if o.value == choiceValue {
		for _, c := range o.choices {
			if s == c {
				return s, ""
			}
		}
		return nil, fmt.Sprintf("must be \"%s\", got %q", strings.Join(o.choices, `" or "`), s)
	}
	return s, ""
}

// maxFields bounds a job's fields: each becomes a clause of the change
// stream's filter and of its projection.
const maxFields = 1000

// checkFields says what is wrong with a list of top-level field names,
// "" when nothing. A name with a dot would be a path to MongoDB (a
// projection, an update's key), and one starting with '$' an operator,
// so neither can name a top-level field there; _id is always kept.
func checkFields(names []string) string {
	if len(names) == 0 {
		return "an empty list (leave it out to read every field)"
	}
	if len(names) > maxFields {
		return fmt.Sprintf("%d names, more than %d", len(names), maxFields)
	}
	for _, n := range names {
		switch {
		case n == "":
			return "an empty field name"
		case strings.ContainsAny(n, ".\x00"):
			return fmt.Sprintf("%q is not a top-level field name (no dots)", clipText(n, maxKeyText))
		case strings.HasPrefix(n, "$"):
			return fmt.Sprintf("%q starts with '$'", clipText(n, maxKeyText))
		}
	}
	return ""
}

// setFields sets j's fields: each name once, in the order given, _id
// left out (it is always there).
func setFields(j *Job, names []string) string {
	if problem := checkFields(names); problem != "" {
		return problem
	}
	out := make([]string, 0, len(names)) // only _id: not nil, which is every field
	for _, n := range names {
		if n != "_id" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	j.Fields = out
	return ""
}

// setName sets *dst to s when valid finds nothing wrong with it.
func setName(dst *string, s string, valid func(string) string) string {
	if msg := valid(s); msg != "" {
		return msg
	}
	*dst = s
	return ""
}

// indexAlphabet checks that v holds only what a Meilisearch index uid may
// (its length and the reserved suffix are checked with the job, prefix
// included).
func indexAlphabet(v string) string {
	if !jobdef.InIDAlphabet(v) {
		return fmt.Sprintf("%q is not a Meilisearch index uid", v)
	}
	return ""
}

// describeOptions is the part of `check`'s line about a search job that
// names its options: "primary key id, dates iso, reindex swap".
func (j *Job) describeOptions() string {
	var parts []string
	for _, o := range JobOptions {
		if o.label != "" && (o.Jobs == allJobs || o.Jobs == j.Kind) {
			parts = append(parts, o.label+" "+o.get(j))
		}
	}
	return strings.Join(parts, ", ")
}

// JobOptionsMarkdown is the manual's table of the options of a job, one
// row per option of JobOptions: the transform file's key, the variable that
// overrides it, the jobs that have it, what it accepts, its default and
// what it does.
func JobOptionsMarkdown() string {
	var b strings.Builder
	b.WriteString("| Key | Variable | Jobs | Accepts | Default | What it does |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, o := range JobOptions {
		env := "—"
		if o.Env != "" {
			env = "`MEILISTREAM_JOB_<NAME>_" + strings.ToUpper(o.Env) + "`"
		}
		jobs := "search, mirror"
		if o.Jobs != allJobs {
			jobs = o.Jobs.String()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", o.Key, env, jobs, o.Accepts, o.Default, o.Doc)
	}
	return b.String()
}

// keyForm checks a scan key: a field path MongoDB can sort by.
func keyForm(v string) string {
	switch {
	case v == "":
		return "an empty field path"
	case strings.HasPrefix(v, "$") || strings.Contains(v, ".$"):
		return fmt.Sprintf("%q starts a path element with '$'", clipText(v, maxKeyText))
	case strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") || strings.Contains(v, ".."):
		return fmt.Sprintf("%q has an empty path element", clipText(v, maxKeyText))
	case strings.ContainsRune(v, 0):
		return "a field path holding a NUL"
	case v == "_id":
		return "_id is not an update key (it never changes; the scan orders by it already)"
	}
	return ""
}

// overlapForm checks a scanOverlap (jobdef.ScanOverlapOf).
func overlapForm(v string) string {
	if _, _, ok := jobdef.ScanOverlapOf(v); !ok || v == "" {
		return strconv.Quote(v) + " is not a Go duration or a plain number, 0 or more"
	}
	return ""
}
