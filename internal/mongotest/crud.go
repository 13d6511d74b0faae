package mongotest

import (
	"bytes"
	"sort"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// ---- write primitives (caller holds s.mu for writing) ----

func (c *collection) hasSecondaryUnique() bool {
	for _, ix := range c.indexes[1:] {
		if ix.unique {
			return true
		}
	}
	return false
}

// dupKeyError builds the 11000 error in the server's shape (reference note
// §6.2; duplicate_key_error_info.cpp).
func dupKeyError(c *collection, ix *index, doc bson.D) error {
	kv := bson.D{}
	for _, k := range ix.key {
		vals := lookupPath(doc, k.Key)
		var v any
		if len(vals) == 1 {
			v = vals[0]
		} else if len(vals) > 1 {
			v = bson.A(vals)
		}
		kv = append(kv, bson.E{Key: k.Key, Value: v})
	}
	return &cmdError{
		code: 11000, name: "DuplicateKey",
		msg:   "E11000 duplicate key error collection: " + c.db + "." + c.name + " index: " + ix.name + " dup key: " + formatValue(kv),
		extra: bson.D{{Key: "keyPattern", Value: ix.key}, {Key: "keyValue", Value: kv}},
	}
}

func validID(id any) error {
	switch id.(type) {
	case bson.A:
		return cmdErrf(53, "InvalidIdField", "The '_id' value cannot be of type array")
	case bson.Regex:
		return cmdErrf(53, "InvalidIdField", "The '_id' value cannot be of type regex")
	case bson.Undefined:
		return cmdErrf(53, "InvalidIdField", "The '_id' value cannot be of type undefined")
	}
	return nil
}

// prepareInsert turns an insert document into stored raw BSON with _id as
// its first field, generating an ObjectId when there is none.
func (s *Server) prepareInsert(v any) ([]byte, any, error) {
	switch x := v.(type) {
	case rawDoc:
		if el, _, ok := bsoncore.ReadElement(x[4:]); ok && el.Key() == "_id" {
			id, err := decodeValue(el.Value())
			if err != nil {
				return nil, nil, err
			}
			if len(x) > maxBSONSize {
				return nil, nil, cmdErrf(10334, "BSONObjectTooLarge", "object to insert too large. size in bytes: %d, max size: %d", len(x), maxBSONSize)
			}
			raw := make([]byte, len(x))
			copy(raw, x)
			return raw, id, validID(id)
		}
		d, err := decodeDoc(x)
		if err != nil {
			return nil, nil, cmdErrf(2, "BadValue", "invalid document: %v", err)
		}
		return s.prepareInsert(d)
	case bson.D:
		id, ok := docGet(x, "_id")
		if !ok {
			id = s.newID()
			x = append(bson.D{{Key: "_id", Value: id}}, x...)
		} else {
			x = idFirst(x)
		}
		raw := encodeDoc(x)
		if len(raw) > maxBSONSize {
			return nil, nil, cmdErrf(10334, "BSONObjectTooLarge", "object to insert too large. size in bytes: %d, max size: %d", len(raw), maxBSONSize)
		}
		return raw, id, validID(id)
	}
	return nil, nil, cmdErrf(14, "TypeMismatch", "insert documents must be objects")
}

// insertRaw stores a prepared document and records its insert event.
func (s *Server) insertRaw(x *cmdCtx, c *collection, raw []byte, id any) error {
	if c.validator != nil {
		if err := s.validate(x, c, mustDecode(raw), nil); err != nil {
			return err
		}
	}
	if c.docs.get(id) != nil {
		return dupKeyError(c, c.indexes[0], bson.D{{Key: "_id", Value: id}})
	}
	if c.hasSecondaryUnique() {
		doc := mustDecode(raw)
		keys := make([]string, len(c.indexes))
		ins := make([]bool, len(c.indexes))
		for i, ix := range c.indexes[1:] {
			if !ix.unique {
				continue
			}
			k, in := ix.indexKey(doc)
			if in && ix.entries[k] > 0 {
				return dupKeyError(c, ix, doc)
			}
			keys[i+1], ins[i+1] = k, in
		}
		for i, ix := range c.indexes[1:] {
			if ins[i+1] {
				ix.entries[keys[i+1]]++
			}
		}
	}
	c.docs.put(id, raw)
	s.appendEvent(x, &event{op: "insert", evNS: c.ns, id: id, doc: raw})
	return nil
}

// replaceStored swaps a document for its updated version, keeping unique
// indexes and recording the change event (update or replace).
func (s *Server) replaceStored(x *cmdCtx, c *collection, id any, oldDoc, newDoc bson.D, newRaw []byte, cu *compiledUpdate) error {
	kind := cu.kind
	if c.validator != nil {
		if err := s.validate(x, c, newDoc, oldDoc); err != nil {
			return err
		}
	}
	if c.hasSecondaryUnique() {
		type change struct {
			ix       *index
			old, new string
			oin, nin bool
		}
		var changes []change
		for _, ix := range c.indexes[1:] {
			if !ix.unique {
				continue
			}
			ok, oin := ix.indexKey(oldDoc)
			nk, nin := ix.indexKey(newDoc)
			if oin == nin && ok == nk {
				continue
			}
			if nin && ix.entries[nk] > 0 {
				return dupKeyError(c, ix, newDoc)
			}
			changes = append(changes, change{ix, ok, nk, oin, nin})
		}
		for _, ch := range changes {
			if ch.oin {
				if ch.ix.entries[ch.old]--; ch.ix.entries[ch.old] <= 0 {
					delete(ch.ix.entries, ch.old)
				}
			}
			if ch.nin {
				ch.ix.entries[ch.new]++
			}
		}
	}
	// The pre-image is kept only for collections with
	// changeStreamPreAndPostImages, as mongod writes it to
	// config.system.preimages only for them.
	var pre []byte
	if c.postImages {
		if n := c.docs.get(id); n != nil {
			pre = n.raw
		}
	}
	c.docs.put(id, newRaw)
	ev := &event{evNS: c.ns, id: id, doc: newRaw}
	switch {
	case kind == updReplacement:
		ev.op = "replace"
	case kind == updPipeline && !deltaSmaller(oldDoc, newDoc, len(newRaw)):
		ev.op = "replace"
	default:
		ev.op = "update"
		if kind == updOperators {
			ev.evExtra = &evExtra{upd: opsUpdateDescription(cu.ops, oldDoc, newDoc)}
		} else {
			ev.evExtra = &evExtra{upd: updateDescription(oldDoc, newDoc)}
		}
	}
	if pre != nil {
		if ev.evExtra == nil {
			ev.evExtra = &evExtra{}
		}
		ev.pre = pre
	}
	s.appendEvent(x, ev)
	return nil
}

func (s *Server) deleteStored(x *cmdCtx, c *collection, id any, raw []byte) {
	if c.hasSecondaryUnique() {
		doc := mustDecode(raw)
		for _, ix := range c.indexes[1:] {
			if !ix.unique {
				continue
			}
			if k, in := ix.indexKey(doc); in {
				if ix.entries[k]--; ix.entries[k] <= 0 {
					delete(ix.entries, k)
				}
			}
		}
	}
	c.docs.remove(id)
	ev := &event{op: "delete", evNS: c.ns, id: id}
	if c.postImages {
		ev.evExtra = &evExtra{pre: raw}
	}
	s.appendEvent(x, ev)
}

// ---- query planning ----

type hit struct {
	id  any
	raw []byte
	doc bson.D
}

func (h *hit) decoded() bson.D {
	if h.doc == nil {
		h.doc = mustDecode(h.raw)
	}
	return h.doc
}

type idBounds struct {
	ok            bool
	eqs           []any
	hasEq         bool
	lo, hi        any
	loIncl, hiInc bool
	class         int
	exact         bool // the bounds are the whole filter
	// byType: the filter asks _id for a $type, and nothing else bounds
	// it: the scan starts at the first key of class fromClass or after
	// (the index orders keys by class first), as mongod's index bounds
	// for $type do (index_bounds_builder.cpp, translate of TYPE_OPERATOR).
	byType    bool
	fromClass int
}

// typeClasses are the canonical classes (canonType) of the BSON types
// $type accepts, by number.
var typeClasses = map[int]int{
	-1: -1, 6: 0, 10: 5, 1: 10, 16: 10, 18: 10, 19: 10, 2: 15, 14: 15, 3: 20, 4: 25,
	5: 30, 7: 35, 8: 40, 9: 45, 17: 47, 11: 50, 12: 55, 13: 60, 15: 65, 127: 127,
}

// lowestTypeClass is the lowest canonical class among the types of a $type
// operand (a number, an alias or an array of them); ok false for anything
// it does not know, which then plans no bounds.
func lowestTypeClass(q any) (int, bool) {
	list, isList := q.(bson.A)
	if !isList {
		list = bson.A{q}
	}
	low, found := 0, false
	for _, t := range list {
		var n int
		switch x := t.(type) {
		case string:
			if x == "number" {
				n = 1
				break
			}
			v, ok := typeAliases[x]
			if !ok {
				return 0, false
			}
			n = v
		default:
			v, ok := toInt64(x)
			if !ok {
				return 0, false
			}
			n = int(v)
		}
		cls, ok := typeClasses[n]
		if !ok {
			return 0, false
		}
		if !found || cls < low {
			low, found = cls, true
		}
	}
	return low, found
}

// planID extracts _id bounds from a filter so that _id lookups and ranges
// use the ordered _id index instead of a scan.
func planID(filter bson.D) idBounds {
	var b idBounds
	v, ok := docGet(filter, "_id")
	if !ok {
		return b
	}
	usable := func(v any) bool {
		switch v.(type) {
		case bson.Regex, bson.A, nil, bson.MinKey, bson.MaxKey, bson.Undefined:
			return false
		}
		return true
	}
	ops, isOps := isOperatorDoc(v)
	if !isOps {
		if !usable(v) {
			return b
		}
		return idBounds{ok: true, hasEq: true, eqs: []any{v}, exact: len(filter) == 1}
	}
	exact := len(filter) == 1
	b.class = -100
	for _, op := range ops {
		switch op.Key {
		case "$eq":
			if !usable(op.Value) {
				return idBounds{}
			}
			if b.hasEq {
				exact = false
				b.eqs = intersect(b.eqs, []any{op.Value})
			} else {
				b.hasEq, b.eqs = true, []any{op.Value}
			}
		case "$in":
			arr, ok := op.Value.(bson.A)
			if !ok {
				return idBounds{}
			}
			for _, a := range arr {
				if !usable(a) {
					return idBounds{}
				}
				if _, isDoc := a.(bson.D); isDoc {
					exact = false
				}
			}
			if b.hasEq {
				exact = false
				b.eqs = intersect(b.eqs, arr)
			} else {
				b.hasEq, b.eqs = true, append([]any{}, arr...)
			}
		case "$gt", "$gte", "$lt", "$lte":
			if !usable(op.Value) {
				return idBounds{}
			}
			ct := canonType(op.Value)
			if b.class != -100 && b.class != ct {
				return idBounds{ok: true, hasEq: true, eqs: nil, exact: exact} // no value can match
			}
			b.class = ct
			switch op.Key {
			case "$gt", "$gte":
				if b.lo == nil || compareValues(op.Value, b.lo) > 0 || (compareValues(op.Value, b.lo) == 0 && op.Key == "$gt") {
					b.lo, b.loIncl = op.Value, op.Key == "$gte"
				}
			default:
				if b.hi == nil || compareValues(op.Value, b.hi) < 0 || (compareValues(op.Value, b.hi) == 0 && op.Key == "$lt") {
					b.hi, b.hiInc = op.Value, op.Key == "$lte"
				}
			}
			if isNumber(op.Value) && toFloat(op.Value) != toFloat(op.Value) {
				return idBounds{}
			}
		case "$type":
			low, ok := lowestTypeClass(op.Value)
			if !ok {
				return idBounds{}
			}
			if !b.byType || low > b.fromClass {
				b.fromClass = low
			}
			b.byType, exact = true, false
		default:
			return idBounds{}
		}
	}
	if b.hasEq && b.class != -100 {
		exact = false
	}
	b.ok, b.exact = true, exact
	return b
}

func intersect(a []any, b bson.A) []any {
	var out []any
	for _, x := range a {
		for _, y := range b {
			if compareValues(x, y) == 0 {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

type queryOpts struct {
	filter bson.D
	sort   bson.D
	skip   int64
	limit  int64 // 0: none

	// For a scan in _id order (no sort, or on _id alone), read batch by
	// batch as a live cursor does: after resumes the scan past this key
	// (in the scan's direction), batch and maxBytes bound one batch (0:
	// no bound; the first document always fits).
	after    any
	hasAfter bool
	batch    int
	maxBytes int
}

// idOrdered: the sort is none or _id alone, the order the _id index gives.
func idOrdered(keys []sortKey) bool {
	return len(keys) == 0 || (len(keys) == 1 && len(keys[0].parts) == 1 && keys[0].parts[0] == "_id")
}

// runQuery returns the matching documents in order (caller holds s.mu).
// Natural order is _id order. A sort on _id alone (or none) streams from
// the _id index and stops at skip+limit.
func (s *Server) runQuery(c *collection, q queryOpts, ec *evalCtx) ([]*hit, error) {
	hits, _, err := s.scanQuery(c, q, ec)
	return hits, err
}

// scanQuery is runQuery, also reporting whether an _id-ordered scan
// stopped at q.batch or q.maxBytes with documents possibly left (more).
func (s *Server) scanQuery(c *collection, q queryOpts, ec *evalCtx) ([]*hit, bool, error) {
	m, err := compileFilter(q.filter, ec)
	if err != nil {
		return nil, false, err
	}
	keys, err := parseSort(q.sort)
	if err != nil {
		return nil, false, err
	}
	if c == nil {
		return nil, false, nil
	}
	b := planID(q.filter)
	idOrder := idOrdered(keys)
	desc := len(keys) == 1 && keys[0].dir < 0 && idOrder
	var out []*hit
	skip := q.skip
	stopAt := int64(-1)
	if idOrder && q.limit > 0 {
		stopAt = q.limit
	}
	more := false
	size := 0
	visit := func(n *node) bool {
		h := &hit{id: n.key, raw: n.raw}
		if !b.exact {
			if !m.matches(h.decoded()) {
				return true
			}
		}
		if idOrder {
			if skip > 0 {
				skip--
				return true
			}
			if q.maxBytes > 0 && len(out) > 0 && size+len(n.raw) > q.maxBytes {
				more = true
				return false
			}
		}
		out = append(out, h)
		size += len(n.raw)
		if stopAt >= 0 && int64(len(out)) >= stopAt {
			return false
		}
		if idOrder && q.batch > 0 && len(out) >= q.batch {
			more = true
			return false
		}
		return true
	}
	// past: the scan already returned key (a live cursor's earlier
	// batches).
	past := func(key any) bool {
		if !q.hasAfter {
			return false
		}
		c := compareValues(key, q.after)
		return (!desc && c <= 0) || (desc && c >= 0)
	}
	switch {
	case b.ok && b.hasEq:
		eqs := append([]any{}, b.eqs...)
		sort.SliceStable(eqs, func(i, j int) bool {
			c := compareValues(eqs[i], eqs[j])
			if desc {
				return c > 0
			}
			return c < 0
		})
		var prev any = missing
		for _, e := range eqs {
			if !isMissing(prev) && compareValues(prev, e) == 0 {
				continue
			}
			prev = e
			if past(e) {
				continue
			}
			if n := c.docs.get(e); n != nil {
				if !visit(n) {
					break
				}
			}
		}
	case b.ok && b.byType && !b.hasEq && b.class == -100:
		// Only a $type bounds _id: from the class's first key on (every
		// key visited is still matched against the whole filter).
		if !desc {
			n := c.docs.seekClass(b.fromClass)
			if n != nil && past(n.key) {
				n = c.docs.seekGT(q.after)
			}
			for ; n != nil; n = n.next[0] {
				if !visit(n) {
					break
				}
			}
		} else {
			n := c.docs.last()
			if q.hasAfter {
				n = c.docs.seekLT(q.after)
			}
			for ; n != nil && canonType(n.key) >= b.fromClass; n = n.prev {
				if !visit(n) {
					break
				}
			}
		}
	case b.ok:
		inRange := func(n *node) int { // -1 before, 0 in, 1 after (ascending sense)
			ct := canonType(n.key)
			if ct < b.class {
				return -1
			}
			if ct > b.class {
				return 1
			}
			if b.lo != nil {
				cmp := compareValues(n.key, b.lo)
				if cmp < 0 || (cmp == 0 && !b.loIncl) {
					return -1
				}
			}
			if b.hi != nil {
				cmp := compareValues(n.key, b.hi)
				if cmp > 0 || (cmp == 0 && !b.hiInc) {
					return 1
				}
			}
			return 0
		}
		if !desc {
			var n *node
			if b.lo != nil {
				if b.loIncl {
					n = c.docs.seekGE(b.lo)
				} else {
					n = c.docs.seekGT(b.lo)
				}
			} else {
				n = c.docs.first()
			}
			if n != nil && past(n.key) {
				n = c.docs.seekGT(q.after)
			}
			for ; n != nil; n = n.next[0] {
				r := inRange(n)
				if r < 0 {
					continue
				}
				if r > 0 || !visit(n) {
					break
				}
			}
		} else {
			var n *node
			if b.hi != nil {
				if b.hiInc {
					n = c.docs.seekLE(b.hi)
				} else {
					n = c.docs.seekLT(b.hi)
				}
			} else {
				n = c.docs.last()
			}
			if n != nil && past(n.key) {
				n = c.docs.seekLT(q.after)
			}
			for ; n != nil; n = n.prev {
				r := inRange(n)
				if r > 0 {
					continue
				}
				if r < 0 || !visit(n) {
					break
				}
			}
		}
	default:
		if !desc {
			n := c.docs.first()
			if q.hasAfter {
				n = c.docs.seekGT(q.after)
			}
			for ; n != nil; n = n.next[0] {
				if !visit(n) {
					break
				}
			}
		} else {
			n := c.docs.last()
			if q.hasAfter {
				n = c.docs.seekLT(q.after)
			}
			for ; n != nil; n = n.prev {
				if !visit(n) {
					break
				}
			}
		}
	}
	if err := ec.takeErr(); err != nil {
		return nil, false, err
	}
	if !idOrder {
		sortHits(out, keys)
		if q.skip > 0 {
			if int64(len(out)) <= q.skip {
				out = nil
			} else {
				out = out[q.skip:]
			}
		}
		if q.limit > 0 && int64(len(out)) > q.limit {
			out = out[:q.limit]
		}
	}
	return out, more, nil
}

func sortHits(hits []*hit, keys []sortKey) {
	if len(keys) == 0 {
		return
	}
	vals := make(map[*hit][]any, len(hits))
	for _, h := range hits {
		v := make([]any, len(keys))
		for j, k := range keys {
			v[j] = sortValue(h.decoded(), k)
		}
		vals[h] = v
	}
	sort.SliceStable(hits, func(i, j int) bool {
		a, b := vals[hits[i]], vals[hits[j]]
		for n, k := range keys {
			if c := compareValues(a[n], b[n]); c != 0 {
				return c*k.dir < 0
			}
		}
		return false
	})
}

// ---- insert / update / delete ----

func writeErrorEntry(i int, err error) bson.D {
	ce, ok := err.(*cmdError)
	if !ok {
		ce = &cmdError{code: 1, name: "InternalError", msg: err.Error()}
	}
	d := bson.D{{Key: "index", Value: int32(i)}, {Key: "code", Value: ce.code}, {Key: "errmsg", Value: ce.msg}}
	return append(d, ce.extra...)
}

func statements(x *cmdCtx, key string) ([]any, error) {
	v, ok := x.get(key)
	if !ok {
		return nil, cmdErrf(40414, "Location40414", "BSON field '%s.%s' is missing but a required field", x.name, key)
	}
	arr, ok := v.(bson.A)
	if !ok {
		return nil, cmdErrf(14, "TypeMismatch", "BSON field '%s.%s' is the wrong type '%s', expected type 'array'", x.name, key, typeName(v))
	}
	// write_ops.cpp checkOpCountForCommand: an empty batch, or one over
	// maxWriteBatchSize, is refused before anything is written.
	if len(arr) == 0 || len(arr) > 100000 {
		return nil, cmdErrf(16, "InvalidLength", "Write batch sizes must be between 1 and 100000. Got %d operations.", len(arr))
	}
	return arr, nil
}

func isOrdered(x *cmdCtx) bool {
	v, ok := x.get("ordered")
	return !ok || truthy(v)
}

func cmdInsert(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if err := checkCollName(x.db, name); err != nil {
		return nil, err
	}
	docs, err := statements(x, "documents")
	if err != nil {
		return nil, err
	}
	ordered := isOrdered(x)
	s := x.s
	// Prepare outside the lock: copying and validating is the bulk of the work.
	type prepared struct {
		raw []byte
		id  any
		err error
	}
	prep := make([]prepared, len(docs))
	for i, d := range docs {
		raw, id, err := s.prepareInsert(d)
		prep[i] = prepared{raw, id, err}
	}
	s.lockWrite()
	defer s.unlockWrite()
	c, _ := s.ensureColl(x.db, name)
	n := 0
	var werrs bson.A
	for i, p := range prep {
		err := p.err
		if err == nil {
			err = s.insertRaw(x, c, p.raw, p.id)
		}
		if err != nil {
			werrs = append(werrs, writeErrorEntry(i, err))
			if ordered {
				break
			}
			continue
		}
		n++
	}
	out := bson.D{{Key: "n", Value: int32(n)}}
	if len(werrs) > 0 {
		out = append(out, bson.E{Key: "writeErrors", Value: werrs})
	}
	return out, nil
}

func asDocument(v any) (bson.D, bool) {
	switch x := v.(type) {
	case bson.D:
		return x, true
	case rawDoc:
		d, err := decodeDoc(x)
		return d, err == nil
	}
	return nil, false
}

// positionFor is the positional $ of filter q on doc, for an update that
// uses one.
func positionFor(cu *compiledUpdate, q bson.D, doc bson.D, ec *evalCtx) string {
	if !cu.positional {
		return ""
	}
	return matchPosition(q, doc, ec)
}

type updateResult struct {
	matched, modified int
	upserted          any
}

// updateOne runs one update statement (caller holds the write lock).
func (s *Server) updateStatement(x *cmdCtx, c **collection, collName string, q bson.D, u any, multi, upsert bool, sortSpec bson.D) (updateResult, error) {
	var r updateResult
	if upsert && hasExpr(q) {
		return r, cmdErrf(224, "QueryFeatureNotAllowed", "$expr is not allowed in the query predicate for an upsert")
	}
	cu, err := compileUpdate(u, x.ec)
	if err != nil {
		return r, err
	}
	if multi && cu.kind == updReplacement {
		return r, cmdErrf(9, "FailedToParse", "multi update is not supported for replacement-style update")
	}
	for attempt := 0; attempt < 2; attempt++ {
		qo := queryOpts{filter: q, sort: sortSpec}
		if !multi {
			qo.limit = 1
		}
		hits, err := s.runQuery(*c, qo, x.ec)
		if err != nil {
			return r, err
		}
		for _, h := range hits {
			old := h.decoded()
			oldCopy := deepCopy(old).(bson.D)
			dcu, err := cu.at(positionFor(cu, q, old, x.ec))
			if err != nil {
				return r, err
			}
			nd, err := dcu.apply(old, false, x.ec)
			if err != nil {
				return r, err
			}
			r.matched++
			nraw := encodeDoc(nd)
			if len(nraw) > maxBSONSize {
				return r, cmdErrf(17419, "Location17419", "Resulting document after update is larger than %d", maxBSONSize)
			}
			if bytes.Equal(nraw, h.raw) {
				continue
			}
			if err := s.replaceStored(x, *c, h.id, oldCopy, nd, nraw, dcu); err != nil {
				return r, err
			}
			r.modified++
		}
		if len(hits) > 0 || !upsert {
			return r, nil
		}
		seed, err := upsertSeed(q, cu.kind == updReplacement)
		if err != nil {
			return r, err
		}
		icu, err := cu.at("")
		if err != nil {
			return r, err
		}
		nd, err := icu.apply(seed, true, x.ec)
		if err != nil {
			return r, err
		}
		id, ok := docGet(nd, "_id")
		if !ok {
			id = s.newID()
			nd = append(bson.D{{Key: "_id", Value: id}}, nd...)
		}
		if err := validID(id); err != nil {
			return r, err
		}
		if *c == nil {
			*c, _ = s.ensureColl(x.db, collName)
		}
		raw := encodeDoc(nd)
		if err := s.insertRaw(x, *c, raw, id); err != nil {
			if ce, ok := err.(*cmdError); ok && ce.code == 11000 && !multi && retryableUpsert(q, ce) && attempt == 0 {
				continue // write_ops_exec.cpp shouldRetryDuplicateKeyException
			}
			return r, err
		}
		r.upserted = id
		return r, nil
	}
	return r, nil
}

// retryableUpsert is mongod's rule for retrying an upsert that hit a
// duplicate key instead of failing (reference note §6.3): the filter is only
// equalities, exactly on the violated index's key, with the duplicated values.
func retryableUpsert(q bson.D, ce *cmdError) bool {
	kp, _ := docGet(ce.extra, "keyPattern")
	kv, _ := docGet(ce.extra, "keyValue")
	kpd, _ := kp.(bson.D)
	kvd, _ := kv.(bson.D)
	var eqs bson.D
	var walk func(q bson.D) bool
	walk = func(q bson.D) bool {
		for _, e := range q {
			if e.Key == "$and" {
				arr, _ := e.Value.(bson.A)
				for _, a := range arr {
					d, ok := a.(bson.D)
					if !ok || !walk(d) {
						return false
					}
				}
				continue
			}
			if strings.HasPrefix(e.Key, "$") {
				return false
			}
			v := e.Value
			if ops, ok := isOperatorDoc(v); ok {
				if len(ops) != 1 || ops[0].Key != "$eq" {
					return false
				}
				v = ops[0].Value
			}
			eqs = append(eqs, bson.E{Key: e.Key, Value: v})
		}
		return true
	}
	if !walk(q) || len(eqs) != len(kpd) {
		return false
	}
	for _, k := range kpd {
		v, ok := docGet(eqs, k.Key)
		if !ok {
			return false
		}
		dv, _ := docGet(kvd, k.Key)
		if compareValues(v, dv) != 0 {
			return false
		}
	}
	return true
}

func cmdUpdate(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if err := checkCollName(x.db, name); err != nil {
		return nil, err
	}
	stmts, err := statements(x, "updates")
	if err != nil {
		return nil, err
	}
	if x.s.opts.NoExpressions {
		// FerretDB checks the statements' types while it parses the
		// command: the whole command is refused, before any write.
		for _, st := range stmts {
			if sd, ok := asDocument(st); ok {
				if u, _ := docGet(sd, "u"); u != nil {
					if _, pipeline := u.(bson.A); pipeline {
						return nil, cmdErrf(14, "TypeMismatch", "BSON field 'update.updates.u' is the wrong type 'array', expected type 'object'")
					}
				}
			}
		}
	}
	ordered := isOrdered(x)
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	n, nModified := 0, 0
	var upserted, werrs bson.A
	for i, st := range stmts {
		sd, ok := asDocument(st)
		if !ok {
			return nil, cmdErrf(14, "TypeMismatch", "update statements must be objects")
		}
		qv, _ := docGet(sd, "q")
		q, _ := qv.(bson.D)
		u, _ := docGet(sd, "u")
		multi, _ := docGet(sd, "multi")
		upsert, _ := docGet(sd, "upsert")
		var sortSpec bson.D
		if sv, ok := docGet(sd, "sort"); ok {
			sortSpec, _ = sv.(bson.D)
		}
		if af, ok := docGet(sd, "arrayFilters"); ok {
			if arr, _ := af.(bson.A); len(arr) > 0 {
				werrs = append(werrs, writeErrorEntry(i, cmdErrf(2, "BadValue", "mongotest does not support arrayFilters")))
				if ordered {
					break
				}
				continue
			}
		}
		r, err := s.updateStatement(x, &c, name, q, u, truthy(multi), truthy(upsert), sortSpec)
		if err != nil {
			werrs = append(werrs, writeErrorEntry(i, err))
			if ordered {
				break
			}
			continue
		}
		n += r.matched
		nModified += r.modified
		if r.upserted != nil {
			n++
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(i)}, {Key: "_id", Value: r.upserted}})
		}
	}
	out := bson.D{{Key: "n", Value: int32(n)}, {Key: "nModified", Value: int32(nModified)}}
	if len(upserted) > 0 {
		out = append(out, bson.E{Key: "upserted", Value: upserted})
	}
	if len(werrs) > 0 {
		out = append(out, bson.E{Key: "writeErrors", Value: werrs})
	}
	return out, nil
}

func cmdDelete(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	stmts, err := statements(x, "deletes")
	if err != nil {
		return nil, err
	}
	ordered := isOrdered(x)
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	n := 0
	var werrs bson.A
	for i, st := range stmts {
		sd, ok := asDocument(st)
		if !ok {
			return nil, cmdErrf(14, "TypeMismatch", "delete statements must be objects")
		}
		qv, _ := docGet(sd, "q")
		q, _ := qv.(bson.D)
		lim, _ := docGet(sd, "limit")
		l, _ := toInt64(lim)
		hits, err := s.runQuery(c, queryOpts{filter: q, limit: l}, x.ec)
		if err != nil {
			werrs = append(werrs, writeErrorEntry(i, err))
			if ordered {
				break
			}
			continue
		}
		for _, h := range hits {
			s.deleteStored(x, c, h.id, h.raw)
			n++
		}
	}
	out := bson.D{{Key: "n", Value: int32(n)}}
	if len(werrs) > 0 {
		out = append(out, bson.E{Key: "writeErrors", Value: werrs})
	}
	return out, nil
}

func cmdFindAndModify(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if err := checkCollName(x.db, name); err != nil {
		return nil, err
	}
	q := x.doc("query")
	sortSpec := x.doc("sort")
	fields := x.doc("fields")
	if fields != nil && x.s.opts.NoExpressions {
		return nil, cmdErrf(238, "NotImplemented", "findAndModify: support for field \"fields\" with value %s is not implemented yet", formatValue(fields))
	}
	remove := x.boolOpt("remove")
	returnNew := x.boolOpt("new")
	upsert := x.boolOpt("upsert")
	u, hasUpdate := x.get("update")
	if remove && (hasUpdate || upsert || returnNew) {
		return nil, cmdErrf(9, "FailedToParse", "Cannot specify both an update and remove=true")
	}
	if !remove && !hasUpdate {
		return nil, cmdErrf(9, "FailedToParse", "Either an update or remove=true must be specified")
	}
	if af, ok := x.get("arrayFilters"); ok {
		if arr, _ := af.(bson.A); len(arr) > 0 {
			return nil, cmdErrf(2, "BadValue", "mongotest does not support arrayFilters")
		}
	}
	if upsert && hasExpr(q) {
		return nil, cmdErrf(224, "QueryFeatureNotAllowed", "$expr is not allowed in the query predicate for an upsert")
	}
	var project func(bson.D) (bson.D, error)
	if len(fields) > 0 {
		project, err = compileProjection(fields, x.ec, true)
		if err != nil {
			return nil, err
		}
	}
	value := func(d bson.D) (any, error) {
		if d == nil {
			return nil, nil
		}
		if project != nil {
			return project(d)
		}
		return d, nil
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	if remove {
		hits, err := s.runQuery(c, queryOpts{filter: q, sort: sortSpec, limit: 1}, x.ec)
		if err != nil {
			return nil, err
		}
		if len(hits) == 0 {
			return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(0)}}}, {Key: "value", Value: nil}}, nil
		}
		h := hits[0]
		s.deleteStored(x, c, h.id, h.raw)
		v, err := value(h.decoded())
		if err != nil {
			return nil, err
		}
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}}}, {Key: "value", Value: v}}, nil
	}
	if _, pipeline := u.(bson.A); pipeline && s.opts.NoExpressions {
		return nil, cmdErrf(238, "NotImplemented", "Aggregation pipelines are not supported yet")
	}
	cu, err := compileUpdate(u, x.ec)
	if err != nil {
		return nil, err
	}
	hits, err := s.runQuery(c, queryOpts{filter: q, sort: sortSpec, limit: 1}, x.ec)
	if err != nil {
		return nil, err
	}
	if len(hits) == 1 {
		h := hits[0]
		old := h.decoded()
		oldCopy := deepCopy(old).(bson.D)
		dcu, err := cu.at(positionFor(cu, q, old, x.ec))
		if err != nil {
			return nil, err
		}
		nd, err := dcu.apply(old, false, x.ec)
		if err != nil {
			return nil, err
		}
		nraw := encodeDoc(nd)
		if !bytes.Equal(nraw, h.raw) {
			if err := s.replaceStored(x, c, h.id, oldCopy, nd, nraw, dcu); err != nil {
				return nil, err
			}
		}
		ret := oldCopy
		if returnNew {
			ret = nd
		}
		v, err := value(ret)
		if err != nil {
			return nil, err
		}
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: true}}}, {Key: "value", Value: v}}, nil
	}
	if !upsert {
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(0)}, {Key: "updatedExisting", Value: false}}}, {Key: "value", Value: nil}}, nil
	}
	// Upsert through the update path (which applies the duplicate-key retry
	// rule), then read the result back.
	r, err := s.updateStatement(x, &c, name, q, u, false, true, sortSpec)
	if err != nil {
		return nil, err
	}
	if r.upserted == nil {
		// retried as an update of the existing document
		hits, err := s.runQuery(c, queryOpts{filter: q, limit: 1}, x.ec)
		if err != nil || len(hits) == 0 {
			return nil, err
		}
		var ret any
		if returnNew {
			if ret, err = value(hits[0].decoded()); err != nil {
				return nil, err
			}
		}
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: true}}}, {Key: "value", Value: ret}}, nil
	}
	var ret any
	if returnNew {
		n := c.docs.get(r.upserted)
		if ret, err = value(mustDecode(n.raw)); err != nil {
			return nil, err
		}
	}
	return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: false}, {Key: "upserted", Value: r.upserted}}}, {Key: "value", Value: ret}}, nil
}

