package transform

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// monstache's script globals (rwynn/monstache, monstache.go,
// loadBuiltinFunctionsForEnvs and makeFind; documented in
// rwynn/monstache-site, advanced.md, "Embedding Documents"):
//
//	findId(id, [options])       one document by _id, or null
//	findOne(query, [options])   one document, or null
//	find(query, [options])      an array of documents
//	pipe(stages, [options])     an array of documents, from an aggregation
//
// options: database and collection (default: the job's), select (a
// projection; find, findOne, findId), sort and limit (find; sort also in
// findOne). They read the source MongoDB through the Reader the job's
// Options give, and only read: the Reader has no method that writes, and
// pipe refuses $out and $merge. Each call has what remains of its
// transform call's time limit, and returns at most MaxReadDocuments
// documents and MaxReadBytes of BSON.

// Reader reads the source MongoDB for the findId, findOne, find and pipe
// globals of monstache-style function transforms. The engine implements it
// over its MongoDB client; Options.Reader passes it to the jobs. Methods
// are called from several runtimes at once, each with a context that ends
// at its transform call's time limit. The documents they return belong to
// the caller (a cursor's buffer must be copied).
//
// An error wrapping ErrQuery says the server refused the query itself (a
// bad operator, a malformed stage): the script's mistake, which fails the
// document (TRANSFORM_FAILED). Any other error (the server unreachable, a
// lost primary, missing privileges) fails the whole call with FAILED, so
// the job tries its batch again rather than set documents aside for what
// is not their fault.
type Reader interface {
	// FindOne returns the first document of db.coll that matches filter
	// (in opts.Sort order when given), or nil and no error when none does.
	FindOne(ctx context.Context, db, coll string, filter bson.Raw, opts ReadOptions) (bson.Raw, error)
	// Find returns the documents of db.coll that match filter, in
	// opts.Sort order, at most opts.Limit of them; it stops reading once
	// the documents read hold more than opts.MaxBytes bytes.
	Find(ctx context.Context, db, coll string, filter bson.Raw, opts ReadOptions) ([]bson.Raw, error)
	// Aggregate runs pipeline, one document per stage, on db.coll and
	// returns its documents, at most opts.Limit of them, stopping once
	// they hold more than opts.MaxBytes bytes. opts.Projection and
	// opts.Sort are unset. The pipeline holds no $out or $merge stage.
	Aggregate(ctx context.Context, db, coll string, pipeline []bson.Raw, opts ReadOptions) ([]bson.Raw, error)
}

// ReadOptions are a read's projection, order and bounds.
type ReadOptions struct {
	Projection bson.Raw // nil: whole documents
	Sort       bson.Raw // nil: the server's order
	Limit      int64    // at most this many documents; always > 0
	MaxBytes   int      // stop reading past this many bytes of documents; always > 0
}

// ErrQuery marks a Reader's error as the server refusing the query (see
// Reader).
var ErrQuery = errors.New("the server refused the query")

// ErrNoMongoDB is under the failure of a call that reads MongoDB (findId,
// findOne, find, pipe) where there is none to read (Options.Reader is
// nil: meilistream check without the source's address).
var ErrNoMongoDB = errors.New("no MongoDB to read")

// noMongoDB is ErrNoMongoDB naming the read global called.
type noMongoDB struct{ fn string }

func (e *noMongoDB) Error() string {
	return e.fn + ": the transform reads MongoDB, and there is no MongoDB to read here"
}
func (e *noMongoDB) Is(target error) bool { return target == ErrNoMongoDB }

// ReadStat is one findId, findOne, find or pipe call, for the metrics
// (Options.OnRead).
type ReadStat struct {
	Job  string
	Func string        // "findId", "findOne", "find" or "pipe"
	Took time.Duration // waiting for MongoDB
	Docs int           // documents returned
	Err  error         // nil, or why the call failed
}

// The bounds of one call: find and pipe fail (a RangeError) rather than
// return part of what matched, and find refuses a larger limit.
const (
	// MaxReadDocuments is the most documents one find or pipe returns
	// (find's default limit, and its largest).
	MaxReadDocuments = 1000
	// MaxReadBytes is the most BSON one call returns, in all.
	MaxReadBytes = 16 << 20
)

