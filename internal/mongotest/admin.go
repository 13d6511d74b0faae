package mongotest

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func collectionInfo(c *collection, nameOnly bool) bson.D {
	d := bson.D{{Key: "name", Value: c.name}, {Key: "type", Value: "collection"}}
	if nameOnly {
		return d
	}
	opts := c.options
	if opts == nil {
		opts = bson.D{}
	}
	return append(d,
		bson.E{Key: "options", Value: opts},
		bson.E{Key: "info", Value: bson.D{{Key: "readOnly", Value: false}, {Key: "uuid", Value: c.uuid}}},
		bson.E{Key: "idIndex", Value: c.indexes[0].spec},
	)
}

func cmdListCollections(x *cmdCtx) (bson.D, error) {
	nameOnly := x.boolOpt("nameOnly")
	var m *matcher
	if f := x.doc("filter"); len(f) > 0 {
		var err error
		if m, err = compileFilter(f, x.ec); err != nil {
			return nil, err
		}
	}
	cd := x.doc("cursor")
	bs, err := batchSizeOf(cd, "batchSize")
	if err != nil {
		return nil, err
	}
	s := x.s
	s.mu.RLock()
	var items []rawDoc
	if d := s.dbs[x.db]; d != nil {
		for _, name := range sortedKeys(d.colls) {
			info := collectionInfo(d.colls[name], false)
			if m != nil && !m.matches(info) {
				continue
			}
			if nameOnly {
				info = info[:2]
			}
			items = append(items, encodeDoc(info))
		}
	}
	s.mu.RUnlock()
	return s.cursorReply(x.db+".$cmd.listCollections", items, bs, false), nil
}

func cmdListIndexes(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	bs, err := batchSizeOf(x.doc("cursor"), "batchSize")
	if err != nil {
		return nil, err
	}
	s := x.s
	s.mu.RLock()
	c := s.getColl(x.db, name)
	var items []rawDoc
	if c != nil {
		for _, ix := range c.indexes {
			items = append(items, encodeDoc(ix.spec))
		}
	}
	s.mu.RUnlock()
	if c == nil {
		return nil, cmdErrf(26, "NamespaceNotFound", "ns does not exist: %s.%s", x.db, name)
	}
	return s.cursorReply(x.db+".$cmd.listIndexes."+name, items, bs, false), nil
}

func indexNameFor(key bson.D) string {
	var parts []string
	for _, k := range key {
		parts = append(parts, k.Key+"_"+formatValue(k.Value))
	}
	return strings.Join(parts, "_")
}

var indexOptionKeys = []string{"unique", "sparse", "partialFilterExpression", "expireAfterSeconds", "hidden", "collation"}

func sameIndexOptions(a, b bson.D) bool {
	for _, k := range indexOptionKeys {
		av, aok := docGet(a, k)
		bv, bok := docGet(b, k)
		if k == "unique" || k == "sparse" || k == "hidden" {
			if truthy(av) != truthy(bv) {
				return false
			}
			continue
		}
		if aok != bok || (aok && compareValues(av, bv) != 0) {
			return false
		}
	}
	return true
}

