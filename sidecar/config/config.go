package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/lease"
	"github.com/meilistream/meilistream/sidecar/engine"
	"github.com/meilistream/meilistream/transform"
)

// EnvPrefix starts every configuration variable.
const EnvPrefix = "MEILISTREAM_"

// TestEnvPrefix is reserved for the test suite's own variables
// (MEILISTREAM_TEST_MONGODB_URI, MEILISTREAM_TEST_MEILI_URL): the sidecar
// ignores them, so a developer who exported them can still run it.
const TestEnvPrefix = EnvPrefix + "TEST_"

// JobEnvPrefix starts a per-job override: MEILISTREAM_JOB_<NAME>_<OPTION>,
// e.g. MEILISTREAM_JOB_ARTICLES_INDEX=articles_v2. See Config.Jobs.
const JobEnvPrefix = EnvPrefix + "JOB_"

// Defaults of the settings only the configuration has, also shown in the
// README. The others are the defaults of the packages that use them
// (engine, lease, transform); Default gathers them all.
const (
	DefaultTransforms      = "/etc/meilistream/transforms"
	DefaultStateCollection = "meilistream"
	DefaultHTTPAddr        = ":8080"
	DefaultShutdownTimeout = 20 * time.Second
	DefaultStallTimeout    = 2 * time.Minute
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "json"
)