// readFuncs are the globals, in the order they are installed.
var readFuncs = []string{"findId", "findOne", "find", "pipe"}

// installReaders defines the read globals in v's runtime. monstache sets
// them after a script's module code has run, so they exist only in calls.
func (v *vm) installReaders() error {
	for _, name := range readFuncs {
		name := name
		f := func(c goja.FunctionCall) goja.Value { return v.read(name, c) }
		if err := v.rt.Set(name, f); err != nil {
			return err
		}
	}
	return nil
}

// readCall is one call's parsed arguments.
type readCall struct {
	fn       string
	db, coll string
	filter   bson.Raw   // findId, findOne, find
	stages   []bson.Raw // pipe
	opts     ReadOptions
}

// read runs one of the read globals (on v's goroutine, inside a transform
// call). Mistakes in its arguments are TypeErrors and RangeErrors the
// script may catch; so is the server refusing the query. A failure of the
// server itself fails the call whatever the script does (v.readFail).
func (v *vm) read(fn string, c goja.FunctionCall) goja.Value {
	j := v.req.job
	if j == nil || v.guard == nil {
		panic(v.rt.NewGoError(fmt.Errorf("%s may only be called while a document is transformed, not while the module loads", fn)))
	}
	// What the call reads elsewhere no update of its document shows (a
	// relate sends its dependents again when it changes; an update of the
	// document itself must then be sent too, as before skipUnchanged).
	v.reads.unknown = true
	rc := readCall{fn: fn, db: j.Database, coll: j.Collection}
	if thrown := v.parseRead(&rc, c); thrown != nil {
		panic(thrown)
	}
	r := j.opts.Reader
	if r == nil {
		// One message for every read global, before any question of
		// which database: without a MongoDB there is nothing to ask.
		// It fails the call whatever the script does: a result made
		// from a caught read would show what the job never writes.
		err := &errs.Error{Code: errs.TransformFailed, Job: j.Name, Err: &noMongoDB{fn: fn}}
		v.readFail = err
		panic(v.rt.NewGoError(err))
	}
	if rc.db == "" {
		panic(v.rt.NewTypeError("%s: no database: give options.database (the job's source database is not known here)", fn))
	}
	if err := j.refuseRead(&rc); err != nil {
		v.readFail = err
		panic(v.rt.NewGoError(err))
	}
	ctx, cancel, ok := v.guard.readContext()
	if !ok {
		v.guard.expire()
		panic(v.rt.NewGoError(fmt.Errorf("%s: the transform call's time limit ran out", fn)))
	}
	start := time.Now()
	docs, err := v.runRead(ctx, r, &rc)
	took := time.Since(start)
	ended := ctx.Err() != nil
	cancel()
	if err == nil {
		err = checkReadBounds(&rc, docs)
	}
	if on := j.opts.OnRead; on != nil {
		on(ReadStat{Job: j.Name, Func: fn, Took: took, Docs: len(docs), Err: err})
	}
	if err != nil {
		panic(v.readError(j, &rc, err, ended))
	}
	return v.readResult(&rc, docs)
}

// runRead calls the Reader.
func (v *vm) runRead(ctx context.Context, r Reader, rc *readCall) ([]bson.Raw, error) {
	switch rc.fn {
	case "findId", "findOne":
		doc, err := r.FindOne(ctx, rc.db, rc.coll, rc.filter, rc.opts)
		if doc == nil || err != nil {
			return nil, err
		}
		return []bson.Raw{doc}, nil
	case "find":
		return r.Find(ctx, rc.db, rc.coll, rc.filter, rc.opts)
	default:
		return r.Aggregate(ctx, rc.db, rc.coll, rc.stages, rc.opts)
	}
}

// errTooMany and errTooLarge are a result beyond the call's bounds.
var (
	errTooMany  = errors.New("too many documents")
	errTooLarge = errors.New("too large")
)

func checkReadBounds(rc *readCall, docs []bson.Raw) error {
	if int64(len(docs)) > rc.opts.Limit || len(docs) > MaxReadDocuments {
		return errTooMany
	}
	n := 0
	for _, d := range docs {
		n += len(d)
	}
	if n > MaxReadBytes {
		return errTooLarge
	}
	return nil
}

