package transform

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// Defaults applied when Options leave a field zero (JobDefaults take
// jobdef's).
const (
	DefaultTimeout        = time.Second
	DefaultMaxResultBytes = 1 << 20
)

// Options configure loading and running transforms.
type Options struct {
	// Pool is the number of JavaScript runtimes per job, each used by one
	// goroutine at a time; 0 means runtime.GOMAXPROCS(0): the container's
	// CPU limit (Go 1.25+ sets it from the cgroup), not the host's CPUs.
	Pool int
	// Timeout limits one transform call (MEILISTREAM_TRANSFORM_TIMEOUT);
	// 0 means DefaultTimeout; more than MaxTimeout is refused by Load.
	Timeout time.Duration
	// MaxResultBytes refuses a search result larger than this many bytes
	// of JSON; 0 means DefaultMaxResultBytes.
	MaxResultBytes int
	// MaxMirrorBytes refuses a mirror result larger than this many bytes
	// of BSON, measured on the document as the replica stores it (_id
	// first); 0 means jobdef.DefaultMaxMirrorBytes, the replica's own limit
	// (maxBsonObjectSize in its hello answer, 16 MiB on every MongoDB
	// server): what a replica stores has nothing to do with what
	// Meilisearch takes.
	MaxMirrorBytes int
	// Logger receives console output (one logger per job, With("job",
	// name)) and reload reports; nil discards.
	Logger hclog.Logger
	// Defaults are the per-job options a file does not set.
	Defaults JobDefaults
	// Database is the source database name, only used for the `ns`
	// argument ("db.collection") of monstache-style function transforms.
	Database string
	// Overrides are the per-job options of the environment,
	// MEILISTREAM_JOB_<NAME>_<OPTION>=value, as config.Config.Jobs holds
	// them: override key (EnvKey of the job name) -> option in lower case
	// ("index", "primary_key", ...) -> value. They are applied to every job
	// as it loads, before the one-job-per-destination check, and the job's
	// Hash covers them. A key no file's job name folds to declares a job
	// by environment alone (no file: the identity transform). Two files
	// whose names fold to one key that has overrides (Upper.js and
	// upper.js, my-job.js and my_job.js) are CONFIG_INVALID, both.
	Overrides map[string]map[string]string
	// IndexPrefix (MEILISTREAM_INDEX_PREFIX) goes before every search job's
	// index uid; the job's Hash covers it.
	IndexPrefix string
	// Reader serves the findId, findOne, find and pipe globals of
	// monstache-style function transforms (monstache.go); nil: the call
	// fails with ErrNoMongoDB, whatever the script does with the throw
	// (meilistream check without a MongoDB).
	Reader Reader
	// NoReaderHint is what Check says to do to run a sample whose
	// transform reads MongoDB when Reader is nil.
	NoReaderHint string
	// OnRead, when set, is called after each of those calls, on the
	// transform's goroutine (keep it cheap): the metrics' hook.
	OnRead func(ReadStat)
	// MemoryLimit bounds, in bytes, how far the heap may grow past its
	// steady size while a job's calls run (MEILISTREAM_TRANSFORM_MEMORY,
	// memory.go): the calls running then are stopped. 0 means
	// DefaultMemoryLimit; less than 0, no bound.
	MemoryLimit int64
	// Private are the collections of Database the sidecar itself writes,
	// each with what it is for the messages ("the state collection
	// (MEILISTREAM_STATE_COLLECTION)"): no transform may read them
	// (private.go). Load refuses a job whose lookups or relates name
	// one (CONFIG_INVALID); findId, findOne, find and pipe
	// fail the document that names one (TRANSFORM_FAILED).
	Private map[string]string
}

// JobDefaults are the global per-job defaults (from the environment) that a
// transform file may override key by key. Zero fields take jobdef's Default*
// constants.
type JobDefaults struct {
	OnDocumentError string        // "skip" | "fail"
	OnHistoryLost   string        // "reindex" | "fail"
	BatchSize       int           // documents per batch
	FlushInterval   time.Duration // longest wait before a partial batch is sent
	Mode            string        // jobdef.ModeStream | ModeScan | ModeAuto
}