// ---- find / cursors ----

type cursor struct {
	mu     sync.Mutex
	id     int64
	ns     string
	items  []rawDoc
	pos    int
	stream *changeStream
	live   *liveScan
	// lastUsed is the server time the cursor was last returned to the
	// client (created or after a getMore); noTimeout: find's
	// noCursorTimeout.
	lastUsed  time.Time
	noTimeout bool
	// created and origin (the command that opened it, set once the
	// command has replied) are what $currentOp shows of the cursor;
	// guarded by Server.cursorMu.
	created time.Time
	origin  bson.D
}

func (s *Server) registerCursor(cur *cursor) int64 {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	s.nextCursor++
	cur.id = s.nextCursor
	cur.lastUsed = s.Now()
	cur.created = cur.lastUsed
	s.cursors[cur.id] = cur
	s.cursorsOpened++
	if cur.stream != nil {
		s.streamsOpened++
	}
	return cur.id
}

// cursorMetrics is serverStatus's metrics section for cursors, as mongod
// reports it: metrics.cursor.open.{total,noTimeout,pinned} (pinned: in use
// by a command, such as a change stream's getMore waiting for events),
// totalOpened and timedOut; and the change-stream cursors alone under
// metrics.changeStreams.cursor (open.total, open.pinned, totalOpened), the
// names newer mongod versions give them (SERVER-123062). Cursors idle past
// Options.CursorTimeout are reaped first, as mongod's reaper would have
// (clientCursorMonitorFrequencySecs), so they do not count as open.
func (s *Server) cursorMetrics() bson.D {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	var total, noTimeout, pinned, streams, streamsPinned int64
	for id, cur := range s.cursors {
		// A cursor a command holds is pinned; TryLock never waits for
		// a blocking getMore (which takes cursorMu only after cur.mu).
		inUse := !cur.mu.TryLock()
		if !inUse {
			expired := s.expired(cur)
			cur.mu.Unlock()
			if expired {
				delete(s.cursors, id)
				s.cursorsTimedOut++
				continue
			}
		}
		total++
		if cur.noTimeout {
			noTimeout++
		}
		if inUse {
			pinned++
		}
		if cur.stream != nil {
			streams++
			if inUse {
				streamsPinned++
			}
		}
	}
	return bson.D{
		{Key: "changeStreams", Value: bson.D{{Key: "cursor", Value: bson.D{
			{Key: "open", Value: bson.D{{Key: "pinned", Value: streamsPinned}, {Key: "total", Value: streams}}},
			{Key: "totalOpened", Value: s.streamsOpened},
		}}}},
		{Key: "cursor", Value: bson.D{
			{Key: "timedOut", Value: s.cursorsTimedOut},
			{Key: "totalOpened", Value: s.cursorsOpened},
			{Key: "open", Value: bson.D{{Key: "noTimeout", Value: noTimeout}, {Key: "pinned", Value: pinned}, {Key: "total", Value: total}}},
		}},
	}
}

