package transform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// Load loads every *.js file in dir, one job per file named after it. It
// returns the jobs that loaded and, joined, one *errs.Error per problem:
// CONFIG_INVALID (a bad option, naming the file and the key; two jobs
// writing one index or collection) or TRANSFORM_FAILED (a syntax error with
// file, line and column; the module threw while loading). The Set is nil
// only when dir cannot be read or opts.Timeout is above MaxTimeout.
func Load(dir string, opts Options) (*Set, error) {
	return load(context.Background(), []string{dir}, opts, nil)
}

// LoadFiles is Load for a list of paths, each a *.js file or a folder of
// them (meilistream check FILE...). Two files with one name are
// CONFIG_INVALID. With no paths the Set holds only the jobs declared by
// environment alone (Options.Overrides), and a reload never finds files.
func LoadFiles(paths []string, opts Options) (*Set, error) {
	return load(context.Background(), paths, opts, nil)
}

// listFiles expands paths into the transform files they name: job name ->
// path. A folder contributes its *.js files.
func listFiles(paths []string) (names []string, files map[string]string, problems []error, err error) {
	files = map[string]string{}
	for _, p := range paths {
		st, serr := os.Stat(p)
		if serr != nil {
			if len(paths) == 1 {
				return nil, nil, nil, serr
			}
			problems = append(problems, errs.Wrap(errs.ConfigInvalid, "", serr, "read %s", p))
			continue
		}
		var list []string
		if st.IsDir() {
			fns, derr := jsFiles(p)
			if derr != nil {
				if len(paths) == 1 {
					return nil, nil, nil, derr
				}
				problems = append(problems, errs.Wrap(errs.ConfigInvalid, "", derr, "read %s", p))
				continue
			}
			for _, fn := range fns {
				list = append(list, filepath.Join(p, fn))
			}
		} else {
			list = []string{p}
		}
		for _, f := range list {
			name := strings.TrimSuffix(filepath.Base(f), ".js")
			if other, dup := files[name]; dup {
				problems = append(problems, errs.New(errs.ConfigInvalid, name, "%s and %s both name job %q", other, f, name))
				continue
			}
			files[name] = f
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, files, problems, nil
}

// load loads paths; ctx ending stops a module's evaluation (a Watcher
// closing), the files not loaded yet then failing with its cause.
func load(ctx context.Context, paths []string, opts Options, prev *Set) (*Set, error) {
	opts = opts.withDefaults()
	if opts.Timeout > MaxTimeout {
		return nil, errs.New(errs.ConfigInvalid, "", "MEILISTREAM_TRANSFORM_TIMEOUT: %s is more than the longest limit a transform call may have, %s", opts.Timeout, MaxTimeout)
	}
	names, files, problems, err := listFiles(paths)
	if err != nil {
		return nil, errs.Wrap(errs.ConfigInvalid, "", err, "read transforms folder %s", strings.Join(paths, ", "))
	}
	// Job names by override key: an override whose key two names fold to
	// cannot say which job it means.
	byKey := map[string][]string{}
	for _, name := range names {
		byKey[EnvKey(name)] = append(byKey[EnvKey(name)], name)
	}
	refuse := map[string]error{}
	s := &Set{paths: paths, opts: opts, files: make(map[string]fileState, len(names))}
	var loaded []*Job
	for _, name := range names {
		path := files[name]
		key := EnvKey(name)
		ov, hasOv := opts.Overrides[key]
		if hasOv && len(byKey[key]) > 1 {
			var all []string
			for _, n := range byKey[key] {
				all = append(all, fmt.Sprintf("%q (%s)", n, filepath.Base(files[n])))
			}
			refuse[name] = errs.New(errs.ConfigInvalid, name, "%s: %s would apply to jobs %s alike (job names match case-insensitively, '-' as '_'); none of them runs until one file is renamed or the variables are removed",
				filepath.Base(path), envVar(key, "*"), strings.Join(all, " and "))
			ov = nil // refused anyway: load it for its own problems only
		}
		src, err := readSource(path)
		if err != nil {
			err = errs.Wrap(errs.ConfigInvalid, name, err, "read %s", path)
			problems = append(problems, err)
			s.files[name] = fileState{path: path, err: err}
			if old := prev.Job(name); old != nil {
				loaded = append(loaded, old)
			}
			continue
		}
		sum := sha256.Sum256(src)
		hash := hex.EncodeToString(sum[:])
		if st, ok := prev.fileState(name); ok && st.hash == hash && st.path == path {
			old := prev.Job(name)
			if st.err != nil {
				// Still the same broken content: keep what runs, report again.
				problems = append(problems, st.err)
				s.files[name] = st
				if old != nil {
					loaded = append(loaded, old)
				}
				continue
			}
			if old != nil {
				loaded = append(loaded, old) // unchanged: the same Job, no recompiling
				s.files[name] = st
				continue
			}
			// Unchanged but refused last time (a conflict): load it again,
			// the conflict may be gone.
		}
		j, err := loadFile(ctx, path, src, opts, ov)
		if err != nil {
			problems = append(problems, err)
			s.files[name] = fileState{path: path, hash: hash, err: err}
			if old := prev.Job(name); old != nil {
				loaded = append(loaded, old) // the previous version keeps running
			}
			continue
		}
		if old := prev.Job(name); old != nil && old.Hash == j.Hash && old.SettingsHash == j.SettingsHash && old.ReindexRate == j.ReindexRate && old.Parallel == j.Parallel && old.File == j.File {
			// Only comments or spacing changed: the same meaning, so the
			// job that runs (a supervisor restarts on a new Hash only)
			// stays the Set's, and the new one is not kept.
			j.Close()
			j = old
		}
		loaded = append(loaded, j)
		s.files[name] = fileState{path: path, hash: hash}
	}
	// Jobs declared by environment alone: an override key no file's job
	// name folds to. Built once; a reload keeps them.
	keys := make([]string, 0, len(opts.Overrides))
	for key := range opts.Overrides {
		if len(byKey[key]) == 0 {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		if old := prev.Job(key); old != nil && old.envOnly {
			loaded = append(loaded, old)
			continue
		}
		if err := envJobTypo(key, opts.Overrides[key], byKey); err != nil {
			problems = append(problems, err)
			continue
		}
		j, err := envJob(key, opts.Overrides[key], opts)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		loaded = append(loaded, j)
	}
	s.jobs, problems = resolveConflicts(loaded, prev, refuse, problems)
	return s, joinErrs(problems)
}

func (s *Set) fileState(name string) (fileState, bool) {
	if s == nil {
		return fileState{}, false
	}
	st, ok := s.files[name]
	return st, ok
}

// jsFiles lists the *.js files of dir, sorted; hidden files (editors'
// swap and backup files) are not transforms.
func jsFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".js") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// resolveConflicts refuses the jobs of refuse (an override naming two of
// them) and jobs that write the same index or replica collection. The rule
// must give the same answer on every pod whatever each one loaded before (a
// pod starting fresh and a pod hot-reloading must never pick different
// writers for one index): every job of a conflict is refused, except that a
// job already running here unchanged (in prev) keeps running, as any file
// that fails to load keeps its previous version. A fresh pod then runs
// neither, so no two pods ever write one index for two jobs. Destinations
// are compared after environment overrides and the index prefix.
func resolveConflicts(jobs []*Job, prev *Set, refuse map[string]error, problems []error) ([]*Job, []error) {
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Name < jobs[b].Name })
	var candidates []*Job
	for _, j := range jobs {
		if err, ok := refuse[j.Name]; ok && prev.Job(j.Name) != j {
			problems = append(problems, err)
			continue
		}
		candidates = append(candidates, j)
	}
	byTarget := map[string][]*Job{}
	for _, j := range candidates {
		byTarget[j.target()] = append(byTarget[j.target()], j)
	}
	var keep []*Job
	for _, j := range candidates {
		group := byTarget[j.target()]
		if len(group) == 1 || prev.Job(j.Name) == j {
			keep = append(keep, j)
			continue
		}
		var others []string
		for _, o := range group {
			if o != j {
				others = append(others, fmt.Sprintf("%q (%s)", o.Name, o.file()))
			}
		}
		target := j.Index
		if j.Kind == jobdef.Mirror {
			target = j.Mirror
		}
		problems = append(problems, errs.New(errs.ConfigInvalid, j.Name, "%s: %s: %q is also written by job %s; each index or collection has one job, so none of them runs until one is changed",
			j.file(), j.targetBy(), target, strings.Join(others, ", ")))
	}
	return keep, problems
}