// Config is the sidecar's configuration, read from MEILISTREAM_* environment
// variables (the koanf tag is the variable name without the prefix, in lower
// case). Print it only through String or Redacted: MeiliAPIKey and the
// passwords in the URIs are secrets. String, GoString and MarshalJSON mask
// them, so %v, %#v, hclog and encoding/json are safe.
type Config struct {
	// MongoDBURI is the source cluster (a replica set: change streams need
	// one). Required. Secret: may hold a password.
	MongoDBURI string `koanf:"mongodb_uri"`
	// MongoDBDatabase is the source database. Default: the database named
	// in MongoDBURI's path; Validate fills it in.
	MongoDBDatabase string `koanf:"mongodb_database"`
	// MeiliURL is Meilisearch's base URL. Needed when any search job exists
	// (the engine checks that, knowing the jobs).
	MeiliURL string `koanf:"meili_url"`
	// MeiliAPIKey is the Meilisearch API key (or master key). Secret.
	MeiliAPIKey string `koanf:"meili_api_key"`
	// ReplicaURI is the replica cluster mirror jobs write to. Needed when
	// any mirror job exists. Secret: may hold a password.
	ReplicaURI string `koanf:"replica_uri"`
	// ReplicaDatabase is the replica database. Default: the database in
	// ReplicaURI's path, else MongoDBDatabase; Validate fills it in.
	ReplicaDatabase string `koanf:"replica_database"`
	// Transforms is the folder holding one transform file per job.
	Transforms string `koanf:"transforms"`
	// StateCollection is the collection (in MongoDBDatabase) holding leases
	// and positions; per-document errors go to StateCollection+"_errors".
	StateCollection string `koanf:"state_collection"`
	// IndexPrefix is put before every Meilisearch index uid, so several
	// deployments (or parallel tests) can share one Meilisearch.
	IndexPrefix string `koanf:"index_prefix"`
	// Lease is how long a job's lease lasts without renewal; holders renew
	// every third of it.
	Lease time.Duration `koanf:"lease"`
	// BatchSize is how many pending changes trigger a send.
	BatchSize int `koanf:"batch_size"`
	// FlushInterval is the longest a pending change waits before a send.
	FlushInterval time.Duration `koanf:"flush_interval"`
	// PositionInterval is how often a quiet stream records its position.
	PositionInterval time.Duration `koanf:"position_interval"`
	// PageSize bounds the documents a reindex has read and not yet
	// checkpointed; it reads, sends and checkpoints in parts of half a page.
	PageSize int `koanf:"page_size"`
	// OnHistoryLost is "reindex" or "fail".
	OnHistoryLost string `koanf:"on_history_lost"`
	// OnDocumentError is "skip" or "fail".
	OnDocumentError string `koanf:"on_document_error"`
	// Mode is every job's mode its file and MEILISTREAM_JOB_<NAME>_MODE
	// leave unset: "stream", "scan" or "auto" (docs/scan-mode.md).
	Mode string `koanf:"mode"`
	// TransformTimeout limits one transform call.
	TransformTimeout time.Duration `koanf:"transform_timeout"`
	// TransformPool is the number of JavaScript runtimes per job; 0 means
	// runtime.GOMAXPROCS(0), which Go sets from the container's CPU limit.
	TransformPool int `koanf:"transform_pool"`
	// TransformMemory bounds, in MiB, how far the heap may grow past its
	// steady size while a job's transform calls run (they are stopped);
	// 0 means no bound.
	TransformMemory int `koanf:"transform_memory"`
	// HTTPAddr is where /healthz, /readyz, /status and /metrics are served.
	// Port 0 picks a free port (see ReadyFile).
	HTTPAddr string `koanf:"http_addr"`
	// ReadyFile, when set, is a path where the HTTP server writes its bound
	// address ("127.0.0.1:43121") once it listens.
	ReadyFile string `koanf:"ready_file"`
	// ShutdownTimeout bounds the clean shutdown after SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
	// StallTimeout is how long a held job may make no progress while its
	// source or destination keeps failing before this process gives its
	// lease to another pod; 0 never does.
	StallTimeout time.Duration `koanf:"stall_timeout"`
	// LogLevel is trace, debug, info, warn, error or off.
	LogLevel string `koanf:"log_level"`
	// LogFormat is json or text.
	LogFormat string `koanf:"log_format"`
	// VerifyInterval is how often the holder of a job with verify: true
	// verifies its destination in the background; VerifyRate bounds the
	// documents per second it reads doing so.
	VerifyInterval time.Duration `koanf:"verify_interval"`
	VerifyRate     int           `koanf:"verify_rate"`
	// ReindexRate bounds the documents per second a job's reindex reads
	// across all pods (0: no bound; a job's reindexRate wins);
	// ReindexMaxReadLatency and ReindexMaxTasks are the bounds past which
	// the brake slows a reindex's chunks: the smoothed time of a chunk
	// read from MongoDB, the job's tasks enqueued in Meilisearch (0: that
	// brake off).
	ReindexRate           int           `koanf:"reindex_rate"`
	ReindexMaxReadLatency time.Duration `koanf:"reindex_max_read_latency"`
	ReindexMaxTasks       int           `koanf:"reindex_max_tasks"`

	// Jobs holds the per-job overrides MEILISTREAM_JOB_<NAME>_<OPTION>,
	// keyed by job name (lower case) then option (lower case, e.g.
	// "primary_key"), values as written. Option names and the kind of
	// their values are checked here (transform.JobOptions); the transform
	// package checks the values against the job when it applies them, and
	// decides what a job declared by environment alone means.
	Jobs map[string]map[string]string `koanf:"-"`
}

// Default returns the configuration with every default set and nothing
// required filled in.
func Default() Config {
	return Config{
		Transforms:       DefaultTransforms,
		StateCollection:  DefaultStateCollection,
		Lease:            lease.DefaultTTL,
		BatchSize:        engine.DefaultBatchSize,
		FlushInterval:    engine.DefaultFlushInterval,
		PositionInterval: engine.DefaultPositionInterval,
		PageSize:         engine.DefaultPageSize,
		OnHistoryLost:    engine.DefaultOnHistoryLost,
		OnDocumentError:  engine.DefaultOnDocumentError,
		Mode:             jobdef.DefaultMode,
		TransformTimeout: transform.DefaultTimeout,
		TransformMemory:  transform.DefaultMemoryLimit >> 20,
		HTTPAddr:         DefaultHTTPAddr,
		ShutdownTimeout:  DefaultShutdownTimeout,
		StallTimeout:     DefaultStallTimeout,
		LogLevel:         DefaultLogLevel,
		LogFormat:        DefaultLogFormat,
		VerifyInterval:   engine.DefaultVerifyInterval,
		VerifyRate:       engine.DefaultVerifyRate,

		// The reindex brake's bounds (engine.ThrottleConfig).
		ReindexMaxReadLatency: engine.DefaultReindexMaxReadLatency,
		ReindexMaxTasks:       engine.DefaultReindexMaxTasks,
	}
}

