// Package transform loads the users' JavaScript transform files, runs them
// on a pool of goja runtimes, and turns what they return into documents for
// the destination: the JSON Meilisearch receives, BSON for a replica.
// It knows goja and value conversion and nothing of the drivers' clients.
//
// # Files
//
// Every *.js file of the transforms folder is one job, named after the file
// (articles.js -> articles); files starting with "." are ignored. A file
// must be a regular file (a symbolic link to one is fine; a FIFO or a
// device is refused, never waited on) of at most 128 KiB, and must set
// module.exports: an empty file, or one that only declares things (a file
// read while it was being written), is CONFIG_INVALID, never the identity
// (which is module.exports = {}). A Watcher loads a change once the
// folder's files have kept their size, time and content for a whole
// interval. goja has
// no ES modules, so a file is CommonJS-shaped and sets module.exports to:
//
//   - an object: collection (default: the job name), index (search:
//     Meilisearch index uid, default the job name), primaryKey (default
//     "id"), mirror (makes it a mirror job: the destination collection),
//     sweep, reindex ("swap" | "inplace"), dates ("iso" | "epoch"),
//     onDocumentError ("skip" | "fail"), onHistoryLost ("reindex" | "fail"),
//     batchSize, flushInterval ("2s"), transformTimeout ("2s", this job's
//     limit per call), skipUnchanged, fields (the top-level fields the
//     transform reads), settings (Meilisearch index
//     settings), samples (documents in MongoDB Extended JSON, for check) and
//     an optional transform(doc, ctx). Unknown keys and wrong types are
//     CONFIG_INVALID naming the file and the key.
//   - a bare function, monstache's middleware shape
//     function (doc, ns, updateDesc) with `this` bound to the document; ns
//     is "database.collection", updateDesc the change's updateDescription
//     or undefined. It is a search job with every default. While it
//     runs it also has monstache's findId, findOne, find and pipe, which
//     read the source MongoDB through Options.Reader (monstache.go:
//     read-only, within the call's time limit, at most MaxReadDocuments
//     documents).
//
// The environment's per-job options (Options.Overrides,
// MEILISTREAM_JOB_<NAME>_<OPTION>) and index prefix (Options.IndexPrefix)
// apply as each file loads, and an override name no file folds to (EnvKey)
// is a job of its own with the identity transform. Only then is every
// destination checked: two jobs writing one index or replica collection
// are both refused (CONFIG_INVALID), except a job already running unchanged,
// which keeps running; so are two files whose names fold to one override
// name that has overrides.
//
// What a transform returns decides (both shapes): an object is the
// document; true is the document argument as the transform left it (the
// source document if it changed nothing); null, undefined and false keep it
// out of the destination (deleting it there if it was there). Anything else
// is NOT_A_DOCUMENT, and so is a result holding _meta_monstache
// (monstache's per-document indexing metadata, which meilistream does not
// honour). As monstache does, a function transform sees ObjectIds
// as their 24-hex strings (doc._id === "65f1..." works); an object
// transform sees the ObjectId class below.
//
// ctx is a frozen {job, collection, operation} where operation is "insert",
// "update", "replace" or "reindex"; on an update it also has
// updateDescription, and is then a new read-only host object for each call
// (a write is refused as by a frozen object; Object.freeze on it is a
// TypeError).
//
// # Sandbox
//
// A transform is a pure function of the document. There is no require, no
// process, no file system, no network, no timers (setTimeout and friends do
// not exist); Function("return this")() reaches only the runtime's own
// global object, which holds nothing but the standard built-ins, console,
// `_` and the BSON classes below (and a function transform's read
// globals). `_` is Underscore 1.4.4, the version monstache bundles,
// loaded as a runtime is made when the file names `_`, else when first
// read; its functions that need a timer throw. console.log/info/debug/warn/error go to the
// job's logger (With("job", name), key source=console), at most 20 lines at
// once and 10 a second after that, each line cut at 4 KiB; dropped lines are
// counted in the next line that passes. Every call has a time limit
// (Options.Timeout, MEILISTREAM_TRANSFORM_TIMEOUT, default 1s, at most
// MaxTimeout, one minute) enforced with goja's Interrupt, and recursion
// deeper than 2000 calls is a RangeError. A call that runs out of time is
// tried again on a fresh runtime, twice, before its document fails, so a
// busy machine does not fail documents for good (a transform that loops
// for good fails after three limits). Loading a file (its top-level code,
// its options, its samples) has a limit of ten times that, from 1s to
// 10s, and stops when a Watcher closes.
//
// # What built-in functions may be asked to do
//
// Interrupt acts between two JavaScript instructions; goja's built-in
// functions are Go code, which a document can make recurse until the
// process dies (JSON.parse of a million '['), loop for minutes or
// allocate all memory at once. Each runtime guards them before the
// module runs; beyond these bounds they throw a RangeError (a transform
// may catch it; uncaught, the document fails with TRANSFORM_FAILED):
//
//   - nesting, at most 1000 levels, counted across built-ins that call
//     one another: the text JSON.parse reads, what JSON.stringify, join,
//     toString, toLocaleString, flat and a JSON.parse reviver walk, chains
//     of proxies and bound functions, prototype chains set with
//     Object.create, Object.setPrototypeOf, Reflect.setPrototypeOf and
//     __proto__;
//   - arrays and array-likes a built-in loops over or copies (the Array
//     methods, Array.from, apply, Reflect.apply and Reflect.construct's
//     argument lists, concat): at most 4,194,304 elements;
//   - strings built by JSON.stringify, join, repeat, padStart and padEnd,
//     and the text JSON.parse reads: at most 33,554,432 characters;
//   - ArrayBuffers and typed arrays: at most 64 MiB;
//   - source given to eval, Function and the generator and async function
//     constructors: at most 16 KiB (eval is always an indirect eval); a
//     transform file: at most 128 KiB.
//
// A regular expression that goja cannot run on Go's regexp (one with a
// lookaround or a backreference) backtracks, and may take minutes on a
// short string: the call is then abandoned half a second after its time
// limit (its document fails with TRANSFORM_FAILED, the job goes on with a
// fresh runtime, and the match gives up in the background within
// MaxTimeout). So is any call still in a built-in half a second past its
// limit; such a call is not tried again. goja counts no allocation, so
// memory is bounded from outside (memory.go): a transform that allocates
// in a loop (s += s) is stopped once the heap grows past
// MEILISTREAM_TRANSFORM_MEMORY, its document failing with ErrMemory and
// tried again later, as one out of time is. Keep transforms to pure
// functions of the document.
//
// # Module state
//
// A file is compiled once and evaluated once per runtime; a job has up to
// Options.Pool runtimes (default: the number of CPUs) used by one goroutine
// at a time. Module-level code therefore runs once per runtime, and
// module-level variables are per runtime: use them for constants and
// lookup tables computed at load. Do not rely on state carried from one
// document to the next: which runtime sees which document, and how many
// runtimes exist, is not specified, and a runtime whose call timed out is
// thrown away and replaced by a freshly loaded one.
//
// # What a call reads
//
// For an update of a job with skipUnchanged (the default) that comes with
// its updateDescription, Apply keeps what the call read (Result.Reads): the top-level fields of the document it
// asked for, tested or wrote, whether the whole document counts (it was
// enumerated or returned, less the fields deleted before anything saw
// them), and whether it read ctx.operation or ctx.updateDescription (a
// monstache function that can see its updateDesc argument always does).
// The engine sends no write for an update whose paths touch none of it
// (Reads.UnchangedBy). Date and
// Math.random are wrapped so that a call of Date.now(), Date(), new Date()
// without arguments or Math.random(), in a call or in the module's own
// code, marks the job: every later Reads says Unknown, for as long as the
// job is loaded (reads.go says why). A job's fields (Job.Fields) are what
// the server trims its documents to; check warns when a sample's call
// reads outside them.
//
// Keys keep the document's order, with JavaScript's one exception: in an
// object the transform builds, keys that are array indexes ("0", "12")
// come first, in ascending order. Strings that are not valid UTF-8 reach
// JavaScript with U+FFFD in place of the bad bytes.
//
// # BSON to JavaScript
//
//	double               number (NaN, ±Infinity and -0 as they are)
//	string               string
//	document, array      plain object (keys in order), array
//	bool, null           boolean, null
//	undefined            undefined
//	int32                number
//	int64                number when |n| <= 2^53, else BigInt (so no
//	                     precision is lost silently; typeof tells)
//	date                 Date (beyond ±8.64e15 ms: an Invalid Date)
//	ObjectId             ObjectId: toHexString(), toString() (the hex, so
//	                     "x" + id works), equals(other|hex), getTimestamp()
//	                     (a Date), toJSON() (the hex)
//	Decimal128           Decimal128: toString() (exact decimal text),
//	                     valueOf()/toNumber() (a number, so arithmetic works)
//	Binary               Binary: subtype, toBase64(), toString()/toJSON()
//	                     (base64; a UUID, subtype 4, as 8-4-4-4-12 hex)
//	Timestamp            Timestamp {t, i} (seconds, increment)
//	Regex                BSONRegExp {pattern, options}, toString() "/p/o"
//	JavaScript, Symbol   string
//	MinKey, MaxKey,      BSONValue: opaque, toJSON() gives its canonical
//	DBPointer, CodeWScope  Extended JSON text
//
// ObjectId(hex), Decimal128(text), Timestamp(t, i) and BSONRegExp(p, o) are
// also global constructors, for transforms that build such values (mirror).
// An ObjectId, Decimal128, Binary or BSONValue keeps its value in Go: it
// has no property of its own (Object.keys, Object.getOwnPropertySymbols
// and spread see none, and none can be added), and its methods work on
// such values only.
//
// # JavaScript to a Meilisearch document
//
// Plain objects (own enumerable string keys), arrays, strings, booleans,
// null and finite numbers. A number holding an integer within ±2^53 is an
// int64 (so -0 is 0), other numbers float64; a BigInt an int64 (uint64 up
// to 2^64-1). A Date is an ISO string ("2024-05-01T10:00:00.000Z", as
// toISOString) or, with dates: "epoch", integer milliseconds since 1970,
// which Meilisearch can sort and filter. ObjectId is its hex; Decimal128
// a number when a float64 holds its very value (0.1, 2.50: the shortest
// form of the float is the decimal), else its exact text as a string
// ("1E-6000", "1234.5678901234567890123", "NaN", "Infinity"), never a
// number that lost its value; Binary its toString(), Timestamp {t, i},
// BSONRegExp "/p/o",
// BSONValue its Extended JSON text. A key holding undefined is left out (in
// an array, undefined is null), as JSON.stringify does; boxed String,
// Number, Boolean are unboxed. NaN, Infinity, functions, symbols, Map, Set,
// RegExp, other built-in objects, cycles, nesting deeper than 180 levels and
// a result above Options.MaxResultBytes (default 1 MiB, measured as its JSON
// length, approximately) are NOT_A_DOCUMENT naming the path and the type,
// never the value. A document that needs no transform (no transform, or
// `true`) is converted from BSON directly with the same rules.
//
// The primary key is derived from _id by jobdef.IndexID, never chosen by the
// transform: it may omit it (it is added) or set it to the same id, or to
// the document's own _id value (as a monstache script returning the
// document with primaryKey "_id" does); anything else is ID_MISMATCH.
//
// # JavaScript to a mirror document
//
// The same values, written as BSON: Date is a date, ObjectId an ObjectId,
// Decimal128, Binary, Timestamp, BSONRegExp and BSONValue their BSON type,
// NaN and ±Infinity doubles (BSON holds them). A number at a path where the
// source document held a number keeps the source's type when it fits (an
// int64 stays an int64, a double a double, an int32 an int32), so a
// transform that only drops fields changes nothing else; a new number is an
// int32 when it is an integer that fits, else a double, as the Node.js
// driver writes it; a BigInt is an int64. _id comes first and is the
// source's own; a result with another _id is ID_MISMATCH. A mirror job
// without a transform writes the source document untouched. A mirror
// result's limit is the replica's, not a search result's: up to
// Options.MaxMirrorBytes (default 16 MiB, MongoDB's maxBsonObjectSize) of
// BSON as the replica stores it; above it, NOT_A_DOCUMENT.
package transform