// target names what j writes, for the one-job-per-destination rule (a
// mirror may share its name with an index: they are different things).
func (j *Job) target() string {
	if j.Kind == jobdef.Mirror {
		return "mirror\x00" + j.Mirror
	}
	return "index\x00" + j.Index
}

func (j *Job) file() string {
	if j.envOnly {
		return envVar(EnvKey(j.Name), "*")
	}
	if j.File == "" {
		return j.Name
	}
	return filepath.Base(j.File)
}

// LoadFile compiles and checks one transform file's content src; path names
// it (its base name without ".js" is the job name). opts.Overrides of the
// job's EnvKey and opts.IndexPrefix are applied. Most callers want Load.
func LoadFile(path string, src []byte, opts Options) (*Job, error) {
	name := strings.TrimSuffix(filepath.Base(path), ".js")
	return loadFile(context.Background(), path, src, opts.withDefaults(), opts.Overrides[EnvKey(name)])
}

// loadFile is LoadFile with the job's overrides ov given (nil: none).
func loadFile(ctx context.Context, path string, src []byte, opts Options, ov map[string]string) (*Job, error) {
	name := strings.TrimSuffix(filepath.Base(path), ".js")
	sum := sha256.Sum256(src)
	j := &Job{Job: jobdef.Job{
		Name: name, File: path, LegacyHash: hex.EncodeToString(sum[:]),
		Database: opts.Database, Collection: name, Index: name, PrimaryKey: jobdef.DefaultPrimaryKey, Kind: jobdef.Search,
		Reindex: "swap", Sweep: true, Dates: "iso",
		OnDocumentError: opts.Defaults.OnDocumentError, OnHistoryLost: opts.Defaults.OnHistoryLost,
		BatchSize: opts.Defaults.BatchSize, FlushInterval: opts.Defaults.FlushInterval,
		SkipUnchanged: true, Mode: opts.Defaults.Mode, Key: jobdef.DefaultKey,
		ScanInterval: jobdef.DefaultScanInterval, SweepInterval: jobdef.DefaultSweepInterval, ScanOverlap: jobdef.DefaultScanOverlap,
	}, opts: opts, det: &determinism{}, sizes: &docSizes{}}
	j.log = opts.Logger.With("job", name)
	fileName := filepath.Base(path)
	if len(src) > maxFileSource {
		// goja's parser recurses per level of nesting, up to about 2 KB
		// of Go stack per byte: a bound on the size bounds it.
		return nil, errs.New(errs.TransformFailed, name, "%s is more than %d bytes, the most a transform file may be (keep large tables in the index's settings or the documents)", fileName, maxFileSource)
	}
	prog, err := compileModule(fileName, string(src))
	if err != nil {
		return nil, syntaxErr(j, src, err)
	}
	j.Hash = prog.hash
	j.underscore = namesUnderscore(src)
	con := newConsoleLimiter(j.log)
	// The first runtime evaluates the module for its options, then joins
	// the pool.
	first, err := newVM(ctx, j, prog.program, con, func(v *vm) error {
		if err := j.readOptions(v); err != nil {
			return err
		}
		if err := j.applyEnv(ov, opts.IndexPrefix); err != nil {
			return err
		}
		if err := j.resolveDatabases(); err != nil {
			return err
		}
		if err := j.refusePrivate(); err != nil {
			return err
		}
		return v.makeCtxs(j) // now that collection is known
	})
	if err != nil {
		return nil, err
	}
	if first.fn != nil || first.bare {
		j.rt = &jobRuntime{program: prog.program, console: con}
		if l := j.memoryLimit(); l > 0 {
			j.rt.mem = newMemWatch(l, j.timeout())
		}
		j.rt.pool = newPool(opts.Pool, func(ctx context.Context) (*vm, error) { return newVM(ctx, j, prog.program, con, nil) })
		j.rt.pool.adopt(first)
	} else {
		close(first.work) // no transform: the identity needs no runtime
	}
	return j, nil
}