// readError is what a failed read throws; a failure of the server (not
// of the query) also fails the transform call (v.readFail), and a read
// that ran out of the call's time interrupts the call as its time limit
// would.
func (v *vm) readError(j *Job, rc *readCall, err error, ended bool) goja.Value {
	where := rc.fn + " on " + rc.db + "." + rc.coll
	switch {
	case errors.Is(err, errTooMany) && rc.fn == "find" && rc.opts.Limit == MaxReadDocuments+1:
		return v.rangeError(fmt.Sprintf("%s: more than %d documents match; give a limit (at most %d) or a narrower query", where, MaxReadDocuments, MaxReadDocuments))
	case errors.Is(err, errTooMany):
		return v.rangeError(fmt.Sprintf("%s: the pipeline returns more than %d documents, the most one call may; end it with a $limit", where, MaxReadDocuments))
	case errors.Is(err, errTooLarge):
		return v.rangeError(fmt.Sprintf("%s: the documents returned hold more than %d bytes, the most one call may; select fewer fields or fewer documents", where, MaxReadBytes))
	case ended:
		// The call's context ended or its time ran out: stop the call
		// now, as the guard is about to.
		v.guard.expire()
		return v.rt.NewGoError(fmt.Errorf("%s: the transform call's time limit ran out while reading MongoDB", where))
	case errors.Is(err, ErrQuery):
		return v.rt.NewGoError(fmt.Errorf("%s: %s", where, clipText(err.Error(), maxErrorText)))
	}
	if v.readFail == nil {
		v.readFail = errs.Wrap(errs.Failed, j.Name, err, "%s (for a monstache script): reading MongoDB failed; the batch is tried again", where)
	}
	return v.rt.NewGoError(fmt.Errorf("%s: reading MongoDB failed", where))
}

func (v *vm) rangeError(msg string) goja.Value {
	ctor, _ := goja.AssertConstructor(v.rangeErrCtor)
	if ctor == nil {
		return v.rt.NewGoError(errors.New(msg))
	}
	o, err := ctor(nil, v.rt.ToValue(msg))
	if err != nil {
		return v.rt.NewGoError(errors.New(msg))
	}
	return o
}

// readResult turns what was read into JavaScript: findId and findOne a
// document or null, find and pipe an array. The documents go through the
// conversion of the transform's own document (a function transform sees
// ObjectIds as hex strings, as monstache's scripts do).
func (v *vm) readResult(rc *readCall, docs []bson.Raw) goja.Value {
	in := inConv{v: v}
	conv := func(d bson.Raw) goja.Value {
		o, err := in.doc(d, 0)
		if err != nil {
			panic(v.rt.NewGoError(fmt.Errorf("%s: a document read: %w", rc.fn, err)))
		}
		return o
	}
	if rc.fn == "findId" || rc.fn == "findOne" {
		if len(docs) == 0 {
			return goja.Null()
		}
		return conv(docs[0])
	}
	out := make([]any, len(docs))
	for i, d := range docs {
		out[i] = conv(d)
	}
	return v.rt.NewArray(out...)
}

// readKeys are the options each function takes. monstache reads database,
// collection and select in every function, sort and limit in find; a key
// it does not use (sort and limit elsewhere, select in pipe) is accepted
// and ignored as there, except that findOne honours sort. Any other key (a
// misspelt "colection" would read the wrong collection) is a TypeError.
var readKeys = map[string]bool{"database": true, "collection": true, "select": true, "sort": true, "limit": true}

// readArg names each function's first argument.
var readArg = map[string]string{"findId": "an id", "findOne": "a query", "find": "a query", "pipe": "an array of stages"}