func cmdCreateIndexes(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if err := checkCollName(x.db, name); err != nil {
		return nil, err
	}
	v, _ := x.get("indexes")
	specs, ok := v.(bson.A)
	if !ok || len(specs) == 0 {
		return nil, cmdErrf(2, "BadValue", "Must specify at least one index to create")
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c, created := s.ensureColl(x.db, name)
	before := len(c.indexes)
	var newIdx []*index
	for _, sv := range specs {
		spec, ok := sv.(bson.D)
		if !ok {
			return nil, cmdErrf(14, "TypeMismatch", "index specification must be an object")
		}
		for _, e := range spec {
			if !indexSpecFields[e.Key] {
				return nil, cmdErrf(197, "InvalidIndexSpecificationOption", "Error in specification %s :: caused by :: The field '%s' is not valid for an index specification. Specification: %s", formatValue(spec), e.Key, formatValue(spec))
			}
		}
		kv, _ := docGet(spec, "key")
		key, ok := kv.(bson.D)
		if !ok || len(key) == 0 {
			return nil, cmdErrf(67, "CannotCreateIndex", "index key pattern must be a non-empty object")
		}
		nv, _ := docGet(spec, "name")
		iname, _ := nv.(string)
		if iname == "" {
			iname = indexNameFor(key)
		}
		dup := false
		for _, ix := range append(append([]*index{}, c.indexes...), newIdx...) {
			sameKey := compareDocs(ix.key, key) == 0
			switch {
			case ix.name == iname && !sameKey:
				return nil, cmdErrf(86, "IndexKeySpecsConflict", "An existing index has the same name as the requested index but a different key. Requested index: %s, existing index: %s", formatValue(spec), formatValue(ix.spec))
			case ix.name == iname && sameKey:
				if !sameIndexOptions(ix.spec, spec) && ix.name != "_id_" {
					return nil, cmdErrf(85, "IndexOptionsConflict", "An existing index has the same name as the requested index but different options. Requested index: %s, existing index: %s", formatValue(spec), formatValue(ix.spec))
				}
				dup = true
			case sameKey && sameIndexOptions(ix.spec, spec):
				return nil, cmdErrf(85, "IndexOptionsConflict", "Index already exists with a different name: %s", ix.name)
			}
		}
		if dup {
			continue
		}
		ix := &index{name: iname, key: key}
		ix.spec = bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: key}, {Key: "name", Value: iname}}
		for _, e := range spec {
			switch e.Key {
			case "key", "name", "v", "ns", "background":
				continue
			case "unique":
				ix.unique = truthy(e.Value)
			case "sparse":
				ix.sparse = truthy(e.Value)
			case "partialFilterExpression":
				pf, ok := e.Value.(bson.D)
				if !ok {
					return nil, cmdErrf(2, "BadValue", "partialFilterExpression must be an object")
				}
				m, err := compileFilter(pf, &evalCtx{})
				if err != nil {
					return nil, cmdErrf(67, "CannotCreateIndex", "Error in specification %s :: caused by :: %v", formatValue(spec), err)
				}
				ix.partial = m
			}
			ix.spec = append(ix.spec, e)
		}
		if ix.unique {
			ix.entries = map[string]int{}
			for n := c.docs.first(); n != nil; n = n.next[0] {
				doc := mustDecode(n.raw)
				k, in := ix.indexKey(doc)
				if !in {
					continue
				}
				if ix.entries[k] > 0 {
					err := dupKeyError(c, ix, doc).(*cmdError)
					err.msg = "Index build failed: " + err.msg
					return nil, err
				}
				ix.entries[k]++
			}
		}
		newIdx = append(newIdx, ix)
	}
	c.indexes = append(c.indexes, newIdx...)
	if len(newIdx) > 0 {
		specs := bson.A{}
		for _, ix := range newIdx {
			specs = append(specs, ix.spec)
		}
		s.appendEvent(x, &event{op: "createIndexes", evNS: c.ns, expanded: true, evExtra: &evExtra{desc: bson.D{{Key: "indexes", Value: specs}}}})
	}
	out := bson.D{
		{Key: "numIndexesBefore", Value: int32(before)},
		{Key: "numIndexesAfter", Value: int32(len(c.indexes))},
		{Key: "createdCollectionAutomatically", Value: created},
	}
	if len(newIdx) == 0 {
		out = append(out, bson.E{Key: "note", Value: "all indexes already exist"})
	}
	return out, nil
}