// module is a transform file compiled, with the hash of its tokens.
type module struct {
	program *goja.Program
	hash    string
}

// compileModule parses a file's source once, wrapped as a CommonJS
// module, for both the program and the token hash (which needs the
// parser's word on which '/' starts a regular expression). Source maps
// are off: a "//# sourceMappingURL=" comment would otherwise make the
// parser read the file it names.
func compileModule(name, src string) (*module, error) {
	ast, err := goja.Parse(name, modulePrefix+src+moduleSuffix, parser.WithDisableSourceMaps)
	if err != nil {
		return nil, err
	}
	prog, err := goja.CompileAST(ast, false)
	if err != nil {
		return nil, err
	}
	return &module{program: prog, hash: tokenHash(src, regexpOffsets(ast, len(modulePrefix)), settingsRanges(ast, len(modulePrefix))...)}, nil
}

// syntaxErr reports a compile error as CONFIG_INVALID (the file is the
// configuration, and no restart fixes it) with the file's own line and
// column: the file is parsed again on its own (without the module
// wrapper) so positions are the user's. The parser's messages are kept
// only as far as they cannot quote the file (safeSyntaxText): a file that
// does not parse may not be a transform, and logs and /status must not
// show a secret mounted by mistake. The first error and up to three more
// distinct ones are named (a parser's later errors repeat the first); the
// cause is a *SyntaxError, from which `check` shows the lines around it.
// A file written as an ES module (export, import) is told to use
// module.exports: goja has no ES modules.
func syntaxErr(j *Job, src []byte, err error) error {
	file := filepath.Base(j.File)
	hint := ""
	if esModule(src) {
		hint = "; transforms are CommonJS files: write module.exports = { ... } (or module.exports = function ...) instead of export/import, which goja does not run"
	}
	_, perr := parser.ParseFile(nil, file, string(src), 0, parser.WithDisableSourceMaps)
	var list parser.ErrorList
	if errors.As(perr, &list) && len(list) > 0 {
		e := list[0]
		se := &SyntaxError{File: j.File, Line: e.Position.Line, Column: e.Position.Column, Message: safeSyntaxText(e.Message)}
		seen := map[string]bool{fmt.Sprintf("%d:%d %s", e.Position.Line, e.Position.Column, e.Message): true}
		var more []string
		for _, o := range list[1:] {
			k := fmt.Sprintf("%d:%d %s", o.Position.Line, o.Position.Column, o.Message)
			if seen[k] {
				continue
			}
			seen[k] = true
			if len(more) == 3 {
				more = append(more, "...")
				break
			}
			more = append(more, fmt.Sprintf("%d:%d: %s", o.Position.Line, o.Position.Column, safeSyntaxText(o.Message)))
		}
		also := ""
		if len(more) > 0 {
			also = "; then " + strings.Join(more, "; ")
		}
		se.text = fmt.Sprintf("%s:%d:%d: syntax error: %s%s%s", file, se.Line, se.Column, se.Message, also, hint)
		return &errs.Error{Code: errs.ConfigInvalid, Job: j.Name, Err: se}
	}
	var ce *goja.CompilerSyntaxError
	if errors.As(err, &ce) {
		at := ""
		se := &SyntaxError{File: j.File, Message: safeSyntaxText(ce.Message)}
		if ce.File != nil {
			p := ce.File.Position(ce.Offset)
			col := p.Column
			if p.Line == 1 {
				col -= len(modulePrefix)
			}
			se.Line, se.Column = p.Line, col
			at = fmt.Sprintf(":%d:%d", p.Line, col)
		}
		se.text = fmt.Sprintf("%s%s: syntax error: %s%s", file, at, se.Message, hint)
		return &errs.Error{Code: errs.ConfigInvalid, Job: j.Name, Err: se}
	}
	return errs.New(errs.ConfigInvalid, j.Name, "compile %s: %s%s", file, safeSyntaxText(err.Error()), hint)
}

