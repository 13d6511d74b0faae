package transform

import (
	"reflect"
	"strings"

	"github.com/dop251/goja"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
)

var (
	lazyDocType  = reflect.TypeOf((*lazyDoc)(nil))
	errMalformed = errs.New(errs.NotADocument, "", "malformed BSON document")
	// errMalformedValue is a value the driver's reader refuses though the
	// document's lengths add up (MongoDB validates what it stores; a
	// document from elsewhere may hold one).
	errMalformedValue = errs.New(errs.NotADocument, "", "malformed BSON value")
)

// testPanic, set only by tests, is called with each field read by a
// transform and each key written out: a stand-in for a bug, to show that
// one panicking document does not stop the process.
var testPanic func(key string)

// asLazy returns the lazyDoc behind o, if it is one (without exporting a
// plain object, which would copy it).
func asLazy(o *goja.Object) *lazyDoc {
	if o.ExportType() != lazyDocType {
		return nil
	}
	d, _ := o.Export().(*lazyDoc)
	return d
}

// lazyDoc is a BSON document shown to JavaScript as a plain object whose
// fields are converted when first read (goja DynamicObject). A transform
// typically reads a few fields of a document; the others are never
// converted, and when the document (or a part of it) is returned, the
// fields the transform did not touch go to the output straight from BSON
// (for a mirror: byte for byte).
//
// JavaScript sees an ordinary object: reading, writing, deleting and adding
// keys, `in`, Object.keys, spread, JSON.stringify, for-in all work, keys in
// document order (new keys after). It cannot be frozen, sealed or given
// accessor properties (a TypeError); copy it ({...doc}) first for that.
type lazyDoc struct {
	v       *vm
	raw     []byte // the document's elements (without length and terminator)
	depth   int
	entries []lazyEntry
	// reads, on the document of a call whose reads are tracked, notes
	// every key asked for, and that the result may depend on every key
	// when the document is enumerated or written out (reads.go).
	reads *callReads
}

type lazyEntry struct {
	key     string
	val     goja.Value // nil when deleted
	deleted bool
	added   bool // not a key of raw
}

var _ goja.DynamicObject = (*lazyDoc)(nil)

func (v *vm) lazy(doc []byte, depth int) (*goja.Object, error) {
	o, _, err := v.lazyDoc(doc, depth)
	return o, err
}

// lazyDoc is lazy, also returning the lazyDoc behind the object (which
// asLazy would find at the cost of an allocation).
func (v *vm) lazyDoc(doc []byte, depth int) (*goja.Object, *lazyDoc, error) {
	length, _, ok := bsoncore.ReadLength(doc)
	if !ok || length < 5 || int(length) > len(doc) {
		return nil, nil, errMalformed
	}
	d := &lazyDoc{v: v, raw: doc[4 : length-1], depth: depth}
	return v.rt.NewDynamicObject(d), d, nil
}

func (d *lazyDoc) entry(key string) *lazyEntry {
	for i := range d.entries {
		if d.entries[i].key == key {
			return &d.entries[i]
		}
	}
	return nil
}

// lookup finds key among the raw elements.
func (d *lazyDoc) lookup(key string) (bsoncore.Value, bool) {
	if strings.IndexByte(key, 0) >= 0 { // no BSON key holds a NUL
		return bsoncore.Value{}, false
	}
	rem := d.raw
	for len(rem) > 0 {
		el, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			return bsoncore.Value{}, false
		}
		// The key is the element's bytes after its type, ended by a NUL
		// (ReadElement checked the element's length already).
		if len(el) > len(key)+1 && el[1+len(key)] == 0 && string(el[1:1+len(key)]) == key {
			return bsoncore.Value{Type: bsoncore.Type(el[0]), Data: el[2+len(key):]}, true
		}
		rem = rest
	}
	return bsoncore.Value{}, false
}

func (d *lazyDoc) Get(key string) goja.Value {
	if testPanic != nil {
		testPanic(key)
	}
	if e := d.entry(key); e != nil {
		return e.val // nil when deleted: the prototype chain answers
	}
	if d.reads != nil {
		d.reads.field(key)
	}
	val, ok := d.lookup(key)
	if !ok {
		return nil
	}
	jv, err := inConv{v: d.v}.value(val, d.depth)
	if err != nil {
		panic(d.v.rt.NewTypeError(errMsg(err)))
	}
	if d.entries == nil {
		d.entries = make([]lazyEntry, 0, 8)
	}
	d.entries = append(d.entries, lazyEntry{key: key, val: jv})
	return jv
}

func (d *lazyDoc) Set(key string, val goja.Value) bool {
	if d.reads != nil {
		// Whether the key was there decides where it stands in the
		// result: a written key counts as read.
		d.reads.field(key)
	}
	if e := d.entry(key); e != nil {
		e.val, e.deleted = val, false
		return true
	}
	_, inRaw := d.lookup(key)
	d.entries = append(d.entries, lazyEntry{key: key, val: val, added: !inRaw})
	return true
}

func (d *lazyDoc) Has(key string) bool {
	if d.reads != nil {
		d.reads.field(key)
	}
	if e := d.entry(key); e != nil {
		return !e.deleted
	}
	_, ok := d.lookup(key)
	return ok
}

func (d *lazyDoc) Delete(key string) bool {
	if d.reads != nil && d.reads.all {
		// The document was enumerated (or written out) before: the key's
		// presence, or its absence, reached the call already. Only a key
		// deleted before anything saw the document's keys is out of the
		// result whatever it holds (reads.go, Except).
		d.reads.field(key)
	}
	if e := d.entry(key); e != nil {
		e.val, e.deleted = nil, true
		return true
	}
	if _, ok := d.lookup(key); ok {
		d.entries = append(d.entries, lazyEntry{key: key, deleted: true})
	}
	return true
}

func (d *lazyDoc) Keys() []string {
	if d.reads != nil {
		d.reads.everything()
	}
	var keys []string
	rem := d.raw
	for len(rem) > 0 {
		el, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			break
		}
		rem = rest
		kb, err := el.KeyBytesErr()
		if err != nil {
			break
		}
		if e := d.entryBytes(kb); e != nil && e.deleted {
			continue
		}
		keys = append(keys, string(kb))
	}
	for _, e := range d.entries {
		if e.added && !e.deleted {
			keys = append(keys, e.key)
		}
	}
	return keys
}

func (d *lazyDoc) entryBytes(key []byte) *lazyEntry {
	for i := range d.entries {
		if d.entries[i].key == string(key) {
			return &d.entries[i]
		}
	}
	return nil
}

// each calls fn for every key in order with either the JavaScript value
// (touched or added keys) or the raw BSON value (untouched ones).
func (d *lazyDoc) each(fn func(key string, jv goja.Value, el bsoncore.Element, raw bsoncore.Value, touched bool) error) error {
	if d.reads != nil {
		d.reads.everything()
	}
	rem := d.raw
	for len(rem) > 0 {
		el, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			return errMalformed
		}
		rem = rest
		kb, err := el.KeyBytesErr()
		if err != nil {
			return errMalformed
		}
		val, err := el.ValueErr()
		if err != nil {
			return errMalformed
		}
		if e := d.entryBytes(kb); e != nil {
			if e.deleted {
				continue
			}
			if err := fn(e.key, e.val, el, val, true); err != nil {
				return err
			}
			continue
		}
		if err := fn(string(kb), nil, el, val, false); err != nil {
			return err
		}
	}
	for _, e := range d.entries {
		if e.added && !e.deleted {
			if err := fn(e.key, e.val, nil, bsoncore.Value{}, true); err != nil {
				return err
			}
		}
	}
	return nil
}