// Variable describes one configuration variable, for error messages and
// the README.
type Variable struct {
	Key     string // koanf key: the name without prefix, lower case
	Accepts string // what values it accepts
	Secret  bool   // never echo its value
	File    bool   // a <NAME>_FILE variant reads the value from a file
}

// Name returns the environment variable's name, e.g. MEILISTREAM_BATCH_SIZE.
func (v Variable) Name() string { return EnvPrefix + strings.ToUpper(v.Key) }

// Variables lists every configuration variable in README order.
var Variables = []Variable{
	{Key: "mongodb_uri", Accepts: "a mongodb:// or mongodb+srv:// connection string to a replica set (required)", Secret: true, File: true},
	{Key: "mongodb_database", Accepts: "a database name (default: the one in MEILISTREAM_MONGODB_URI)"},
	{Key: "meili_url", Accepts: "an http:// or https:// URL"},
	{Key: "meili_api_key", Accepts: "a Meilisearch API key", Secret: true, File: true},
	{Key: "replica_uri", Accepts: "a mongodb:// or mongodb+srv:// connection string", Secret: true, File: true},
	{Key: "replica_database", Accepts: "a database name (default: the one in MEILISTREAM_REPLICA_URI, else MEILISTREAM_MONGODB_DATABASE)"},
	{Key: "transforms", Accepts: "a folder path (default " + DefaultTransforms + ")"},
	{Key: "state_collection", Accepts: "a collection name (default " + DefaultStateCollection + ")"},
	{Key: "index_prefix", Accepts: "a prefix of letters, digits, - and _ (default empty)"},
	{Key: "lease", Accepts: "a Go duration from 1s to 1h, e.g. 30s (default 30s)"},
	{Key: "batch_size", Accepts: "a whole number from 1 to 100000 (default 500)"},
	{Key: "flush_interval", Accepts: "a positive Go duration, e.g. 1s or 250ms (default 1s)"},
	{Key: "position_interval", Accepts: "a positive Go duration, e.g. 60s (default 60s)"},
	{Key: "page_size", Accepts: "a whole number from 1 to 100000 (default 2000)"},
	{Key: "on_history_lost", Accepts: "reindex or fail (default reindex)"},
	{Key: "on_document_error", Accepts: "skip or fail (default skip)"},
	{Key: "mode", Accepts: "stream, scan or auto: every job's mode unless its file or MEILISTREAM_JOB_<NAME>_MODE says (default stream)"},
	{Key: "transform_timeout", Accepts: "a positive Go duration up to 1m, e.g. 1s (default 1s)"},
	{Key: "transform_pool", Accepts: "a whole number from 0 to 1024, 0 meaning GOMAXPROCS, the container's CPU limit (default 0)"},
	{Key: "transform_memory", Accepts: "a whole number of MiB from 0 to 1048576, 0 meaning no bound (default 64)"},
	{Key: "http_addr", Accepts: "a listen address host:port, e.g. :8080 or 127.0.0.1:0 (default :8080)"},
	{Key: "ready_file", Accepts: "a file path (default empty: none)"},
	{Key: "shutdown_timeout", Accepts: "a positive Go duration, e.g. 20s (default 20s)"},
	{Key: "stall_timeout", Accepts: "a Go duration, at least 3 lease periods, or 0 to never hand a stalled job over (default 2m)"},
	{Key: "log_level", Accepts: "trace, debug, info, warn, error or off (default info)"},
	{Key: "log_format", Accepts: "json or text (default json)"},
	{Key: "verify_interval", Accepts: "a positive Go duration, e.g. 24h (default 24h)"},
	{Key: "verify_rate", Accepts: "a whole number of documents per second from 1 to 1000000 (default 500)"},
	{Key: "reindex_rate", Accepts: "a whole number of documents per second from 0 to 1000000, across all pods, 0 meaning no bound (default 0)"},
	{Key: "reindex_max_read_latency", Accepts: "a Go duration up to 1m, or 0 to never brake for it (default 500ms)"},
	{Key: "reindex_max_tasks", Accepts: "a whole number of tasks from 0 to 100000, 0 meaning never brake for them (default 6)"},
}