// SyntaxError is where a transform file fails to parse: its path, the
// line and column of the first error (1-based; 0 when not known) and the
// parser's message as far as it quotes nothing of the file. It is the
// cause of the load's CONFIG_INVALID error, and its text the error's.
type SyntaxError struct {
	File         string
	Line, Column int
	Message      string
	text         string // the whole report: position, message, later errors, hint
}

func (e *SyntaxError) Error() string { return e.text }

// esModuleLine is a line of an ES module: an export or import statement.
var esModuleLine = regexp.MustCompile(`(?m)^\s*(export\s+(default\b|const\b|let\b|var\b|function\b|class\b|async\b|\{|\*)|import\s+([\w*{]|["']))`)

func esModule(src []byte) bool { return esModuleLine.Match(src) }

// readOptions reads the exported object's options into j (JobOptions),
// joining every problem.
func (j *Job) readOptions(v *vm) error {
	if v.bare {
		// A monstache script is a search job with every default; only
		// `samples` (for check) and `relate` (monstache's [[relate]], which
		// a script reading other collections with findId needs) may hang on
		// the function.
		j.Function = true
		fo := v.exports.(*goja.Object)
		var problems []error
		for _, k := range fo.Keys() {
			switch k {
			case "samples":
				samples, err := readSamples(v, fo.Get(k))
				if err != nil {
					problems = append(problems, configErr(j.Name, j.file(), k, "%s", err))
				}
				j.Samples = samples
			case "relate":
				relates, bad := readRelates(fo.Get(k), j.Collection)
				for _, p := range bad {
					problems = append(problems, configErr(j.Name, j.file(), k, "%s", p))
				}
				j.Relates = relates
			default:
				problems = append(problems, configErr(j.Name, j.file(), k, "a function transform takes no options but \"samples\" and \"relate\"; export an object with transform(doc, ctx) for options"))
			}
		}
		if msg := validIndexUID(j.Index); msg != "" {
			problems = append(problems, configErr(j.Name, j.file(), "", "the job name is the index uid of a function transform: %s; rename the file", msg))
		}
		return joinErrs(problems)
	}
	o, ok := v.exports.(*goja.Object)
	if !ok || o.ClassName() != "Object" {
		return configErr(j.Name, j.file(), "", "module.exports must be an object or a function, not %s", typeName(v.exports))
	}
	var problems []error
	bad := func(key, format string, args ...any) {
		problems = append(problems, configErr(j.Name, j.file(), key, format, args...))
	}
	keys := o.Keys()
	set := map[string]goja.Value{}
	j.keys = map[string]bool{}
	for _, k := range keys {
		if _, known := jobOption(k); !known {
			if near := closestKey(k); near != "" {
				bad(k, "unknown key; did you mean %q? (known: %s)", near, fileKeys())
			} else {
				bad(k, "unknown key (known: %s)", fileKeys())
			}
			continue
		}
		set[k] = o.Get(k)
		j.keys[k] = true
	}
	if _, isMirror := set["mirror"]; isMirror {
		j.Kind, j.Index, j.Mirror, j.Reindex, j.Sweep, j.PrimaryKey, j.Dates = jobdef.Mirror, "", j.Name, "inplace", false, "", ""
		for _, k := range searchOnlyKeys() {
			if _, ok := set[k]; ok {
				bad(k, "not an option of a mirror job (it has \"mirror\")")
			}
		}
	}
	for _, opt := range JobOptions {
		val, ok := set[opt.Key]
		if !ok || goja.IsUndefined(val) || opt.value == fileOnlyValue || (opt.Jobs != allJobs && opt.Jobs != j.Kind) {
			continue
		}
		x, problem := opt.fromJS(val)
		if problem == "" {
			problem = opt.set(j, x)
		}
		if problem != "" {
			bad(opt.Key, "%s", problem)
		}
	}
	if val, ok := set["transform"]; ok && !goja.IsUndefined(val) {
		if _, isFn := goja.AssertFunction(val); !isFn {
			bad("transform", "must be a function, not %s", typeName(val))
		}
	}
	if val, ok := set["settings"]; ok && !goja.IsUndefined(val) {
		so, isObj := val.(*goja.Object)
		if !isObj || so.ClassName() != "Object" {
			bad("settings", "must be an object of Meilisearch index settings, not %s", typeName(val))
		} else {
			c := outConv{job: j, v: v, limit: j.opts.MaxResultBytes}
			err := c.object(so)
			var m any
			if err == nil {
				m, err = decodeJSON(c.buf)
			}
			if err != nil {
				bad("settings", "%v", errMsg(err))
			} else {
				j.Settings = m.(map[string]any)
				// encoding/json writes map keys sorted: the same
				// settings, the same hash, however the file orders them.
				b, _ := json.Marshal(j.Settings)
				sum := sha256.Sum256(b)
				j.SettingsHash = hex.EncodeToString(sum[:])
			}
		}
	}
	if val, ok := set["samples"]; ok && !goja.IsUndefined(val) {
		samples, err := readSamples(v, val)
		if err != nil {
			bad("samples", "%s", err)
		} else {
			j.Samples = samples
		}
	}
	if val, ok := set["lookups"]; ok && !goja.IsUndefined(val) {
		lookups, problems := readLookups(v, val)
		for _, p := range problems {
			bad("lookups", "%s", p)
		}
		j.Lookups = lookups
	}
	if val, ok := set["relate"]; ok && !goja.IsUndefined(val) {
		relates, problems := readRelates(val, j.Collection)
		for _, p := range problems {
			bad("relate", "%s", p)
		}
		j.Relates = relates
	}
	if val, ok := set["scanKeys"]; ok && !goja.IsUndefined(val) {
		keys, problems := readScanKeys(val)
		for _, p := range problems {
			bad("scanKeys", "%s", p)
		}
		j.ScanKeys = keys
	}
	if val, ok := set["related"]; ok && !goja.IsUndefined(val) {
		related, problem := readRelated(v, val)
		if problem != "" {
			bad("related", "%s", problem)
		}
		j.Related = related
	}
	if j.Kind == jobdef.Search {
		if msg := validIndexUID(j.Index); msg != "" {
			key := "index"
			if _, ok := set["index"]; !ok {
				msg += " (the default is the file name; set \"index\")"
			}
			bad(key, "%s", msg)
		}
	}
	return joinErrs(problems)
}