// expired reports whether cur was idle longer than Options.CursorTimeout:
// mongod's cursor manager kills such cursors (cursorTimeoutMillis, 10
// minutes; src/mongo/db/clientcursor.cpp / cursor_manager.cpp
// timeoutCursors), and a later getMore finds nothing: 43 CursorNotFound.
// Idle time is measured on the server clock, so AdvanceClock ages cursors.
func (s *Server) expired(cur *cursor) bool {
	t := s.opts.CursorTimeout
	return t > 0 && !cur.noTimeout && s.Now().Sub(cur.lastUsed) > t
}

func (s *Server) dropCursor(id int64) bool {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	_, ok := s.cursors[id]
	delete(s.cursors, id)
	return ok
}

// takeBatch returns up to n items (n <= 0: no count limit), within the 16 MiB
// reply budget but always at least one.
func takeBatch(items []rawDoc, pos, n int) (bson.A, int) {
	batch := bson.A{}
	size := 0
	for pos < len(items) && (n <= 0 || len(batch) < n) {
		if len(batch) > 0 && size+len(items[pos]) > maxBatchBytes {
			break
		}
		size += len(items[pos])
		batch = append(batch, items[pos])
		pos++
	}
	return batch, pos
}

// batchSizeOf returns the batch size asked for, or -1 when none was.
func batchSizeOf(d bson.D, key string) (int, error) {
	v, ok := docGet(d, key)
	if !ok {
		return -1, nil
	}
	n, ok := toInt64(v)
	if !ok || n < 0 {
		return 0, cmdErrf(51024, "Location51024", "BSON field 'batchSize' value must be >= 0, actual value '%s'", formatValue(v))
	}
	return int(n), nil
}