// Removed lists the variables earlier releases read and this one does not,
// with what to do instead: setting one is a CONFIG_INVALID naming it, so a
// deployment that relied on it learns that it no longer has any effect
// rather than having it silently ignored.
var Removed = map[string]string{
	"rollout_grace": "removed: a pod whose transform is older than the recorded one now waits exactly while a live pod runs the newer one, " +
		"and a revert no live pod disagrees with is honoured at once, so there is no grace to set (docs/search-jobs.md, \"Rollouts\"); unset it",
}

// Problem is one thing wrong with the configuration.
type Problem struct {
	Var     string // the variable's full name
	Problem string // what is wrong, never a secret value
	Accepts string // what it accepts
}

func (p Problem) String() string {
	s := p.Var + ": " + p.Problem
	if p.Accepts != "" {
		s += "; accepts " + p.Accepts
	}
	return s
}

// Problems is every problem found, the cause inside a CONFIG_INVALID error:
// errors.As(err, &problems) gives them to tests and tools.
type Problems []Problem

// Error renders a single problem inline and several one per line.
func (ps Problems) Error() string {
	if len(ps) == 1 {
		return ps[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(ps))
	for _, p := range ps {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems while loading.
type problems struct{ list Problems }

func (ps *problems) add(v Variable, format string, args ...any) {
	ps.list = append(ps.list, Problem{Var: v.Name(), Problem: fmt.Sprintf(format, args...), Accepts: v.Accepts})
}

func (ps *problems) addRaw(name, problem, accepts string) {
	ps.list = append(ps.list, Problem{Var: name, Problem: problem, Accepts: accepts})
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &errs.Error{Code: errs.ConfigInvalid, Msg: "invalid configuration", Err: ps.list}
}

// Load reads the configuration from environ (os.Environ() in production; a
// list of KEY=VALUE so tests stay hermetic), over Default(), and validates
// it. Every problem is reported at once, in one CONFIG_INVALID *errs.Error
// whose cause is Problems.
func Load(environ []string) (Config, error) {
	c, ps := parse(environ)
	c.validate(ps, true)
	return c, ps.err()
}

// LoadLocal is Load for commands that touch no server (check): the values
// are parsed and checked the same way, but MEILISTREAM_MONGODB_URI is not
// required.
func LoadLocal(environ []string) (Config, error) {
	c, ps := parse(environ)
	c.validate(ps, false)
	return c, ps.err()
}

// Validate checks every value and fills in the derived defaults
// (MongoDBDatabase, ReplicaDatabase). Load calls it; call it again after
// changing a Config by hand.
func (c *Config) Validate() error {
	ps := &problems{}
	c.validate(ps, true)
	return ps.err()
}

// parse reads environ into Default() through koanf's env provider: keys lose
// the prefix and are lower-cased (MEILISTREAM_BATCH_SIZE -> batch_size).
// Each known key is decoded on its own, so a bad value names its variable.
func parse(environ []string) (Config, *problems) {
	c := Default()
	ps := &problems{}

	k := koanf.New(".")
	provider := env.Provider("", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			if strings.HasPrefix(name, TestEnvPrefix) {
				return "", nil
			}
			// Keep the original name: koanf keys are lower case, and
			// the unknown-variable check below reports it as written.
			return strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), value
		},
	})
	if err := k.Load(provider, nil); err != nil {
		// The env provider only fails on ReadBytes; keep the error anyway.
		ps.addRaw(EnvPrefix+"*", "cannot read the environment: "+err.Error(), "")
		return c, ps
	}

	known := map[string]Variable{}
	for _, v := range Variables {
		known[v.Key] = v
	}
	fields := fieldsByKey(&c)

	// Secrets from files: NAME_FILE holds the path of a file whose content
	// (trailing white space removed) is the value, as Kubernetes mounts
	// Secrets.
	for _, v := range Variables {
		if !v.File {
			continue
		}
		fk := v.Key + "_file"
		path := k.String(fk)
		if !k.Exists(fk) || path == "" {
			continue
		}
		if k.String(v.Key) != "" {
			ps.addRaw(v.Name()+"_FILE", "both "+v.Name()+" and "+v.Name()+"_FILE are set", "one of the two")
			continue
		}
		b, err := readSecretFile(path)
		if err != nil {
			ps.addRaw(v.Name()+"_FILE", "cannot read the file: "+pathError(err), "the path of a readable regular file holding "+v.Accepts)
			continue
		}
		if err := k.Set(v.Key, strings.TrimSpace(string(b))); err != nil {
			ps.addRaw(v.Name()+"_FILE", "cannot use the file: "+err.Error(), "")
		}
	}

	keys := k.Keys()
	sort.Strings(keys)
	for _, key := range keys {
		if strings.HasSuffix(key, "_file") {
			if v, ok := known[strings.TrimSuffix(key, "_file")]; ok && v.File {
				continue // handled above
			}
		}
		if k.String(key) == "" {
			// An empty variable is as if unset (Kubernetes and compose
			// write empty values), known or not.
			continue
		}
		if strings.HasPrefix(key, "job_") {
			c.parseJob(ps, key, k.String(key))
			continue
		}
		if what, ok := Removed[key]; ok {
			ps.addRaw(EnvPrefix+strings.ToUpper(key), what, "")
			continue
		}
		v, ok := known[key]
		if !ok {
			name := EnvPrefix + strings.ToUpper(key)
			ps.addRaw(name, "unknown variable (did you mean "+closestName(name)+"?)", "")
			continue
		}
		raw := k.String(key)
		f := fields[key]
		if f.Kind() == reflect.Int {
			// Decimal only: koanf's weak decoding reads "0500" as octal
			// (320) and "0x20" as hexadecimal, which no operator means.
			n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 0)
			if err != nil {
				ps.add(v, "%s", decodeProblem(v, raw, f.Type()))
				continue
			}
			f.SetInt(n)
			continue
		}
		// Decode with koanf's own decoder configuration: it carries the
		// duration hook (a custom DecoderConfig would drop it) and weak
		// typing for numbers written as strings.
		tmp := reflect.New(f.Type())
		if err := k.Unmarshal(key, tmp.Interface()); err != nil {
			ps.add(v, "%s", decodeProblem(v, raw, f.Type()))
			continue
		}
		f.Set(tmp.Elem())
	}
	return c, ps
}

