package transform

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// Check loads every transform in dir, reports what is wrong, and prints
// what each job would write for each sample document: the samples of
// samplePath (MongoDB Extended JSON, one document per line; blank lines and
// lines starting with "//" are skipped) for every job when it is not empty,
// else each job's own `samples`. It is `meilistream check`, what users run
// in their CI. The returned error joins every problem (a file that does not
// load, a sample a transform fails on); nil means all is well.
func Check(w io.Writer, dir, samplePath string, opts Options) error {
	return CheckFiles(w, []string{dir}, samplePath, opts)
}

// CheckFiles is Check for a list of paths, each a *.js file or a folder
// (see LoadFiles).
func CheckFiles(w io.Writer, paths []string, samplePath string, opts Options) error {
	var problems []error
	var fileSamples []bson.Raw
	if samplePath != "" {
		var err error
		fileSamples, err = readSampleFile(samplePath)
		if err != nil {
			// Say it here: the caller only adds "problems listed above".
			fmt.Fprintf(w, "error: %s\n", errs.Format(err))
			return err
		}
	}
	set, err := LoadFiles(paths, opts)
	if set == nil {
		fmt.Fprintf(w, "error: %s\n", errs.Format(err))
		return err
	}
	defer set.Close()
	if err != nil {
		for _, e := range unjoin(err) {
			fmt.Fprintf(w, "error: %s\n", errs.Format(e))
			printExcerpt(w, e)
			problems = append(problems, e)
		}
	}
	if len(set.Jobs()) == 0 && err == nil {
		fmt.Fprintf(w, "no transforms (*.js) in %s\n", strings.Join(paths, ", "))
	}
	ctx := context.Background()
	for _, j := range set.Jobs() {
		fmt.Fprintf(w, "%s: ok: %s\n", j.file(), j.describe())
		for _, l := range j.Lookups {
			if _, ok := j.Related[l.From]; !ok {
				fmt.Fprintf(w, "  lookup %s: no documents of %s to resolve it against (declare some in related: {%s: [...]}); it finds nothing here\n", l.Name, l.From, l.From)
			}
		}
		samples := j.Samples
		if fileSamples != nil {
			samples = fileSamples
		}
		for i, doc := range samples {
			label := fmt.Sprintf("  sample %d", i+1)
			if idv, err := doc.LookupErr("_id"); err == nil {
				label += " (_id " + relaxedJSON(idv) + ")"
			}
			if j.StreamFields() != nil {
				// What run would see: the sample trimmed to the fields.
				var err error
				if doc, err = j.checkFields(ctx, w, label, doc); err != nil {
					fmt.Fprintf(w, "%s: error: %s\n", label, errs.Format(err))
					problems = append(problems, err)
					continue
				}
			}
			res, err := j.apply(ctx, doc, OpInsert, nil, j.ResolveSamples(doc, j.Related))
			var none *noMongoDB
			switch {
			case errors.As(err, &none):
				// Not the transform's fault: the rest of the check
				// stands, and the sample is reported as not run.
				fmt.Fprintf(w, "%s: not run: %s", label, none.Error())
				if h := j.opts.NoReaderHint; h != "" {
					fmt.Fprintf(w, "; %s", h)
				}
				fmt.Fprintln(w)
			case err != nil:
				fmt.Fprintf(w, "%s: error: %s\n", label, errs.Format(err))
				problems = append(problems, err)
			case res.Skip:
				fmt.Fprintf(w, "%s: skipped (kept out of the %s)\n", label, map[jobdef.Kind]string{jobdef.Search: "index", jobdef.Mirror: "replica"}[j.Kind])
			case j.Kind == jobdef.Mirror:
				// Canonical Extended JSON shows that BSON types are kept.
				b, _ := bson.MarshalExtJSON(res.Raw, true, false)
				fmt.Fprintf(w, "%s: %s\n", label, b)
			default:
				b, err := json.Marshal(res.Doc)
				if err != nil {
					err = errs.Wrap(errs.NotADocument, j.Name, err, "encode the result as JSON")
					fmt.Fprintf(w, "%s: error: %s\n", label, errs.Format(err))
					problems = append(problems, err)
					continue
				}
				fmt.Fprintf(w, "%s: %s\n", label, b)
			}
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "%d problem(s)\n", len(problems))
	}
	return joinErrs(problems)
}