// cursorReply builds {cursor: {firstBatch, id, ns}} and registers a cursor
// for what remains. Default first batch is 101 documents, as mongod; an
// explicit batchSize 0 opens the cursor with an empty first batch.
func (s *Server) cursorReply(ns string, items []rawDoc, batchSize int, single bool, noTimeout ...bool) bson.D {
	n := batchSize
	if n < 0 {
		n = 101
	}
	batch, pos := bson.A{}, 0
	if n > 0 {
		batch, pos = takeBatch(items, 0, n)
	}
	var id int64
	if pos < len(items) && !single {
		id = s.registerCursor(&cursor{ns: ns, items: items, pos: pos, noTimeout: len(noTimeout) > 0 && noTimeout[0]})
	}
	return bson.D{{Key: "cursor", Value: bson.D{{Key: "firstBatch", Value: batch}, {Key: "id", Value: id}, {Key: "ns", Value: ns}}}}
}

// liveScan is a find cursor in _id order: each getMore reads its batch
// from the collection as it is then, past the last _id returned, as
// mongod's plan executor resumes an index or collection scan between
// batches (no isolation between batches: a document changed after the
// first batch is seen as it is when its batch is read, one deleted is not
// seen, one inserted ahead of the scan is; the MongoDB manual, "Cursor
// Isolation"). Sorts on other fields are blocking sorts, whose results are
// fixed when the first batch is read, as on mongod.
type liveScan struct {
	db, coll string
	uuid     bson.Binary
	q        queryOpts // filter and sort; skip until the first batch is read
	// remaining is what is left of the limit (0: none); last the _id of the
	// last document returned, started whether there is one.
	remaining int64
	last      any
	started   bool
	project   func(bson.D) (bson.D, error)
	ec        *evalCtx
}