// decodeProblem says why raw does not decode into t, without echoing a
// secret value.
func decodeProblem(v Variable, raw string, t reflect.Type) string {
	shown := fmt.Sprintf("%q", raw)
	if v.Secret {
		shown = "the value"
	}
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return shown + " is not a Go duration"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return shown + " is not a whole number"
	}
	return shown + " is not valid"
}

// maxSecretFile bounds a secret read from a file: a URI or a key is a few
// hundred bytes; a larger file is the wrong file.
const maxSecretFile = 64 << 10

// readSecretFile reads a <NAME>_FILE variable's file. It must be a regular
// file (a Kubernetes Secret's symbolic links lead to one): a named pipe
// would block the start until something writes to it, a device may never
// end. It is opened without blocking (openNoBlock) and checked on the
// open file, so nothing swapped in between the check and the read counts.
func readSecretFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNoBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("not a regular file (%s): want a file holding the value", fileKind(fi.Mode()))}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFile {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d KiB: not a secret value", maxSecretFile>>10)}
	}
	return b, nil
}

// fileKind names what a non-regular file is.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// pathError renders a file error without the file's content (there is
// none in an *os.PathError) and with the path, which is not a secret.
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + " " + pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// parseJob files MEILISTREAM_JOB_<NAME>_<OPTION> (key "job_<name>_<option>")
// under c.Jobs. The option is matched as the longest known suffix, so job
// names may contain underscores.
func (c *Config) parseJob(ps *problems, key, value string) {
	rest := strings.TrimPrefix(key, "job_")
	best := ""
	for _, o := range transform.EnvOptions() {
		if strings.HasSuffix(rest, "_"+o) && len(o) > len(best) && len(rest) > len(o)+1 {
			best = o
		}
	}
	name := EnvPrefix + strings.ToUpper(key)
	if best == "" {
		ps.addRaw(name, "unknown per-job option (did you mean "+closestJobName(rest)+"?)",
			"MEILISTREAM_JOB_<NAME>_<OPTION> with OPTION one of "+strings.ToUpper(strings.Join(transform.EnvOptions(), ", ")))
		return
	}
	job := strings.TrimSuffix(rest, "_"+best)
	// A bad value fails at start like any other variable.
	if problem, accepts, _ := transform.CheckOverride(best, value); problem != "" {
		ps.addRaw(name, problem, accepts)
		return
	}
	if c.Jobs == nil {
		c.Jobs = map[string]map[string]string{}
	}
	if c.Jobs[job] == nil {
		c.Jobs[job] = map[string]string{}
	}
	c.Jobs[job][best] = value
}