func cmdDropIndexes(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	if c == nil {
		return nil, cmdErrf(26, "NamespaceNotFound", "ns not found %s.%s", x.db, name)
	}
	was := len(c.indexes)
	v, _ := x.get("index")
	drop := func(match func(ix *index) bool) bool {
		for i, ix := range c.indexes[1:] {
			if match(ix) {
				c.indexes = append(c.indexes[:i+1:i+1], c.indexes[i+2:]...)
				s.appendEvent(x, &event{op: "dropIndexes", evNS: c.ns, expanded: true, evExtra: &evExtra{desc: bson.D{{Key: "indexes", Value: bson.A{ix.spec}}}}})
				return true
			}
		}
		return false
	}
	switch iv := v.(type) {
	case string:
		if iv == "*" {
			for len(c.indexes) > 1 {
				name := c.indexes[1].name
				drop(func(ix *index) bool { return ix.name == name })
			}
		} else if iv == "_id_" {
			return nil, cmdErrf(72, "InvalidOptions", "cannot drop _id index")
		} else if !drop(func(ix *index) bool { return ix.name == iv }) {
			return nil, cmdErrf(27, "IndexNotFound", "index not found with name [%s]", iv)
		}
	case bson.D:
		if !drop(func(ix *index) bool { return compareDocs(ix.key, iv) == 0 }) {
			return nil, cmdErrf(27, "IndexNotFound", "can't find index with key: %s", formatValue(iv))
		}
	case bson.A:
		for _, n := range iv {
			ns, _ := n.(string)
			if !drop(func(ix *index) bool { return ix.name == ns }) {
				return nil, cmdErrf(27, "IndexNotFound", "index not found with name [%s]", ns)
			}
		}
	default:
		return nil, cmdErrf(14, "TypeMismatch", "invalid index specification")
	}
	return bson.D{{Key: "nIndexesWas", Value: int32(was)}}, nil
}

var envelopeKeys = map[string]bool{"$db": true, "lsid": true, "$clusterTime": true, "txnNumber": true, "writeConcern": true, "readConcern": true, "$readPreference": true, "comment": true, "maxTimeMS": true, "apiVersion": true, "apiStrict": true, "apiDeprecationErrors": true}