// next reads the next batch of at most n documents (n <= 0: no count
// bound) within the reply budget, and whether the scan is over (caller
// holds s.mu for reading).
func (lv *liveScan) next(s *Server, n int) (bson.A, bool, error) {
	c := s.getColl(lv.db, lv.coll)
	if lv.started && (c == nil || !bytes.Equal(c.uuid.Data, lv.uuid.Data)) {
		// The collection was dropped or renamed under the cursor: mongod
		// kills its cursors and the getMore fails.
		return nil, true, cmdErrf(175, "QueryPlanKilled", "PlanExecutor error during getMore :: caused by :: collection dropped. UUID %x", lv.uuid.Data)
	}
	q := lv.q
	q.batch, q.maxBytes, q.limit = n, maxBatchBytes, lv.remaining
	q.after, q.hasAfter = lv.last, lv.started
	if lv.started {
		q.skip = 0
	}
	hits, more, err := s.scanQuery(c, q, lv.ec)
	if err != nil {
		return nil, true, err
	}
	if c != nil && !lv.started {
		lv.uuid = c.uuid
	}
	lv.started = true
	batch := make(bson.A, 0, len(hits))
	for _, h := range hits {
		if lv.project != nil {
			d, err := lv.project(h.decoded())
			if err != nil {
				return nil, true, err
			}
			batch = append(batch, rawDoc(encodeDoc(d)))
		} else {
			batch = append(batch, rawDoc(h.raw))
		}
		lv.last = h.id
	}
	if lv.remaining > 0 {
		lv.remaining -= int64(len(hits))
		if lv.remaining <= 0 {
			return batch, true, nil
		}
	}
	return batch, !more, nil
}