// fieldsByKey maps each koanf key to its settable field in *c.
func fieldsByKey(c *Config) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		out[tag] = v.Field(i)
	}
	return out
}

// validate checks values and fills in derived defaults. requireServers
// makes MEILISTREAM_MONGODB_URI required.
func (c *Config) validate(ps *problems, requireServers bool) {
	byKey := map[string]Variable{}
	for _, v := range Variables {
		byKey[v.Key] = v
	}
	bad := func(key, format string, args ...any) { ps.add(byKey[key], format, args...) }

	if c.MongoDBURI == "" && requireServers {
		bad("mongodb_uri", "not set (nor MEILISTREAM_MONGODB_URI_FILE)")
	}
	if problem := mongoURIProblem(c.MongoDBURI); problem != "" {
		bad("mongodb_uri", "%s", problem)
	}
	if problem := mongoURIProblem(c.ReplicaURI); problem != "" {
		bad("replica_uri", "%s", problem)
	}
	if c.MongoDBDatabase == "" {
		c.MongoDBDatabase = uriDatabase(c.MongoDBURI)
	}
	if c.MongoDBDatabase == "" && c.MongoDBURI != "" {
		bad("mongodb_database", "not set, and MEILISTREAM_MONGODB_URI names no database")
	}
	if c.ReplicaDatabase == "" {
		c.ReplicaDatabase = uriDatabase(c.ReplicaURI)
	}
	if c.ReplicaDatabase == "" {
		c.ReplicaDatabase = c.MongoDBDatabase
	}
	for key, db := range map[string]string{"mongodb_database": c.MongoDBDatabase, "replica_database": c.ReplicaDatabase} {
		if db != "" && (strings.ContainsAny(db, `/\. "$`) || len(db) > 63) {
			bad(key, "%q is not a valid MongoDB database name", db)
		}
	}
	if c.MeiliURL != "" {
		u, err := url.Parse(c.MeiliURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("meili_url", "%q is not an http(s) URL", redactURL(c.MeiliURL))
		case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(c.MeiliURL, "?#"):
			// The client appends the API's paths to the URL, so a query
			// or fragment would break every request; a key put there
			// would also travel in every error message.
			bad("meili_url", "the value holds a query string or fragment (?... or #...), which Meilisearch's API does not use; put the key in MEILISTREAM_MEILI_API_KEY")
		}
	}
	if c.Transforms == "" {
		bad("transforms", "empty")
	}
	if c.StateCollection == "" || strings.ContainsAny(c.StateCollection, "$\x00") || strings.HasPrefix(c.StateCollection, "system.") {
		bad("state_collection", "%q is not a valid collection name", c.StateCollection)
	}
	for _, r := range c.IndexPrefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			bad("index_prefix", "%q holds %q, which Meilisearch does not accept in an index uid", c.IndexPrefix, r)
			break
		}
	}
	if c.Lease < lease.MinTTL {
		bad("lease", "%s is too short", c.Lease)
	}
	if c.Lease > lease.MaxTTL {
		// A holder that dies keeps the job this long: past an hour a
		// failover is an outage, and the lease package refuses it.
		bad("lease", "%s is too long", c.Lease)
	}
	positive := map[string]time.Duration{
		"flush_interval":    c.FlushInterval,
		"position_interval": c.PositionInterval,
		"transform_timeout": c.TransformTimeout,
		"shutdown_timeout":  c.ShutdownTimeout,
		"verify_interval":   c.VerifyInterval,
	}
	for _, key := range sortedKeys(positive) {
		if positive[key] <= 0 {
			bad(key, "%s is not positive", positive[key])
		}
	}
	if c.StallTimeout < 0 || c.StallTimeout > 0 && c.StallTimeout < 3*c.Lease {
		// Shorter, a pod would give a job up for failures that one
		// lease period of retries rides out.
		bad("stall_timeout", "%s is neither 0 nor at least 3 times MEILISTREAM_LEASE (%s)", c.StallTimeout, c.Lease)
	}
	if c.TransformTimeout > transform.MaxTimeout {
		// A call holds a runtime, and a document its batch, this long: past
		// a minute the job looks wedged.
		bad("transform_timeout", "%s is more than %s, the longest a transform call may take", c.TransformTimeout, transform.MaxTimeout)
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		bad("batch_size", "%d is out of range", c.BatchSize)
	}
	if c.PageSize < 1 || c.PageSize > 100000 {
		bad("page_size", "%d is out of range", c.PageSize)
	}
	if c.VerifyRate < 1 || c.VerifyRate > 1000000 {
		bad("verify_rate", "%d is out of range", c.VerifyRate)
	}
	if c.ReindexRate < 0 || c.ReindexRate > 1000000 {
		bad("reindex_rate", "%d is out of range", c.ReindexRate)
	}
	if c.ReindexMaxReadLatency < 0 || c.ReindexMaxReadLatency > time.Minute {
		bad("reindex_max_read_latency", "%s is out of range", c.ReindexMaxReadLatency)
	}
	if c.ReindexMaxTasks < 0 || c.ReindexMaxTasks > 100000 {
		bad("reindex_max_tasks", "%d is out of range", c.ReindexMaxTasks)
	}
	if c.TransformPool < 0 || c.TransformPool > 1024 {
		bad("transform_pool", "%d is out of range", c.TransformPool)
	}
	if c.TransformMemory < 0 || c.TransformMemory > 1<<20 {
		bad("transform_memory", "%d is out of range", c.TransformMemory)
	}
	if c.OnHistoryLost != "reindex" && c.OnHistoryLost != "fail" {
		bad("on_history_lost", "%q is not a choice", c.OnHistoryLost)
	}
	if c.OnDocumentError != "skip" && c.OnDocumentError != "fail" {
		bad("on_document_error", "%q is not a choice", c.OnDocumentError)
	}
	if c.Mode != jobdef.ModeStream && c.Mode != jobdef.ModeScan && c.Mode != jobdef.ModeAuto {
		bad("mode", "%q is not a choice", c.Mode)
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		bad("http_addr", "%q is not host:port", c.HTTPAddr)
	}
	// hclog parses an unknown level as NoLevel, which would log everything:
	// refuse it here instead.
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		bad("log_level", "%q is not a level", c.LogLevel)
	}
	c.LogLevel = strings.ToLower(strings.TrimSpace(c.LogLevel))
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("log_format", "%q is not a choice", c.LogFormat)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mongoURIProblem says what is wrong with a MongoDB connection string, ""
// when nothing is (or it is empty), without ever showing a password: the
// driver's parser is the judge (so a URI that passes here also passes at
// connect), and its message is scrubbed of the URI's secrets. mongodb+srv://
// URIs are only checked for their scheme: parsing them looks up DNS, which
// belongs to connecting, not to reading the configuration.
func mongoURIProblem(uri string) string {
	switch {
	case uri == "":
		return ""
	case strings.HasPrefix(uri, "mongodb+srv://"):
		return ""
	case !strings.HasPrefix(uri, "mongodb://"):
		return "the value does not start with mongodb:// or mongodb+srv://"
	}
	if _, err := connstring.ParseAndValidate(uri); err != nil {
		return "the value is not a valid connection string: " + scrubURIError(err.Error(), uri)
	}
	return ""
}