// parseRead reads the call's arguments into rc; a mistake is a thrown
// TypeError or RangeError (as a value to panic with).
func (v *vm) parseRead(rc *readCall, c goja.FunctionCall) goja.Value {
	if len(c.Arguments) == 0 {
		return v.rt.NewTypeError("%s needs %s", rc.fn, readArg[rc.fn])
	}
	if tv := v.parseReadOptions(rc, c.Argument(1)); tv != nil {
		return tv
	}
	restore := v.bare
	q := queryConv{v: v, fn: rc.fn, restore: restore}
	arg := c.Argument(0)
	switch rc.fn {
	case "findId":
		idx, b := bsoncore.AppendDocumentStart(nil)
		b, err := q.value(b, "_id", arg, 1)
		if err != nil {
			return v.rt.NewTypeError("%s", err.Error())
		}
		b, _ = bsoncore.AppendDocumentEnd(b, idx)
		rc.filter = b
	case "findOne", "find":
		o, ok := arg.(*goja.Object)
		if !ok || o.ClassName() != "Object" || v.special(o) {
			return v.rt.NewTypeError("%s: the query must be an object, not %s", rc.fn, v.typeName(arg))
		}
		b, err := q.document(o)
		if err != nil {
			return v.rt.NewTypeError("%s", err.Error())
		}
		rc.filter = b
	case "pipe":
		o, ok := arg.(*goja.Object)
		if !ok || o.ClassName() != "Array" {
			return v.rt.NewTypeError("pipe: the stages must be an array, not %s", v.typeName(arg))
		}
		n := o.Get("length").ToInteger()
		if n > maxStages {
			return v.rt.NewTypeError("pipe: %d stages, more than the %d a pipeline may have", n, maxStages)
		}
		for i := int64(0); i < n; i++ {
			el := o.Get(strconv.FormatInt(i, 10))
			so, ok := el.(*goja.Object)
			if !ok || so.ClassName() != "Object" || v.special(so) {
				return v.rt.NewTypeError("pipe: stage %d must be an object, not %s", i, v.typeName(el))
			}
			q.path = append(q.path[:0], strconv.FormatInt(i, 10))
			b, err := q.document(so)
			if err != nil {
				return v.rt.NewTypeError("%s", err.Error())
			}
			rc.stages = append(rc.stages, b)
		}
	}
	return nil
}

// maxStages bounds a pipeline's stages (MongoDB's own limit is 1000).
const maxStages = 1000

// parseReadOptions reads the options argument (undefined or null: none).
func (v *vm) parseReadOptions(rc *readCall, arg goja.Value) goja.Value {
	rc.opts.MaxBytes = MaxReadBytes
	rc.opts.Limit = 1
	if rc.fn == "find" || rc.fn == "pipe" {
		rc.opts.Limit = MaxReadDocuments + 1 // one more, to tell "more than the cap"
	}
	if arg == nil || goja.IsUndefined(arg) || goja.IsNull(arg) {
		return nil
	}
	o, ok := arg.(*goja.Object)
	if !ok || o.ClassName() != "Object" || v.special(o) {
		return v.rt.NewTypeError("%s: the options must be an object, not %s", rc.fn, v.typeName(arg))
	}
	for _, k := range o.Keys() {
		if !readKeys[k] {
			return v.rt.NewTypeError("%s: unknown option %q; the options are database, collection, select, sort (find, findOne) and limit (find)", rc.fn, clipText(k, maxKeyText))
		}
		val := o.Get(k)
		if goja.IsUndefined(val) {
			continue
		}
		switch k {
		case "database", "collection":
			s, ok := val.Export().(string)
			if !ok || s == "" || strings.ContainsAny(s, "\x00") || (k == "database" && strings.ContainsAny(s, "/\\. \"$")) || (k == "collection" && strings.Contains(s, "$")) {
				return v.rt.NewTypeError("%s: option %s must be a %s name, not %s", rc.fn, k, k, v.typeName(val))
			}
			if k == "database" {
				rc.db = s
			} else {
				rc.coll = s
			}
		case "select":
			if rc.fn == "pipe" {
				continue
			}
			so, ok := val.(*goja.Object)
			if !ok || so.ClassName() != "Object" || v.special(so) {
				return v.rt.NewTypeError("%s: option select must be an object ({field: 1, ...}), not %s", rc.fn, v.typeName(val))
			}
			q := queryConv{v: v, fn: rc.fn, path: []string{"select"}}
			b, err := q.document(so)
			if err != nil {
				return v.rt.NewTypeError("%s", err.Error())
			}
			rc.opts.Projection = b
		case "sort":
			if rc.fn != "find" && rc.fn != "findOne" {
				continue
			}
			b, tv := v.parseSort(rc.fn, val)
			if tv != nil {
				return tv
			}
			rc.opts.Sort = b
		case "limit":
			if rc.fn != "find" {
				continue
			}
			f, ok := val.Export().(int64)
			if fl, isF := val.Export().(float64); isF && fl == math.Trunc(fl) && math.Abs(fl) <= jobdef.MaxSafeInteger {
				f, ok = int64(fl), true
			}
			if !ok {
				return v.rt.NewTypeError("find: option limit must be an integer, not %s", v.typeName(val))
			}
			if f > MaxReadDocuments {
				return v.rangeError(fmt.Sprintf("find: limit %d is more than %d, the most documents one call may return", f, MaxReadDocuments))
			}
			if f > 0 { // as in monstache, 0 or less is no limit
				rc.opts.Limit = f
			}
		}
	}
	return nil
}

