package jobdef

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Defaults of a job's options that its file and the environment leave
// unset.
const (
	DefaultOnDocumentError = "skip"
	DefaultOnHistoryLost   = "reindex"
	DefaultBatchSize       = 500
	DefaultFlushInterval   = time.Second
	DefaultPrimaryKey      = "id"
	DefaultMaxMirrorBytes  = 16 << 20 // MongoDB's maxBsonObjectSize
	DefaultMode            = ModeStream
	DefaultKey             = "updatedAt"
	DefaultScanInterval    = 5 * time.Second
	DefaultSweepInterval   = 5 * time.Minute
	DefaultScanOverlap     = "10s"
)

// The modes of a job: how it learns of the collection's changes.
const (
	// ModeStream follows the change stream (a replica set, a sharded
	// cluster).
	ModeStream = "stream"
	// ModeScan reads the collection by an update key every scanInterval
	// and sweeps the destination's ids for deletes every sweepInterval:
	// for a source without change streams (a standalone mongod).
	ModeScan = "scan"
	// ModeAuto is the stream when the source has one, the scan otherwise.
	ModeAuto = "auto"
)

// Kind says where a job writes.
type Kind int

// The kinds of job.
const (
	Search Kind = iota // into a Meilisearch index
	Mirror             // into a collection of the replica MongoDB
)

// String returns "search" or "mirror".
func (k Kind) String() string {
	if k == Mirror {
		return "mirror"
	}
	return "search"
}