func isObject(v goja.Value) bool {
	_, ok := v.(*goja.Object)
	return ok
}

func errMsg(err error) string {
	var e *errs.Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}

// validIndexUID checks a Meilisearch index uid: [A-Za-z0-9_-], at most 400
// bytes; "__reindex" at the end is kept for the staging index of a swap.
func validIndexUID(s string) string {
	if s == "" || len(s) > 400 || !jobdef.InIDAlphabet(s) {
		return fmt.Sprintf("%q is not a Meilisearch index uid (1 to 400 characters of A-Z a-z 0-9 _ -)", s)
	}
	if strings.HasSuffix(s, "__reindex") {
		return fmt.Sprintf("%q ends in \"__reindex\", which meilistream keeps for the index a reindex builds", s)
	}
	return ""
}

func validPrimaryKey(s string) string {
	if s == "" || len(s) > 255 || strings.ContainsAny(s, ".\x00") {
		return fmt.Sprintf("%q is not a usable primary key (a field name without dots)", s)
	}
	return ""
}

// validDatabase checks a MongoDB database name: not empty, fewer than 64
// bytes, none of / \ . space " $ nor NUL (MongoDB's "Naming
// Restrictions" for Unix and Linux; the space, slash, backslash, quote and
// NUL on every platform, mongod's namespace_string).
func validDatabase(s string) string {
	if s == "" || len(s) >= 64 || strings.ContainsAny(s, "/\\. \"$\x00") {
		return fmt.Sprintf("%q is not a database name", s)
	}
	return ""
}