// parseSort reads sort: an object ({name: 1, age: -1}, what monstache's
// code reads) or, as its documentation writes it (sort: ["name"], mgo's
// Sort), field names, each descending when it starts with "-".
func (v *vm) parseSort(fn string, val goja.Value) (bson.Raw, goja.Value) {
	if s, ok := val.Export().(string); ok {
		val = v.rt.NewArray(s)
	}
	o, ok := val.(*goja.Object)
	if !ok || v.special(o) || (o.ClassName() != "Object" && o.ClassName() != "Array") {
		return nil, v.rt.NewTypeError("%s: option sort must be an object ({name: 1}) or an array of field names ([\"name\", \"-age\"]), not %s", fn, v.typeName(val))
	}
	if o.ClassName() == "Object" {
		q := queryConv{v: v, fn: fn, path: []string{"sort"}}
		b, err := q.document(o)
		if err != nil {
			return nil, v.rt.NewTypeError("%s", err.Error())
		}
		return b, nil
	}
	idx, b := bsoncore.AppendDocumentStart(nil)
	n := o.Get("length").ToInteger()
	if n > maxStages {
		return nil, v.rt.NewTypeError("%s: option sort has %d fields", fn, n)
	}
	for i := int64(0); i < n; i++ {
		el := o.Get(strconv.FormatInt(i, 10))
		s, ok := el.Export().(string)
		dir := int32(1)
		if ok && strings.HasPrefix(s, "-") {
			s, dir = s[1:], -1
		} else if ok && strings.HasPrefix(s, "+") {
			s = s[1:]
		}
		if !ok || s == "" || strings.IndexByte(s, 0) >= 0 {
			return nil, v.rt.NewTypeError("%s: option sort: element %d must be a field name, not %s", fn, i, v.typeName(el))
		}
		b = bsoncore.AppendInt32Element(b, s, dir)
	}
	b, _ = bsoncore.AppendDocumentEnd(b, idx)
	return b, nil
}

// queryConv writes a query, a stage, a projection or a sort from
// JavaScript as BSON. Values map as a mirror's new values do (an integer
// that fits is an int32, other numbers doubles, a Date a date, the BSON
// classes their types), with what queries also need: a RegExp is a BSON
// regular expression, undefined is null (as monstache sends it, so a
// query on a missing field never becomes one that matches everything),
// and with restore (function transforms) a string of 24 hex characters is
// an ObjectId, because such a script sees ObjectIds as hex strings and
// monstache turns them back (its restoreIds) so that findId(doc.authorId)
// finds the author: a field that really holds such strings cannot be
// queried by value from a function transform, in monstache as here.
// Stages that write ($out, $merge) and $changeStream, which never ends,
// are refused at any depth.
type queryConv struct {
	v       *vm
	fn      string
	restore bool
	path    []string
	seen    []*goja.Object
	size    int
}

var hex24 = regexp.MustCompile(`^[0-9a-fA-F]{24}$`)

func (q *queryConv) fail(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if len(q.path) > 0 {
		return fmt.Errorf("%s: %s: %s", q.fn, pathText(q.path), msg)
	}
	return fmt.Errorf("%s: %s", q.fn, msg)
}