// scrubURIError removes from msg anything of uri that may be secret: the
// password (raw and unescaped) and the values of secret-looking options
// (those redactURL masks). A message quoting the password loses its detail.
func scrubURIError(msg, uri string) string {
	// "invalid password: invalid URL escape "%zz"" quotes a piece of it.
	if i := strings.Index(msg, "invalid password"); i >= 0 {
		msg = msg[:i+len("invalid password")] + " (not URL-escaped properly)"
	}
	return newScrubber(uriSecrets(uri), 1).Scrub(msg)
}

// uriDatabase returns the database in a MongoDB URI's path
// ("mongodb://h/shop?x=y" -> "shop"), or "".
func uriDatabase(uri string) string {
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return ""
	}
	_, path, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	path, _, _ = strings.Cut(path, "?")
	db, err := url.PathUnescape(path)
	if err != nil {
		return ""
	}
	return db
}

// Redacted returns a copy fit to print: the Meilisearch key replaced by
// "REDACTED" and any password (or secret query option) in the URIs by
// "xxxxx".
func (c Config) Redacted() Config {
	r := c
	if r.MeiliAPIKey != "" {
		r.MeiliAPIKey = "REDACTED"
	}
	r.MongoDBURI = redactURL(r.MongoDBURI)
	r.ReplicaURI = redactURL(r.ReplicaURI)
	r.MeiliURL = redactURL(r.MeiliURL)
	if c.Jobs != nil {
		r.Jobs = make(map[string]map[string]string, len(c.Jobs))
		for j, opts := range c.Jobs {
			r.Jobs[j] = make(map[string]string, len(opts))
			for o, v := range opts {
				r.Jobs[j][o] = v
			}
		}
	}
	return r
}