func validCollection(s string) string {
	if s == "" || len(s) > 255 || strings.ContainsAny(s, "$\x00") || strings.HasPrefix(s, "system.") {
		return fmt.Sprintf("%q is not a collection name", s)
	}
	return ""
}

// readSamples turns the `samples` array into BSON documents. A sample is
// written as MongoDB Extended JSON (so {"$oid": "..."} is an ObjectId and
// {"$date": "..."} a date); a sample without _id gets its position (1, 2,
// ...) as _id.
func readSamples(v *vm, val goja.Value) ([]bson.Raw, error) {
	a, ok := val.(*goja.Object)
	if !ok || a.ClassName() != "Array" {
		return nil, fmt.Errorf("must be an array of documents, not %s", typeName(val))
	}
	stringify, _ := goja.AssertFunction(v.rt.Get("JSON").ToObject(v.rt).Get("stringify"))
	n := a.Get("length").ToInteger()
	var out []bson.Raw
	for i := int64(0); i < n; i++ {
		el := a.Get(fmt.Sprint(i))
		eo, ok := el.(*goja.Object)
		if !ok || eo.ClassName() != "Object" {
			return nil, fmt.Errorf("sample %d must be a document, not %s", i+1, typeName(el))
		}
		js, err := stringify(goja.Undefined(), el)
		if err != nil {
			return nil, fmt.Errorf("sample %d: %v", i+1, err)
		}
		raw, err := parseSample([]byte(js.String()), int(i+1))
		if err != nil {
			return nil, fmt.Errorf("sample %d: %v", i+1, err)
		}
		out = append(out, raw)
	}
	return out, nil
}