// document writes o as a BSON document.
func (q *queryConv) document(o *goja.Object) (bson.Raw, error) {
	idx, b := bsoncore.AppendDocumentStart(nil)
	b, err := q.fields(b, o, 1)
	if err != nil {
		return nil, err
	}
	b, err = bsoncore.AppendDocumentEnd(b, idx)
	if err != nil {
		return nil, q.fail("%v", err)
	}
	return b, nil
}

func (q *queryConv) fields(dst []byte, o *goja.Object, depth int) ([]byte, error) {
	for _, k := range o.Keys() {
		if strings.IndexByte(k, 0) >= 0 {
			return nil, q.fail("a key holding a NUL character")
		}
		switch k {
		case "$out", "$merge":
			return nil, q.fail("%s writes, and %s only reads", k, q.fn)
		case "$changeStream":
			return nil, q.fail("$changeStream never ends; %s reads what is there", q.fn)
		}
		q.path = append(q.path, k)
		var err error
		if dst, err = q.value(dst, k, o.Get(k), depth); err != nil {
			return nil, err
		}
		q.path = q.path[:len(q.path)-1]
	}
	return dst, nil
}

func (q *queryConv) value(dst []byte, key string, val goja.Value, depth int) ([]byte, error) {
	if len(dst) > MaxReadBytes {
		return nil, q.fail("more than %d bytes", MaxReadBytes)
	}
	if val == nil || goja.IsUndefined(val) || goja.IsNull(val) {
		return bsoncore.AppendNullElement(dst, key), nil
	}
	o, isObj := val.(*goja.Object)
	if !isObj {
		switch p := val.Export().(type) {
		case string:
			if q.restore && hex24.MatchString(p) {
				oid, _ := bson.ObjectIDFromHex(p)
				return bsoncore.AppendObjectIDElement(dst, key, oid), nil
			}
			return bsoncore.AppendStringElement(dst, key, p), nil
		case bool:
			return bsoncore.AppendBooleanElement(dst, key, p), nil
		case int64:
			return (*mirrorConv)(nil).number(dst, key, float64(p), p, true, bsoncore.Value{}), nil
		case float64:
			return (*mirrorConv)(nil).number(dst, key, p, 0, false, bsoncore.Value{}), nil
		case *big.Int:
			if !p.IsInt64() {
				return nil, q.fail("a BigInt beyond int64")
			}
			return bsoncore.AppendInt64Element(dst, key, p.Int64()), nil
		}
		return nil, q.fail("%s is not a value a query can hold", typeName(val))
	}
	if depth > maxDepth {
		return nil, q.fail("nested more than %d levels deep", maxDepth)
	}
	switch o.ClassName() {
	case "Object":
		mc := mirrorConv{v: q.v, job: &Job{}}
		if el, handled, err := mc.special(dst, key, o); handled {
			if err != nil {
				return nil, q.fail("%s", err.Error())
			}
			return el, nil
		}
		if b := q.v.builtin(o); b != "" {
			return nil, q.fail("a %s is not a value a query can hold", b)
		}
		if err := q.enter(o); err != nil {
			return nil, err
		}
		idx, d := bsoncore.AppendDocumentElementStart(dst, key)
		d, err := q.fields(d, o, depth+1)
		if err != nil {
			return nil, err
		}
		q.seen = q.seen[:len(q.seen)-1]
		return bsoncore.AppendDocumentEnd(d, idx)
	case "Array":
		if err := q.enter(o); err != nil {
			return nil, err
		}
		idx, d := bsoncore.AppendArrayElementStart(dst, key)
		n := o.Get("length").ToInteger()
		if n > maxNativeLength { // a sparse array's length costs nothing to set
			return nil, q.fail("an array of %d elements, more than the %d a query may hold", n, maxNativeLength)
		}
		for i := int64(0); i < n; i++ {
			q.v.checkStop()
			ik := strconv.FormatInt(i, 10)
			q.path = append(q.path, ik)
			var err error
			if d, err = q.value(d, ik, o.Get(ik), depth+1); err != nil {
				return nil, err
			}
			q.path = q.path[:len(q.path)-1]
		}
		q.seen = q.seen[:len(q.seen)-1]
		return bsoncore.AppendArrayEnd(d, idx)
	case "Date":
		t, ok := o.Export().(time.Time)
		if !ok {
			return nil, q.fail("an invalid Date")
		}
		return bsoncore.AppendDateTimeElement(dst, key, t.UnixMilli()), nil
	case "RegExp":
		src := o.Get("source").String()
		var opts []byte
		for _, f := range o.Get("flags").String() {
			switch f {
			case 'i', 'm', 's':
				opts = append(opts, byte(f))
			case 'u':
				opts = append(opts, 'u')
			}
		}
		if strings.IndexByte(src, 0) >= 0 {
			return nil, q.fail("a RegExp holding a NUL character")
		}
		return bsoncore.AppendRegexElement(dst, key, src, sortedOptions(string(opts))), nil
	case "String":
		s := o.String()
		if q.restore && hex24.MatchString(s) {
			oid, _ := bson.ObjectIDFromHex(s)
			return bsoncore.AppendObjectIDElement(dst, key, oid), nil
		}
		return bsoncore.AppendStringElement(dst, key, s), nil
	case "Number":
		return (*mirrorConv)(nil).number(dst, key, o.ToFloat(), 0, false, bsoncore.Value{}), nil
	case "Boolean":
		b, _ := o.Export().(bool)
		return bsoncore.AppendBooleanElement(dst, key, b), nil
	}
	return nil, q.fail("%s is not a value a query can hold", q.v.typeName(val))
}