// String renders the configuration as NAME=value lines, secrets masked.
func (c Config) String() string {
	r := c.Redacted()
	var b strings.Builder
	fields := fieldsByKey(&r)
	for i, v := range Variables {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%v", v.Name(), fields[v.Key].Interface())
	}
	for _, job := range sortedKeys(r.Jobs) {
		for _, o := range sortedKeys(r.Jobs[job]) {
			fmt.Fprintf(&b, " %sJOB_%s_%s=%s", EnvPrefix, strings.ToUpper(job), strings.ToUpper(o), r.Jobs[job][o])
		}
	}
	return b.String()
}

// GoString masks secrets under %#v too.
func (c Config) GoString() string { return "config.Config{" + c.String() + "}" }

// MarshalJSON renders the redacted configuration, keyed like the koanf
// keys, so a Config logged by hclog or put in /status shows no secret.
func (c Config) MarshalJSON() ([]byte, error) {
	r := c.Redacted()
	out := map[string]any{}
	for key, f := range fieldsByKey(&r) {
		if d, ok := f.Interface().(time.Duration); ok {
			out[key] = d.String()
			continue
		}
		out[key] = f.Interface()
	}
	if len(r.Jobs) > 0 {
		out["jobs"] = r.Jobs
	}
	return json.Marshal(out)
}

// closestJobName suggests a per-job variable for "<name>_<option?>".
func closestJobName(rest string) string {
	best, bestD := "", -1
	for _, o := range transform.EnvOptions() {
		// The job name is whatever precedes the last underscore-separated
		// part that looks most like an option.
		for i := 0; i <= len(rest); i++ {
			if i < len(rest) && rest[i] != '_' {
				continue
			}
			job, opt := rest[:i], ""
			if i < len(rest) {
				opt = rest[i+1:]
			}
			if job == "" {
				continue
			}
			if d := editDistance(opt, o); bestD < 0 || d < bestD {
				best, bestD = JobEnvPrefix+strings.ToUpper(job+"_"+o), d
			}
		}
	}
	return best
}