// describe is one line about a job for check. A collection of another
// database than the main one (MEILISTREAM_MONGODB_DATABASE) is written
// db.collection: the job's, and a lookup's or relate's of another database
// than the job's.
func (j *Job) describe() string {
	var b strings.Builder
	src := j.Collection
	if j.Database != j.opts.Database {
		src = jobdef.Namespace(j.Database, j.Collection)
	}
	in := func(db, coll string) string {
		if db != j.Database {
			return jobdef.Namespace(db, coll)
		}
		return coll
	}
	if j.Kind == jobdef.Mirror {
		fmt.Fprintf(&b, "mirror %s -> replica collection %s", src, j.Mirror)
	} else {
		fmt.Fprintf(&b, "search %s -> index %s (%s)", src, j.Index, j.describeOptions())
	}
	switch {
	case j.Function:
		b.WriteString(", monstache-style function")
	case j.rt == nil:
		b.WriteString(", no transform (identity)")
	}
	if j.Settings != nil {
		b.WriteString(", with settings")
	}
	for _, l := range j.Lookups {
		many := ""
		if l.Many {
			many = ", many"
		}
		fmt.Fprintf(&b, ", lookup %s: %s.%s = %s%s", l.Name, in(l.Database, l.From), l.ForeignField, l.LocalField, many)
	}
	for _, r := range j.Relates {
		fmt.Fprintf(&b, ", relate %s.%s -> %s", in(r.Database, r.Namespace), r.SrcField, r.MatchField)
	}
	if j.Fields != nil {
		fmt.Fprintf(&b, ", fields %s", strings.Join(j.Fields, ", "))
	}
	if !j.SkipUnchanged {
		b.WriteString(", skipUnchanged off")
	}
	return b.String()
}

// checkFields warns when the transform reads, on the whole sample, what
// j.Fields leaves out (the server trims documents to them: the transform
// would not see it), and returns the sample as run would see it.
func (j *Job) checkFields(ctx context.Context, w io.Writer, label string, doc bson.Raw) (bson.Raw, error) {
	// A call failing on the whole sample says nothing of what run does:
	// the call on the trimmed one, next, is what counts.
	if outside, err := j.outsideFields(ctx, doc); err == nil && outside != "" {
		fmt.Fprintf(w, "%s: warning: the transform reads %s, which fields (%s) leaves out: documents are trimmed to fields at the server, so it would not see it; add it to fields\n",
			label, outside, strings.Join(j.Fields, ", "))
	}
	trimmed, err := trimToFields(doc, j.StreamFields())
	if err != nil {
		return nil, errs.Wrap(errs.NotADocument, j.Name, err, "trim the sample to fields")
	}
	return trimmed, nil
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// maxSampleFile bounds a samples file (one line may be a 16 MB document).
const maxSampleFile = 256 << 20

// readSampleFile reads Extended JSON documents, one a line.
func readSampleFile(path string) ([]bson.Raw, error) {
	data, err := readRegular(path, maxSampleFile+1)
	if err != nil {
		return nil, errs.Wrap(errs.ConfigInvalid, "", err, "read samples")
	}
	if len(data) > maxSampleFile {
		return nil, errs.New(errs.ConfigInvalid, "", "read samples: %s is more than %d bytes", path, maxSampleFile)
	}
	var out []bson.Raw
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || bytes.HasPrefix(line, []byte("//")) {
			continue
		}
		raw, err := parseSample(line, len(out)+1)
		if err != nil {
			return nil, errs.New(errs.ConfigInvalid, "", "%s:%d: %v", path, n, err)
		}
		out = append(out, raw)
	}
	if err := sc.Err(); err != nil {
		return nil, errs.Wrap(errs.ConfigInvalid, "", err, "read samples %s", path)
	}
	if len(out) == 0 {
		return nil, errs.New(errs.ConfigInvalid, "", "%s holds no sample documents", path)
	}
	return out, nil
}

// relaxedJSON renders one value as relaxed Extended JSON.
func relaxedJSON(v bson.RawValue) string {
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return v.String()
	}
	s := strings.TrimPrefix(string(b), `{"v":`)
	return strings.TrimSuffix(s, "}")
}

// printExcerpt shows, for a file that does not parse, the lines around the
// first error with a caret under its column: check runs on the operator's
// own files in their terminal or CI, where the source may be shown (the
// sidecar's logs and /status never show it).
func printExcerpt(w io.Writer, err error) {
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line <= 0 {
		return
	}
	src, rerr := os.ReadFile(se.File)
	if rerr != nil {
		return
	}
	lines := strings.Split(string(src), "\n")
	from, to := max(1, se.Line-2), min(len(lines), se.Line)
	for n := from; n <= to; n++ {
		line := strings.TrimRight(lines[n-1], "\r")
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		fmt.Fprintf(w, "  %4d | %s\n", n, line)
	}
	if se.Column > 0 && se.Line <= len(lines) {
		pad := []rune(lines[se.Line-1])
		col := min(se.Column-1, len(pad), 200)
		prefix := strings.Map(func(r rune) rune {
			if r == '\t' {
				return '\t'
			}
			return ' '
		}, string(pad[:col]))
		fmt.Fprintf(w, "       | %s^\n", prefix)
	}
}