func (q *queryConv) enter(o *goja.Object) error {
	for _, s := range q.seen {
		if s == o {
			return q.fail("a cyclic object (it contains itself)")
		}
	}
	q.seen = append(q.seen, o)
	return nil
}

// readContext is the context of a read made by the running call: it ends
// with the call's context or at its time limit. ok is false when the call
// has no time left.
func (g *guard) readContext() (_ context.Context, _ context.CancelFunc, ok bool) {
	g.mu.Lock()
	ctx, deadline, running := g.ctx, g.deadline, g.running && !g.fired
	g.mu.Unlock()
	if !running || ctx == nil || ctx.Err() != nil || !time.Now().Before(deadline) {
		return nil, nil, false
	}
	c, cancel := context.WithDeadline(ctx, deadline)
	return c, cancel, true
}

// expire stops the running call when its context has ended or its time
// limit has passed, as the guard's timer or context callback is about to:
// a read that ran out of time then fails its call (tried again on a fresh
// runtime, like any call that runs out of time) even if the script
// catches what the read threw.
func (g *guard) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running || g.fired {
		return
	}
	now := time.Now()
	switch {
	case g.ctx != nil && g.ctx.Err() != nil:
		g.stopCall(now, context.Cause(g.ctx))
	case !now.Before(g.deadline):
		g.stopCall(now, errTimeout)
	}
}

// metaKey is the field of a monstache script's result that holds its
// indexing metadata (rwynn/monstache-site, advanced.md, "Indexing
// Metadata"): the index, id, routing, type, parent, version, ingest
// pipeline or skip for that one document. meilistream honours none of
// them, and indexing the field as data would put routing instructions in
// the search index: a result holding it is refused, so the script is
// changed rather than silently half-obeyed.
const metaKey = "_meta_monstache"

// refuseMeta is NOT_A_DOCUMENT for a result holding metaKey: like a
// result holding a function or NaN, it is not a document meilistream can
// write as it is (a per-document error, with the same onDocumentError
// handling and dead letter), and no new code is needed by dashboards.
func (v *vm) refuseMeta(j *Job, obj *goja.Object) error {
	m := obj.Get(metaKey)
	if m == nil || goja.IsUndefined(m) {
		return nil
	}
	return errs.New(errs.NotADocument, j.Name, "the transform's result has %s, monstache's per-document indexing metadata (index, id, routing, type, parent, pipeline, version, skip), which meilistream does not read: "+
		"a job writes the one index its job names, the document id always comes from _id, and Meilisearch has no routing, parent or ingest pipeline; "+
		"delete the field from the result (to keep a document out, return false) — see docs/monstache.md", metaKey)
}