func cmdFind(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if x.db == "local" && name == oplogColl {
		return findOplog(x)
	}
	q := queryOpts{filter: x.doc("filter"), sort: x.doc("sort")}
	if v, ok := x.get("skip"); ok {
		q.skip, _ = toInt64(v)
		if q.skip < 0 {
			return nil, cmdErrf(51024, "Location51024", "BSON field 'skip' value must be >= 0, actual value '%d'", q.skip)
		}
	}
	single := x.boolOpt("singleBatch")
	if v, ok := x.get("limit"); ok {
		q.limit, _ = toInt64(v)
		if q.limit < 0 {
			q.limit, single = -q.limit, true
		}
	}
	bs, err := batchSizeOf(x.cmd, "batchSize")
	if err != nil {
		return nil, err
	}
	if x.boolOpt("tailable") {
		return nil, cmdErrf(2, "BadValue", "mongotest does not support tailable cursors")
	}
	var project func(bson.D) (bson.D, error)
	if p := x.doc("projection"); len(p) > 0 {
		project, err = compileProjection(p, x.ec, true)
		if err != nil {
			return nil, err
		}
	}
	keys, err := parseSort(q.sort)
	if err != nil {
		return nil, err
	}
	s := x.s
	ns := nsString(x.db, name)
	if idOrdered(keys) {
		lv := &liveScan{db: x.db, coll: name, q: q, remaining: q.limit, project: project, ec: x.ec}
		n := bs
		if n < 0 {
			n = 101
		}
		// batchSize 0 reads nothing and leaves the cursor open, as mongod
		// does before its executor has run.
		batch, done := bson.A{}, false
		if n > 0 {
			s.mu.RLock()
			batch, done, err = lv.next(s, n)
			s.mu.RUnlock()
			if err != nil {
				return nil, err
			}
		}
		var id int64
		if !done && !single {
			id = s.registerCursor(&cursor{ns: ns, live: lv, noTimeout: x.boolOpt("noCursorTimeout")})
		}
		return bson.D{{Key: "cursor", Value: bson.D{{Key: "firstBatch", Value: batch}, {Key: "id", Value: id}, {Key: "ns", Value: ns}}}}, nil
	}
	s.mu.RLock()
	hits, err := s.runQuery(s.getColl(x.db, name), q, x.ec)
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	items := make([]rawDoc, len(hits))
	for i, h := range hits {
		if project != nil {
			d, err := project(h.decoded())
			if err != nil {
				return nil, err
			}
			items[i] = encodeDoc(d)
		} else {
			items[i] = h.raw
		}
	}
	return s.cursorReply(ns, items, bs, single, x.boolOpt("noCursorTimeout")), nil
}