func (o Options) withDefaults() Options {
	if o.Pool <= 0 {
		o.Pool = runtime.GOMAXPROCS(0)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = DefaultMaxResultBytes
	}
	if o.MaxMirrorBytes <= 0 {
		o.MaxMirrorBytes = jobdef.DefaultMaxMirrorBytes
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	d := &o.Defaults
	if d.OnDocumentError == "" {
		d.OnDocumentError = jobdef.DefaultOnDocumentError
	}
	if d.OnHistoryLost == "" {
		d.OnHistoryLost = jobdef.DefaultOnHistoryLost
	}
	if d.BatchSize <= 0 {
		d.BatchSize = jobdef.DefaultBatchSize
	}
	if d.FlushInterval <= 0 {
		d.FlushInterval = jobdef.DefaultFlushInterval
	}
	if d.Mode == "" {
		d.Mode = jobdef.DefaultMode
	}
	return o
}

// Job is one loaded transform file: the job's definition (jobdef.Job) and
// its compiled transform. Jobs come from Load or a Watcher, environment
// overrides and the index prefix already applied (Options.Overrides);
// their fields are read-only once loaded. A job declared by environment alone, or a Job
// built by hand, has no transform: Apply is then the identity.
type Job struct {
	jobdef.Job

	rt   *jobRuntime // nil: identity
	opts Options     // with defaults
	// det remembers a call of the transform asking for the clock or
	// chance (reads.go); shared by the job's runtimes.
	det *determinism
	log hclog.Logger
	// keys are the option keys the file set; env are the overrides applied
	// (option -> value); envOnly says the job is declared by environment
	// alone.
	keys    map[string]bool
	env     map[string]string
	envOnly bool
	// dbGiven: the file or an override set `database`, so `collection` is
	// a collection name whole, never db.collection.
	dbGiven bool
	// underscore says the file names `_`: its runtimes load Underscore as
	// they are made (underscore.go).
	underscore bool
	// sizes sizes the buffers its documents are written into (docsize.go).
	sizes *docSizes
}

// Operation is what happened to the document, as ctx.operation shows it.
type Operation string

// The operations a transform sees.
const (
	OpInsert  Operation = "insert"
	OpUpdate  Operation = "update"
	OpReplace Operation = "replace"
	OpReindex Operation = "reindex"
)

// Result is what a job makes of one document.
type Result struct {
	// Skip says the transform kept the document out (null, undefined or
	// false): it must not be in the destination (delete it if it is).
	Skip bool
	// ID is the destination id: for search the Meilisearch id from IndexID
	// (string or int64), for mirror the source _id as a bson.RawValue. Set
	// also when Skip is true, for the delete.
	ID any
	// Reads is what the call read of its input, for an update of a job
	// with SkipUnchanged that has its updateDescription (nil otherwise):
	// see Reads.UnchangedBy.
	Reads *Reads
	// JSON is the search document as Meilisearch receives it: a JSON
	// object, primary key set. Nil for mirror.
	JSON []byte
	// Doc is JSON as Go values (map[string]any, []any, string, int64,
	// uint64, float64, bool, nil), set by Apply only (not by ApplyTo).
	Doc map[string]any
	// Raw is the mirror document: BSON with _id first and the original BSON
	// types kept. Nil for search.
	Raw bson.Raw
}

// Apply runs the job's transform on doc (a whole source document with its
// _id) and returns what to write. It is safe for concurrent use; each call
// borrows one runtime from the job's pool, and waits for one when all are
// busy (ctx ends the wait). updateDesc is the change event's
// updateDescription, or nil.
//
// Per-document problems are *errs.Error with Job set: TRANSFORM_FAILED (the
// transform threw or timed out), NOT_A_DOCUMENT (the result is not a
// document, holds NaN, a function, a cycle..., or is too large; the message
// says the path and the type, never a value) and ID_MISMATCH (the result's
// primary key or _id is not the document's). A context error is returned
// as it is.
func (j *Job) Apply(ctx context.Context, doc bson.Raw, op Operation, updateDesc bson.Raw) (Result, error) {
	return j.apply(ctx, doc, op, updateDesc, nil)
}

// apply is Apply with the document's lookups resolved.
func (j *Job) apply(ctx context.Context, doc bson.Raw, op Operation, updateDesc bson.Raw, lookups jobdef.LookupResults) (Result, error) {
	res, _, err := j.ApplyWith(ctx, nil, doc, op, updateDesc, lookups)
	if err != nil || res.JSON == nil {
		return res, err
	}
	m, err := decodeJSON(res.JSON)
	if err != nil {
		return Result{}, errs.Wrap(errs.Failed, j.Name, err, "read back the document written")
	}
	res.Doc = m.(map[string]any)
	return res, nil
}

// ApplyTo is Apply for the hot path: a search document is written at the
// end of dst (returned, grown), Result.JSON being that part of it, and no
// Result.Doc is made. Documents written one after the other into one
// buffer cost no allocation each.
func (j *Job) ApplyTo(ctx context.Context, dst []byte, doc bson.Raw, op Operation, updateDesc bson.Raw) (Result, []byte, error) {
	return j.ApplyWith(ctx, dst, doc, op, updateDesc, nil)
}

// ApplyWith is ApplyTo for a job with lookups: lookups are the matches of
// the document's lookups (LookupResults, in the order of j.Lookups; nil
// for none), on ctx.lookups and, for a lookup with As (or every lookup of
// an identity job), on the document.
func (j *Job) ApplyWith(ctx context.Context, dst []byte, doc bson.Raw, op Operation, updateDesc bson.Raw, lookups jobdef.LookupResults) (Result, []byte, error) {
	return j.applyWith(ctx, dst, doc, op, updateDesc, lookups, j.tracks(op, updateDesc))
}

// tracks says whether a call of op with updateDesc keeps what it reads
// (Result.Reads): an update of a job with skipUnchanged, with its
// updateDescription. Without one the engine cannot tell what the update
// touched (UnchangedBy is false), so the write is sent whatever the call
// read, and keeping its reads would buy nothing.
func (j *Job) tracks(op Operation, updateDesc bson.Raw) bool {
	return op == OpUpdate && j.SkipUnchanged && len(updateDesc) > 0
}

// applyWith is ApplyWith, keeping what the call reads when track is set.
func (j *Job) applyWith(ctx context.Context, dst []byte, doc bson.Raw, op Operation, updateDesc bson.Raw, lookups jobdef.LookupResults, track bool) (Result, []byte, error) {
	d, idv, res, err := j.prepare(doc, lookups)
	if err != nil {
		return Result{}, dst, err
	}
	if j.rt == nil {
		return j.identityGuarded(dst, d, idv, res)
	}
	c := prepared{doc: d, idv: idv, op: op, updateDesc: updateDesc, lookups: lookups, track: track, res: res}
	var o Outcome
	if floorBuild {
		var out [1]Outcome
		dst = j.floorEach(ctx, dst, []prepared{c}, out[:])
		o = out[0]
	} else {
		o, dst = j.rt.applyOne(ctx, j, dst, c)
	}
	if o.Err != nil {
		return Result{}, dst, o.Err
	}
	return o.Result, dst, nil
}

// identity is the result of a job without a transform (and of a transform
// returning true): the document as it is.
func (j *Job) identity(dst []byte, doc bson.Raw, idv bson.RawValue, res Result) (Result, []byte, error) {
	limit := j.maxResult()
	if j.Kind == jobdef.Mirror {
		if len(doc) > limit {
			return Result{}, dst, errs.New(errs.NotADocument, j.Name, "the document is %d bytes of BSON, more than the limit of %d a mirror writes (the replica's maxBsonObjectSize)", len(doc), limit)
		}
		res.Raw = doc
		return res, dst, nil
	}
	c := j.newOutConv(nil, dst, idv, res.ID)
	c.fromSource = true
	if err := c.docFromBSON(doc); err != nil {
		return Result{}, dst, err
	}
	return c.result(res)
}

// maxResult is the result size limit of the job's kind, also for a Job
// built by hand.
func (j *Job) maxResult() int {
	if j.Kind == jobdef.Mirror {
		if j.opts.MaxMirrorBytes > 0 {
			return j.opts.MaxMirrorBytes
		}
		return jobdef.DefaultMaxMirrorBytes
	}
	if j.opts.MaxResultBytes > 0 {
		return j.opts.MaxResultBytes
	}
	return DefaultMaxResultBytes
}

// Close releases the job's idle runtimes. A closed job still works (it makes
// new runtimes on demand), so closing a Set whose jobs live on in the next
// one after a reload is harmless.
func (j *Job) Close() {
	if j.rt != nil {
		j.rt.pool.drain()
	}
}

// Set is the jobs loaded from one transforms folder.
type Set struct {
	paths []string // what it was loaded from: folders or files
	opts  Options
	jobs  []*Job // sorted by name
	// files remembers, per file name, the hash last read and the error it
	// gave, so a Watcher reports a failing file once, not every poll.
	files map[string]fileState
}

type fileState struct {
	path string
	hash string
	err  error
}

// Jobs returns the jobs sorted by name.
func (s *Set) Jobs() []*Job {
	if s == nil {
		return nil
	}
	return append([]*Job(nil), s.jobs...)
}

// Job returns the job called name, or nil.
func (s *Set) Job(name string) *Job {
	if s == nil {
		return nil
	}
	i := sort.Search(len(s.jobs), func(i int) bool { return s.jobs[i].Name >= name })
	if i < len(s.jobs) && s.jobs[i].Name == name {
		return s.jobs[i]
	}
	return nil
}

// Close releases every job's idle runtimes (see Job.Close).
func (s *Set) Close() {
	if s == nil {
		return
	}
	for _, j := range s.jobs {
		j.Close()
	}
}

// errorf returns a CONFIG_INVALID error for job naming its file and key.
func configErr(job, file, key, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = fmt.Sprintf("key %q: %s", clipText(key, maxKeyText), msg)
	}
	return &errs.Error{Code: errs.ConfigInvalid, Job: job, Msg: file + ": " + msg}
}

// joinErrs joins errors, nil when there are none.
func joinErrs(list []error) error {
	if len(list) == 0 {
		return nil
	}
	return errors.Join(list...)
}