func cmdCreate(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	if err := checkCollName(x.db, name); err != nil {
		return nil, err
	}
	opts := bson.D{}
	for _, e := range x.cmd[1:] {
		if !envelopeKeys[e.Key] {
			opts = append(opts, e)
		}
	}
	val, err := compileValidator(opts)
	if err != nil {
		return nil, err
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	if c := s.getColl(x.db, name); c != nil {
		if compareDocs(c.options, opts) == 0 || (len(c.options) == 0 && len(opts) == 0) {
			return bson.D{}, nil
		}
		return nil, cmdErrf(48, "NamespaceExists", "Collection %s.%s already exists.", x.db, name)
	}
	c, _ := s.ensureColl(x.db, name)
	c.options = opts
	c.postImages = postImagesEnabled(opts)
	c.validator = val
	return bson.D{}, nil
}

func postImagesEnabled(opts bson.D) bool {
	v, ok := docGet(opts, "changeStreamPreAndPostImages")
	if !ok {
		return false
	}
	d, _ := v.(bson.D)
	en, _ := docGet(d, "enabled")
	return truthy(en)
}

func cmdCollMod(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	if c == nil {
		return nil, cmdErrf(26, "NamespaceNotFound", "ns does not exist: %s.%s", x.db, name)
	}
	before := c.options
	if before == nil {
		before = bson.D{}
	}
	desc := bson.D{}
	opts := c.options
	for _, e := range x.cmd[1:] {
		if envelopeKeys[e.Key] {
			continue
		}
		desc = append(desc, e)
		opts = setField(cloneShallow(opts), e.Key, e.Value)
	}
	val, err := compileValidator(opts)
	if err != nil {
		return nil, err
	}
	c.options = opts
	c.postImages = postImagesEnabled(c.options)
	c.validator = val
	// Every collMod, an empty one too, logs a collMod oplog entry, which
	// streams with showExpandedEvents show as a modify event
	// (change_stream_event_transform.cpp kModifyOpType).
	s.appendEvent(x, &event{op: "modify", evNS: c.ns, expanded: true,
		evExtra: &evExtra{desc: desc, before: bson.D{{Key: "collectionOptions", Value: before}}}})
	return bson.D{}, nil
}

// dropColl removes a collection and records its drop event (caller holds
// the write lock).
func (s *Server) dropColl(x *cmdCtx, c *collection) {
	delete(s.dbs[c.db].colls, c.name)
	if len(s.dbs[c.db].colls) == 0 {
		delete(s.dbs, c.db)
	}
	s.appendEvent(x, &event{op: "drop", evNS: c.ns})
}

func cmdDrop(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(x.db, name)
	if c == nil {
		// MongoDB 7.0+ treats dropping a missing collection as success.
		return bson.D{}, nil
	}
	n := len(c.indexes)
	s.dropColl(x, c)
	return bson.D{{Key: "nIndexesWas", Value: int32(n)}, {Key: "ns", Value: nsString(x.db, name)}}, nil
}

func cmdDropDatabase(x *cmdCtx) (bson.D, error) {
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	d := s.dbs[x.db]
	if d == nil {
		return bson.D{}, nil
	}
	for _, name := range sortedKeys(d.colls) {
		s.dropColl(x, d.colls[name])
	}
	delete(s.dbs, x.db)
	s.appendEvent(x, &event{op: "dropDatabase", evNS: &evNS{db: x.db}})
	return bson.D{{Key: "dropped", Value: x.db}}, nil
}

func splitNS(ns string) (string, string, bool) {
	i := strings.IndexByte(ns, '.')
	if i <= 0 || i == len(ns)-1 {
		return "", "", false
	}
	return ns[:i], ns[i+1:], true
}

func cmdRenameCollection(x *cmdCtx) (bson.D, error) {
	if x.db != "admin" {
		return nil, cmdErrf(13, "Unauthorized", "renameCollection may only be run against the admin database.")
	}
	from, _ := x.cmd[0].Value.(string)
	to := x.str("to")
	fdb, fcoll, ok1 := splitNS(from)
	tdb, tcoll, ok2 := splitNS(to)
	if !ok1 || !ok2 {
		return nil, cmdErrf(73, "InvalidNamespace", "Invalid namespace specified '%s'", to)
	}
	if err := checkCollName(tdb, tcoll); err != nil {
		return nil, err
	}
	s := x.s
	s.lockWrite()
	defer s.unlockWrite()
	c := s.getColl(fdb, fcoll)
	if c == nil {
		return nil, cmdErrf(26, "NamespaceNotFound", "Source collection %s does not exist", from)
	}
	if from == to {
		return nil, cmdErrf(20, "IllegalOperation", "Can't rename a collection to itself")
	}
	var dropped *bson.Binary
	if t := s.getColl(tdb, tcoll); t != nil {
		if !x.boolOpt("dropTarget") {
			return nil, cmdErrf(48, "NamespaceExists", "target namespace exists")
		}
		dropped = &t.uuid
		if fdb == tdb {
			// Within a database mongod logs one renameCollection entry
			// carrying dropTarget; the target's drop has no oplog entry of
			// its own (rename_collection.cpp renameCollectionAndDropTarget
			// drops it at the rename's optime), so streams see no drop
			// event, and a stream on the target sees the rename.
			delete(s.dbs[tdb].colls, tcoll)
		} else {
			s.dropColl(x, t)
		}
	}
	delete(s.dbs[fdb].colls, fcoll)
	if len(s.dbs[fdb].colls) == 0 && fdb != tdb {
		delete(s.dbs, fdb)
	}
	fromNS := c.ns
	c.db, c.name = tdb, tcoll
	c.ns = &evNS{db: tdb, coll: tcoll, uuid: c.uuid}
	d := s.dbs[tdb]
	if d == nil {
		d = &database{name: tdb, colls: map[string]*collection{}}
		s.dbs[tdb] = d
	}
	d.colls[tcoll] = c
	s.appendEvent(x, &event{op: "rename", evNS: fromNS, evExtra: &evExtra{toDB: tdb, toColl: tcoll, dropTarget: dropped}})
	return bson.D{}, nil
}

// indexSpecFields are the index specification fields mongod accepts
// (index_key_validate.h allowedFieldNames); any other is 197
// InvalidIndexSpecificationOption (validateIndexSpecFieldNames).
var indexSpecFields = map[string]bool{
	"key": true, "name": true, "v": true, "ns": true, "background": true, "unique": true,
	"sparse": true, "partialFilterExpression": true, "expireAfterSeconds": true,
	"collation": true, "hidden": true, "weights": true, "default_language": true,
	"language_override": true, "textIndexVersion": true, "2dsphereIndexVersion": true,
	"bits": true, "min": true, "max": true, "coarsestIndexedLevel": true,
	"finestIndexedLevel": true, "wildcardProjection": true, "columnstoreProjection": true,
	"columnstoreCompressor": true, "storageEngine": true, "dropDups": true,
	"originalSpec": true, "prepareUnique": true, "clustered": true, "_id": true,
}