// parseSample reads one Extended JSON document; without _id it gets n.
func parseSample(js []byte, n int) (bson.Raw, error) {
	var d bson.D
	if err := bson.UnmarshalExtJSON(js, false, &d); err != nil {
		return nil, fmt.Errorf("not a document in MongoDB Extended JSON: %v", err)
	}
	has := false
	for _, e := range d {
		if e.Key == "_id" {
			has = true
		}
	}
	if !has {
		d = append(bson.D{{Key: "_id", Value: int32(n)}}, d...)
	}
	return bson.Marshal(d)
}

// envJobTypo refuses a job declared by environment alone whose name is a
// near miss of a job file's (MEILISTREAM_JOB_BOKS_INDEX beside books.js)
// and that names no collection of its own: such a variable is almost
// always a typo, and would otherwise quietly start a job on a collection
// that does not exist. Naming the collection (_COLLECTION, or _MIRROR for
// a mirror's destination with it) says the job is meant.
func envJobTypo(key string, ov map[string]string, byKey map[string][]string) error {
	if _, ok := ov["collection"]; ok {
		return nil
	}
	best, bestDist := "", 0
	for k, names := range byKey {
		if len(names) == 0 {
			continue
		}
		if d := nameDistance(key, k); d <= typoBound(k) && (best == "" || d < bestDist || d == bestDist && k < best) {
			best, bestDist = names[0], d
		}
	}
	if best == "" {
		return nil
	}
	var set []string
	for o := range ov {
		set = append(set, envVar(key, o))
	}
	sort.Strings(set)
	return errs.New(errs.ConfigInvalid, key, "%s: no transform file is named %q; did you mean job %q (MEILISTREAM_JOB_%s_*)? To declare job %q by environment alone, also set %s",
		strings.Join(set, ", "), key, best, strings.ToUpper(EnvKey(best)), key, envVar(key, "collection"))
}

// typoBound is how far (in edits) a name may be from a job's name and
// still be taken for a misspelling of it: none under four letters (every
// short name is a letter or two from another), one edit up to five, two
// from six letters on.
func typoBound(name string) int {
	switch {
	case len(name) < 4:
		return -1
	case len(name) < 6:
		return 1
	}
	return 2
}

// nameDistance is the Levenshtein distance between two job override keys.
func nameDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// closestKey is the known option key a misspelt one most likely meant:
// the nearest by edit distance, case ignored, within a third of its
// length (at least one edit); "" when none is that close.
func closestKey(k string) string {
	best, bestDist := "", 0
	for _, known := range strings.Split(fileKeys(), ", ") {
		d := nameDistance(strings.ToLower(k), strings.ToLower(known))
		if d <= max(1, len(known)/3) && (best == "" || d < bestDist) {
			best, bestDist = known, d
		}
	}
	return best
}