func cmdGetMore(x *cmdCtx) (bson.D, error) {
	id, ok := toInt64(x.cmd[0].Value)
	if !ok {
		return nil, cmdErrf(14, "TypeMismatch", "getMore id must be a long")
	}
	s := x.s
	s.cursorMu.Lock()
	cur := s.cursors[id]
	s.cursorMu.Unlock()
	if cur == nil {
		return nil, cmdErrf(43, "CursorNotFound", "cursor id %d not found", id)
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	if s.expired(cur) {
		if s.dropCursor(id) {
			s.cursorMu.Lock()
			s.cursorsTimedOut++
			s.cursorMu.Unlock()
		}
		return nil, cmdErrf(43, "CursorNotFound", "cursor id %d not found", id)
	}
	defer func() { cur.lastUsed = s.Now() }()
	// failGetMoreAfterCursorCheckout fires here, with the cursor in hand,
	// so its error is labelled knowing whether the cursor is a change
	// stream's (getmore_cmd.cpp); the failed cursor is gone, as after any
	// getMore error.
	if a := s.checkFailPoint(fpGetMoreFailed, x.c, x); a != nil && a.err != nil {
		ce := a.err.(*cmdError)
		ce.labels = errorLabels(x, &ce.code, nil, cur.stream != nil)
		s.dropCursor(cur.id)
		return nil, ce
	}
	bs, err := batchSizeOf(x.cmd, "batchSize")
	if err != nil {
		return nil, err
	}
	if cur.stream != nil {
		return s.streamGetMore(x, cur, bs)
	}
	if _, ok := x.get("maxTimeMS"); ok {
		return nil, cmdErrf(2, "BadValue", "cannot set maxTimeMS on getMore command for a non-awaitData cursor")
	}
	var batch bson.A
	rid := cur.id
	if cur.live != nil {
		s.mu.RLock()
		b, done, err := cur.live.next(s, bs)
		s.mu.RUnlock()
		if err != nil {
			s.dropCursor(cur.id)
			return nil, err
		}
		batch = b
		if done {
			s.dropCursor(cur.id)
			rid = 0
		}
	} else {
		var pos int
		batch, pos = takeBatch(cur.items, cur.pos, bs)
		cur.pos = pos
		if pos >= len(cur.items) {
			s.dropCursor(cur.id)
			rid = 0
		}
	}
	return bson.D{{Key: "cursor", Value: bson.D{{Key: "nextBatch", Value: batch}, {Key: "id", Value: rid}, {Key: "ns", Value: cur.ns}}}}, nil
}

func cmdKillCursors(x *cmdCtx) (bson.D, error) {
	v, _ := x.get("cursors")
	arr, _ := v.(bson.A)
	killed, notFound := bson.A{}, bson.A{}
	for _, a := range arr {
		id, _ := toInt64(a)
		if x.s.dropCursor(id) {
			killed = append(killed, id)
		} else {
			notFound = append(notFound, id)
		}
	}
	return bson.D{{Key: "cursorsKilled", Value: killed}, {Key: "cursorsNotFound", Value: notFound}, {Key: "cursorsAlive", Value: bson.A{}}, {Key: "cursorsUnknown", Value: bson.A{}}}, nil
}

func cmdCount(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	q := queryOpts{filter: x.doc("query")}
	if v, ok := x.get("skip"); ok {
		q.skip, _ = toInt64(v)
	}
	if v, ok := x.get("limit"); ok {
		q.limit, _ = toInt64(v)
		if q.limit < 0 {
			q.limit = -q.limit
		}
	}
	s := x.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.getColl(x.db, name)
	if c == nil {
		return bson.D{{Key: "n", Value: int32(0)}}, nil
	}
	if len(q.filter) == 0 && q.skip == 0 && q.limit == 0 {
		return bson.D{{Key: "n", Value: int32(c.docs.n)}}, nil
	}
	hits, err := s.runQuery(c, q, x.ec)
	if err != nil {
		return nil, err
	}
	return bson.D{{Key: "n", Value: int32(len(hits))}}, nil
}

func cmdDistinct(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	key := x.str("key")
	if key == "" {
		return nil, cmdErrf(40414, "Location40414", "BSON field 'distinct.key' is missing but a required field")
	}
	s := x.s
	s.mu.RLock()
	hits, err := s.runQuery(s.getColl(x.db, name), queryOpts{filter: x.doc("query")}, x.ec)
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	values := bson.A{}
	add := func(v any) {
		k := string(appendKey(nil, v))
		if !seen[k] {
			seen[k] = true
			values = append(values, v)
		}
	}
	parts := splitPath(key)
	for _, h := range hits {
		for _, v := range resolvePath(h.decoded(), parts) {
			if arr, ok := v.(bson.A); ok {
				for _, e := range arr {
					add(e)
				}
				continue
			}
			add(v)
		}
	}
	sort.SliceStable(values, func(i, j int) bool { return compareValues(values[i], values[j]) < 0 })
	return bson.D{{Key: "values", Value: values}}, nil
}

// ---- aggregate (non change stream) ----

func cmdAggregate(x *cmdCtx) (bson.D, error) {
	pv, ok := x.get("pipeline")
	if !ok {
		return nil, cmdErrf(40414, "Location40414", "BSON field 'aggregate.pipeline' is missing but a required field")
	}
	pipeline, ok := pv.(bson.A)
	if !ok {
		return nil, cmdErrf(14, "TypeMismatch", "'pipeline' option must be specified as an array")
	}
	cursorOpt, hasCursor := x.get("cursor")
	if !hasCursor && !x.boolOpt("explain") {
		return nil, cmdErrf(9, "FailedToParse", "The 'cursor' option is required, except for aggregate with the explain argument")
	}
	cd, _ := cursorOpt.(bson.D)
	bs, err := batchSizeOf(cd, "batchSize")
	if err != nil {
		return nil, err
	}
	if len(pipeline) > 0 {
		if st, ok := pipeline[0].(bson.D); ok && len(st) == 1 && st[0].Key == "$currentOp" {
			return x.s.currentOp(x, st[0].Value, pipeline[1:], bs)
		}
		if st, ok := pipeline[0].(bson.D); ok && len(st) == 1 && st[0].Key == "$changeStream" {
			if x.s.opts.Standalone {
				// document_source_change_stream.cpp assertIsLegalSpecification.
				return nil, cmdErrf(40573, "Location40573", "The $changeStream stage is only supported on replica sets")
			}
			return x.s.openChangeStream(x, st[0].Value, pipeline[1:], bs)
		}
	}
	for _, st := range pipeline {
		if sd, ok := st.(bson.D); ok && len(sd) == 1 && (sd[0].Key == "$changeStream") {
			return nil, cmdErrf(40602, "Location40602", "$changeStream is only valid as the first stage in a pipeline")
		}
		if sd, ok := st.(bson.D); ok && len(sd) == 1 && (sd[0].Key == "$out" || sd[0].Key == "$merge") {
			return nil, cmdErrf(2, "BadValue", "mongotest does not support %s", sd[0].Key)
		}
	}
	name, isColl := x.cmd[0].Value.(string)
	if !isColl {
		return nil, cmdErrf(73, "InvalidNamespace", "aggregate on a database needs a $changeStream or $documents first stage, which mongotest supports only for $changeStream")
	}
	// A leading $match (and $sort/$skip/$limit) goes through the query
	// planner so that _id ranges use the index.
	q := queryOpts{}
	rest := pipeline
	if len(rest) > 0 {
		if st, ok := rest[0].(bson.D); ok && len(st) == 1 && st[0].Key == "$match" {
			if f, ok := st[0].Value.(bson.D); ok && !hasExpr(f) {
				q.filter = f
				rest = rest[1:]
			}
		}
	}
	s := x.s
	x.ec.foreign = func(coll string) []bson.D {
		s.mu.RLock()
		defer s.mu.RUnlock()
		c := s.getColl(x.db, coll)
		if c == nil {
			return nil
		}
		hits, _ := s.runQuery(c, queryOpts{}, x.ec)
		out := make([]bson.D, len(hits))
		for i, h := range hits {
			out[i] = h.decoded()
		}
		return out
	}
	stages, err := compilePipeline(rest, x.ec)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	hits, err := s.runQuery(s.getColl(x.db, name), q, x.ec)
	var docs []bson.D
	if err == nil {
		docs = make([]bson.D, len(hits))
		for i, h := range hits {
			docs[i] = h.decoded()
		}
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	docs, err = runStages(stages, docs)
	if err != nil {
		return nil, err
	}
	items := make([]rawDoc, len(docs))
	for i, d := range docs {
		items[i] = encodeDoc(d)
	}
	return s.cursorReply(nsString(x.db, name), items, bs, false), nil
}