// Job is what a job is: its name, its source and destination, its
// options (environment overrides and the index prefix already applied),
// its declared lookups and relates, and the hash that says when it must
// reindex. transform.Job holds one beside its compiled transform; the
// sinks, the job state and the change stream read only this. Its fields
// are read-only once loaded.
type Job struct {
	Name string // the file name without ".js"
	File string // the file's path; "" for a job without a file
	// Database is the source database of Collection: the job's `database`
	// (or the database part of a `collection` written db.collection),
	// else MEILISTREAM_MONGODB_DATABASE. Always set once loaded. The
	// state collection stays in the main database whatever it is.
	Database   string
	Collection string // source collection (of Database); default Name
	Index      string // search: Meilisearch index uid; default Name; "" for a mirror
	Mirror     string // mirror: destination collection in the replica; "" for a search job
	PrimaryKey string // search: the index's primary key; default "id"
	Kind       Kind
	// Reindex is "swap" (default for search: build <index>__reindex and
	// swap) or "inplace" (always for a mirror).
	Reindex string
	// Sweep removes, after an in-place reindex, what was not written by it.
	// Default true for search, false for mirror.
	Sweep bool
	// Dates is how a JavaScript Date (and a BSON date) is written to
	// Meilisearch: "iso" (default, "2024-05-01T10:00:00.000Z") or "epoch"
	// (milliseconds since 1970, an integer Meilisearch can sort and filter).
	Dates           string
	OnDocumentError string // "skip" | "fail"
	OnHistoryLost   string // "reindex" | "fail"
	// Mode is ModeStream, ModeScan or ModeAuto (the engine decides at
	// start which of the first two it runs).
	Mode string
	// Key is the field a scan-mode job reads the collection by (a date,
	// or a number that grows with every write); ScanInterval the pause
	// between two passes of the scan, SweepInterval between two sweeps of
	// the destination's ids for deletes; ScanOverlap, as written, how far
	// behind its cursor each pass starts again (ScanOverlapOf reads it).
	Key                         string
	ScanInterval, SweepInterval time.Duration
	ScanOverlap                 string
	// ScanKeys names, for a collection the job looks up or relates to
	// (written as its lookups and relate write it: coll, or db.coll), the
	// field a scan reads it by when that is not Key (ScanKeyOf).
	ScanKeys      map[string]string
	BatchSize     int
	FlushInterval time.Duration
	// Parallel is the most chunk slots the job's reindex holds at once
	// across the pods (the file's parallel); 0 means the process's
	// MEILISTREAM_REINDEX_PARALLEL, 1 a reindex read by its holder alone.
	Parallel int
	// Timeout limits one transform call of this job (the file's
	// transformTimeout); 0 means transform.Options.Timeout.
	Timeout time.Duration
	// Settings are the Meilisearch index settings the file declares (JSON
	// ready), nil if none.
	Settings map[string]any
	// Samples are the file's `samples` documents, for check.
	Samples []bson.Raw
	// SkipUnchanged: an update that cannot change the transform's result
	// is not sent (transform.Result.Reads says what a call read; the
	// engine decides). Default true.
	SkipUnchanged bool
	// Verify: the job's holder verifies its destination in the background
	// (as `meilistream verify` does) every MEILISTREAM_VERIFY_INTERVAL;
	// VerifyRepair: and repairs what differs.
	Verify, VerifyRepair bool
	// ReindexRate bounds the documents per second the job's reindex
	// reads, across all pods (the file's reindexRate or
	// MEILISTREAM_JOB_<NAME>_REINDEX_RATE); 0: MEILISTREAM_REINDEX_RATE.
	// It is not in Hash: it changes no document.
	ReindexRate int
	// Fields are the top-level fields the transform reads, as the file
	// (or MEILISTREAM_JOB_<NAME>_FIELDS) declares them; nil: every field.
	// The change stream then drops, at the server, updates touching none
	// of them, and every document the transform sees (followed, reindexed,
	// retried) holds only them and _id.
	Fields []string
	// Lookups are the file's declared lookups (`lookups`), in the order
	// the file lists them; Relates its `relate` dependencies; Related the
	// related collections' sample documents (`related`), for check.
	Lookups []Lookup
	Relates []Relate
	Related map[string][]bson.Raw
	// Hash is the sha256 (hex) of the file's tokens (see transform's
	// tokenHash: comments, indentation, spaces and blank lines are not in
	// it; every token, and a line break between two tokens, is); with
	// environment overrides or an index prefix, the sha256 of that hash
	// followed by them (see transform.Options.Overrides). A changed hash
	// means the job must reindex.
	Hash string
	// SettingsHash is the sha256 (hex) of Settings as JSON, "" without
	// them. Settings written in the file's module.exports are not in Hash:
	// Meilisearch applies them to the live index in place, so a change of
	// them alone restarts the job (which applies them) without a reindex.
	SettingsHash string
	// LegacyHash is what Hash was before it covered tokens: the sha256 of
	// the file's bytes, with the same overrides after it. A position
	// recorded with it was recorded for this very file, so a caller may
	// take it as Hash (and record Hash from then on) rather than reindex
	// once after an upgrade.
	LegacyHash string
	// Function says the file exports a bare monstache-style function.
	Function bool
}

// StreamFields are the top-level fields the server keeps of the job's
// documents when the job declares its fields: those, and the first
// segment of each lookup's localField (the engine finds a document's
// matches by it); nil without fields (every field).
func (j *Job) StreamFields() []string {
	if j.Fields == nil {
		return nil
	}
	out := slices.Clone(j.Fields)
	for _, l := range j.Lookups {
		if top, _, _ := strings.Cut(l.LocalField, "."); top != "_id" && !slices.Contains(out, top) {
			out = append(out, top)
		}
	}
	return out
}

// ScanOverlapOf reads a scanOverlap as written: for a date key, a Go
// duration ("10s"), or a plain number of milliseconds; for a number key,
// a plain number of the key's own units ("5000" for a key in
// milliseconds), or a duration counted in seconds ("10s" is 10, for a key
// in seconds). It returns the overlap in milliseconds for dates (ms) and in
// key units for numbers (units), and false when s is neither form or is
// negative.
func ScanOverlapOf(s string) (ms int64, units float64, ok bool) {
	if s == "" {
		s = DefaultScanOverlap
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, 0, false
		}
		return int64(f), f, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, 0, false
	}
	return d.Milliseconds(), d.Seconds(), true
}
