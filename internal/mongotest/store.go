package mongotest

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// skiplist keeps a collection's documents ordered by _id (MongoDB's index
// order), so that a `find({_id: {$gt: X}}).sort({_id: 1}).limit(n)` page is
// O(log n + n). Level 0 is doubly linked for descending scans.
type skiplist struct {
	head  node
	tail  *node
	level int
	n     int
	rnd   uint64
}

type node struct {
	key  any
	raw  []byte
	next []*node
	prev *node
}

const maxLevel = 24

func newSkiplist() *skiplist {
	l := &skiplist{level: 1, rnd: 0x9E3779B97F4A7C15}
	l.head.next = make([]*node, maxLevel)
	return l
}

func (l *skiplist) randLevel() int {
	lvl := 1
	for lvl < maxLevel {
		l.rnd ^= l.rnd << 13
		l.rnd ^= l.rnd >> 7
		l.rnd ^= l.rnd << 17
		if l.rnd&3 != 0 {
			break
		}
		lvl++
	}
	return lvl
}

// seekGE returns the first node with key >= k (or nil).
func (l *skiplist) seekGE(k any) *node {
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && compareValues(x.next[i].key, k) < 0 {
			x = x.next[i]
		}
	}
	return x.next[0]
}

// seekClass returns the first node whose key's canonical class
// (canonType) is cls or after: keys are ordered by class first.
func (l *skiplist) seekClass(cls int) *node {
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && canonType(x.next[i].key) < cls {
			x = x.next[i]
		}
	}
	return x.next[0]
}

// seekGT returns the first node with key > k.
func (l *skiplist) seekGT(k any) *node {
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && compareValues(x.next[i].key, k) <= 0 {
			x = x.next[i]
		}
	}
	return x.next[0]
}

// seekLE returns the last node with key <= k.
func (l *skiplist) seekLE(k any) *node {
	n := l.seekGT(k)
	if n == nil {
		return l.tail
	}
	return n.prev
}

// seekLT returns the last node with key < k.
func (l *skiplist) seekLT(k any) *node {
	n := l.seekGE(k)
	if n == nil {
		return l.tail
	}
	return n.prev
}

func (l *skiplist) first() *node { return l.head.next[0] }
func (l *skiplist) last() *node  { return l.tail }

func (l *skiplist) get(k any) *node {
	n := l.seekGE(k)
	if n != nil && compareValues(n.key, k) == 0 {
		return n
	}
	return nil
}

// put inserts or replaces.
func (l *skiplist) put(k any, raw []byte) {
	var update [maxLevel]*node
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && compareValues(x.next[i].key, k) < 0 {
			x = x.next[i]
		}
		update[i] = x
	}
	if n := x.next[0]; n != nil && compareValues(n.key, k) == 0 {
		n.raw = raw
		return
	}
	lvl := l.randLevel()
	if lvl > l.level {
		for i := l.level; i < lvl; i++ {
			update[i] = &l.head
		}
		l.level = lvl
	}
	n := &node{key: k, raw: raw, next: make([]*node, lvl)}
	for i := 0; i < lvl; i++ {
		n.next[i] = update[i].next[i]
		update[i].next[i] = n
	}
	if update[0] != &l.head {
		n.prev = update[0]
	}
	if n.next[0] != nil {
		n.next[0].prev = n
	} else {
		l.tail = n
	}
	l.n++
}

func (l *skiplist) remove(k any) bool {
	var update [maxLevel]*node
	x := &l.head
	for i := l.level - 1; i >= 0; i-- {
		for x.next[i] != nil && compareValues(x.next[i].key, k) < 0 {
			x = x.next[i]
		}
		update[i] = x
	}
	n := x.next[0]
	if n == nil || compareValues(n.key, k) != 0 {
		return false
	}
	for i := 0; i < len(n.next); i++ {
		update[i].next[i] = n.next[i]
	}
	if n.next[0] != nil {
		n.next[0].prev = n.prev
	} else {
		l.tail = n.prev
	}
	for l.level > 1 && l.head.next[l.level-1] == nil {
		l.level--
	}
	l.n--
	return true
}

type database struct {
	name  string
	colls map[string]*collection
}

type collection struct {
	db, name string
	uuid     bson.Binary
	docs     *skiplist
	indexes  []*index // indexes[0] is _id_
	options  bson.D
	// ns is shared by this collection's change events.
	ns *evNS
	// postImages is set by changeStreamPreAndPostImages: {enabled: true}.
	postImages bool
	// validator is the document validation of the options, or nil.
	validator *validator
}

// index is an index spec; unique indexes other than _id_ keep a map from
// the canonical key to the number of documents holding it.
type index struct {
	name    string
	key     bson.D
	spec    bson.D
	unique  bool
	sparse  bool
	partial *matcher
	entries map[string]int
}

func (s *Server) newCollection(db, name string) *collection {
	var u [16]byte
	s.randMu.Lock()
	s.rng.Read(u[:])
	s.randMu.Unlock()
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	c := &collection{db: db, name: name, uuid: bson.Binary{Subtype: 4, Data: u[:]}, docs: newSkiplist()}
	c.ns = &evNS{db: db, coll: name, uuid: c.uuid}
	c.indexes = []*index{{
		name: "_id_", key: bson.D{{Key: "_id", Value: int32(1)}},
		spec:   bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "name", Value: "_id_"}},
		unique: true,
	}}
	return c
}

// getColl returns a collection or nil. Caller holds s.mu.
func (s *Server) getColl(db, name string) *collection {
	d := s.dbs[db]
	if d == nil {
		return nil
	}
	return d.colls[name]
}

// ensureColl returns the collection, creating it (and its database) if
// needed. Caller holds s.mu for writing.
func (s *Server) ensureColl(db, name string) (*collection, bool) {
	d := s.dbs[db]
	if d == nil {
		d = &database{name: db, colls: map[string]*collection{}}
		s.dbs[db] = d
	}
	c := d.colls[name]
	if c != nil {
		return c, false
	}
	c = s.newCollection(db, name)
	d.colls[name] = c
	// Implicit and explicit creation both log a create entry, seen by
	// streams with showExpandedEvents.
	s.appendEvent(nil, &event{op: "create", evNS: c.ns, expanded: true,
		evExtra: &evExtra{desc: bson.D{{Key: "idIndex", Value: c.indexes[0].spec}}}})
	return c, true
}

// indexKey computes the canonical key of doc for ix, and whether the
// document is in the index at all (partial and sparse indexes leave some out).
// A missing field indexes as null, as in MongoDB.
func (ix *index) indexKey(doc bson.D) (string, bool) {
	if ix.partial != nil && !ix.partial.matches(doc) {
		return "", false
	}
	var b []byte
	present := false
	for _, k := range ix.key {
		vals := lookupPath(doc, k.Key)
		var v any
		switch len(vals) {
		case 0:
			v = nil
		case 1:
			v = vals[0]
			present = true
		default:
			v = bson.A(vals)
			present = true
		}
		b = appendKey(b, v)
	}
	if ix.sparse && !present {
		return "", false
	}
	return string(b), true
}

// lookupPath returns the values at a dotted path (no array expansion of the
// final value; intermediate arrays are traversed). Used for index keys and
// sort keys.
func lookupPath(doc bson.D, path string) []any {
	return resolvePath(doc, splitPath(path))
}
