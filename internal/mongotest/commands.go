package mongotest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// cmdCtx is one command being run.
type cmdCtx struct {
	s      *Server
	c      *conn
	cmd    bson.D
	name   string
	db     string
	ec     *evalCtx
	opTime bson.Timestamp
}

func (x *cmdCtx) get(key string) (any, bool) { return docGet(x.cmd, key) }

func (x *cmdCtx) str(key string) string {
	v, _ := docGet(x.cmd, key)
	s, _ := v.(string)
	return s
}

func (x *cmdCtx) boolOpt(key string) bool {
	v, _ := docGet(x.cmd, key)
	return truthy(v)
}

func (x *cmdCtx) doc(key string) bson.D {
	v, _ := docGet(x.cmd, key)
	d, _ := v.(bson.D)
	return d
}

// collName returns the collection named by the command's first field.
func (x *cmdCtx) collName() (string, error) {
	v := x.cmd[0].Value
	s, ok := v.(string)
	if !ok || s == "" {
		return "", cmdErrf(73, "InvalidNamespace", "collection name has invalid type %s", typeName(v))
	}
	return s, nil
}

type handler func(x *cmdCtx) (bson.D, error)

var commands map[string]handler

func init() {
	commands = map[string]handler{
		"hello":              cmdHello,
		"isMaster":           cmdHello,
		"ismaster":           cmdHello,
		"ping":               func(*cmdCtx) (bson.D, error) { return bson.D{}, nil },
		"buildInfo":          cmdBuildInfo,
		"buildinfo":          cmdBuildInfo,
		"endSessions":        func(*cmdCtx) (bson.D, error) { return bson.D{}, nil },
		"killAllSessions":    func(*cmdCtx) (bson.D, error) { return bson.D{}, nil },
		"refreshSessions":    func(*cmdCtx) (bson.D, error) { return bson.D{}, nil },
		"startSession":       cmdStartSession,
		"getParameter":       cmdGetParameter,
		"serverStatus":       cmdServerStatus,
		"replSetGetStatus":   cmdReplSetGetStatus,
		"listDatabases":      cmdListDatabases,
		"insert":             cmdInsert,
		"update":             cmdUpdate,
		"delete":             cmdDelete,
		"findAndModify":      cmdFindAndModify,
		"findandmodify":      cmdFindAndModify,
		"find":               cmdFind,
		"getMore":            cmdGetMore,
		"killCursors":        cmdKillCursors,
		"count":              cmdCount,
		"distinct":           cmdDistinct,
		"aggregate":          cmdAggregate,
		"listCollections":    cmdListCollections,
		"listIndexes":        cmdListIndexes,
		"createIndexes":      cmdCreateIndexes,
		"dropIndexes":        cmdDropIndexes,
		"create":             cmdCreate,
		"collMod":            cmdCollMod,
		"drop":               cmdDrop,
		"dropDatabase":       cmdDropDatabase,
		"renameCollection":   cmdRenameCollection,
		"configureFailPoint": cmdConfigureFailPoint,
		"waitForFailPoint":   cmdWaitForFailPoint,
		"abortTransaction":   cmdNoTransactions,
		"commitTransaction":  cmdNoTransactions,
		"dbStats":            cmdDBStats,
		"collStats":          cmdCollStats,
		"whatsmyuri":         func(x *cmdCtx) (bson.D, error) { return bson.D{{Key: "you", Value: x.c.nc.RemoteAddr().String()}}, nil },
		"getLastError":       func(*cmdCtx) (bson.D, error) { return bson.D{{Key: "err", Value: nil}}, nil },
		"saslStart":          cmdNoAuth,
		"saslContinue":       cmdNoAuth,
		"authenticate":       cmdNoAuth,
	}
}

var retryableWrites = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true}

// runCommand runs one OP_MSG command and returns the reply; closeConn asks
// the caller to drop the connection without replying (failCommand
// closeConnection).
func (s *Server) runCommand(c *conn, cmd bson.D) (bson.D, bool) {
	if len(cmd) == 0 {
		return s.withClusterTime(errorReply(cmdErrf(59, "CommandNotFound", "no command given")), bson.Timestamp{}), false
	}
	name := cmd[0].Key
	db, _ := docGet(cmd, "$db")
	dbName, _ := db.(string)
	if dbName == "" {
		dbName = "admin"
	}
	x := &cmdCtx{s: s, c: c, cmd: cmd, name: name, db: dbName}
	// Every command's database is checked before it runs
	// (service_entry_point_common.cpp _initiateCommand; a $ is allowed
	// there, for commands on "$external").
	if strings.ContainsAny(dbName, "/\\. \"\x00") {
		return s.withClusterTime(errorReply(cmdErrf(73, "InvalidNamespace", "Invalid database name: '%s'", dbName)), bson.Timestamp{}), false
	}

	// failCommand is evaluated before the command runs, as in mongod
	// (CommandHelpers::evaluateFailCommandFailPoint).
	fpAction := s.checkFailPoint(fpFailCommand, c, x)
	if fpAction != nil {
		if fpAction.blockMS > 0 {
			select {
			case <-time.After(time.Duration(fpAction.blockMS) * time.Millisecond):
			case <-c.done:
				return nil, true
			}
		}
		if fpAction.closeConn {
			return nil, true
		}
		if fpAction.err != nil {
			ce := fpAction.err.(*cmdError)
			if fpAction.hasLabel {
				ce.labels = fpAction.labels
			} else {
				ce.labels = errorLabels(x, &ce.code, nil, opensChangeStream(x))
			}
			return s.withClusterTime(errorReply(ce), bson.Timestamp{}), false
		}
	}

	h := commands[name]
	if h == nil {
		return s.withClusterTime(errorReply(cmdErrf(59, "CommandNotFound", "no such command: '%s'", name)), bson.Timestamp{}), false
	}
	if _, ok := docGet(cmd, "txnNumber"); ok && s.opts.Standalone {
		// mongod refuses transaction numbers before running the command
		// when it is not a replica set member
		// (service_entry_point_common.cpp).
		return s.withClusterTime(errorReply(cmdErrf(20, "IllegalOperation", "Transaction numbers are only allowed on a replica set member or mongos")), bson.Timestamp{}), false
	}
	if err := standaloneReadConcern(s, x); err != nil {
		return s.withClusterTime(errorReply(err), bson.Timestamp{}), false
	}
	if v, ok := docGet(cmd, "startTransaction"); ok && truthy(v) {
		return s.withClusterTime(errorReply(cmdErrf(20, "IllegalOperation", "mongotest does not support multi-document transactions")), bson.Timestamp{}), false
	}
	wcErr, err := checkWriteConcern(x)
	if err != nil {
		return s.withClusterTime(errorReply(err), bson.Timestamp{}), false
	}

	// Retryable writes: a retried statement (same lsid and txnNumber) gets
	// the stored reply instead of running twice (retryable-writes spec).
	var retryKey string
	var txn int64
	if retryableWrites[name] {
		if t, ok := docGet(cmd, "txnNumber"); ok {
			txn, _ = toInt64(t)
			if l, ok := docGet(cmd, "lsid"); ok {
				if ld, ok := l.(bson.D); ok {
					if id, ok := docGet(ld, "id"); ok {
						if b, ok := id.(bson.Binary); ok {
							retryKey = string(b.Data)
						}
					}
				}
			}
		}
	}
	var reply bson.D
	if retryKey != "" {
		s.retryMu.Lock()
		e, ok := s.retry[retryKey]
		s.retryMu.Unlock()
		if ok && e.txn == txn {
			reply = append(bson.D{}, e.reply...)
		}
	}

	if reply == nil {
		x.ec = &evalCtx{now: s.now(), clusterTime: s.clusterTime(), noExpr: s.opts.NoExpressions}
		var err error
		reply, err = h(x)
		if err != nil {
			s.logf("mongotest: %s: %v", name, err)
			var ce *cmdError
			if errors.As(err, &ce) && ce.labels == nil {
				ce.labels = errorLabels(x, &ce.code, nil, opensChangeStream(x))
			}
			return s.withClusterTime(errorReply(err), x.opTime), false
		}
		reply = append(reply, bson.E{Key: "ok", Value: 1.0})
		s.noteOrigin(reply, cmd)
		// The stored reply has no write concern error: a retry waits for
		// the write concern anew (it is not part of the statement's
		// outcome).
		if retryKey != "" {
			s.retryMu.Lock()
			s.retry[retryKey] = retryEntry{txn: txn, reply: reply}
			s.retryMu.Unlock()
		}
	}
	// The write concern: failCommand's writeConcernError replaces the
	// wait (service_entry_point_common.cpp _waitForWriteConcern), else an
	// unsatisfiable one is reported; either way the write stands, and the
	// reply is labelled for the write concern error's code.
	wce, labels, hasLabel := wcErr, []string(nil), false
	if fpAction != nil && fpAction.wce != nil {
		wce, labels, hasLabel = fpAction.wce, fpAction.labels, fpAction.hasLabel
	}
	if wce != nil {
		reply = append(cloneShallow(reply), bson.E{Key: "writeConcernError", Value: wce})
		if !hasLabel {
			v, _ := docGet(wce, "code")
			c, _ := toInt64(v)
			code := int32(c)
			labels = errorLabels(x, nil, &code, false)
		}
		if len(labels) > 0 {
			reply = append(reply, bson.E{Key: "errorLabels", Value: labels})
		}
	}
	return s.withClusterTime(reply, x.opTime), false
}

// writeConcernCommands are the commands that wait for a write concern.
var writeConcernCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true,
	"create": true, "drop": true, "dropDatabase": true, "createIndexes": true, "dropIndexes": true,
	"collMod": true, "renameCollection": true,
}

// checkWriteConcern returns the writeConcernError a write with x's write
// concern gets from a one-node replica set: w above one member cannot be
// satisfied (100 UnsatisfiableWriteConcern, "Not enough data-bearing
// nodes", replica set config checkIfWriteConcernCanBeSatisfied), a w tag
// the configuration lacks is 79 UnknownReplWriteConcern; mongod still
// applies the write and reports it in writeConcernError. A malformed write
// concern fails the command (FailedToParse, write_concern_options.cpp).
func checkWriteConcern(x *cmdCtx) (bson.D, error) {
	v, ok := x.get("writeConcern")
	if !ok || !writeConcernCommands[x.name] {
		return nil, nil
	}
	wc, ok := v.(bson.D)
	if !ok {
		return nil, cmdErrf(14, "TypeMismatch", "BSON field 'writeConcern' is the wrong type '%s', expected type 'object'", typeName(v))
	}
	w, ok := docGet(wc, "w")
	if !ok {
		return nil, nil
	}
	if x.s.opts.Standalone {
		return nil, standaloneWriteConcern(w)
	}
	info := bson.D{{Key: "writeConcern", Value: append(append(bson.D{}, wc...), bson.E{Key: "provenance", Value: "clientSupplied"})}}
	switch wv := w.(type) {
	case string:
		if wv == "majority" {
			return nil, nil
		}
		return bson.D{{Key: "code", Value: int32(79)}, {Key: "codeName", Value: "UnknownReplWriteConcern"},
			{Key: "errmsg", Value: fmt.Sprintf("No write concern mode named '%s' found in replica set configuration", wv)},
			{Key: "errInfo", Value: info}}, nil
	default:
		n, ok := toInt64(w)
		if !ok {
			return nil, cmdErrf(9, "FailedToParse", "w has to be a number or string; found: %s", typeName(w))
		}
		if n < 0 || n > 50 {
			return nil, cmdErrf(9, "FailedToParse", "w has to be a non-negative number and not greater than 50; found: %d", n)
		}
		if n <= 1 {
			return nil, nil
		}
		return bson.D{{Key: "code", Value: int32(100)}, {Key: "codeName", Value: "UnsatisfiableWriteConcern"},
			{Key: "errmsg", Value: "Not enough data-bearing nodes"}, {Key: "errInfo", Value: info}}, nil
	}
}

// standaloneReadConcern refuses on a standalone the read concerns only a
// replica set serves: linearizable, afterClusterTime and atClusterTime are
// 123 NotAReplicaSet (src/mongo/db/read_concern_mongod.cpp,
// replication_coordinator_impl.cpp waitUntilOpTimeForRead); majority and
// local are read as local.
func standaloneReadConcern(s *Server, x *cmdCtx) error {
	if !s.opts.Standalone {
		return nil
	}
	rc, _ := x.get("readConcern")
	d, _ := rc.(bson.D)
	level, _ := docGet(d, "level")
	_, after := docGet(d, "afterClusterTime")
	_, at := docGet(d, "atClusterTime")
	if level == "linearizable" || after || at {
		return cmdErrf(123, "NotAReplicaSet", "node needs to be a replica set member to use read concern")
	}
	return nil
}

// standaloneWriteConcern is mongod's validateWriteConcern on a standalone
// (src/mongo/db/write_concern_options.cpp / write_concern.cpp): w 0, 1
// and "majority" are the one node and accepted; w above 1 and a tag fail
// the command with 2 BadValue before it runs, nothing applied.
func standaloneWriteConcern(w any) error {
	switch wv := w.(type) {
	case string:
		if wv == "majority" {
			return nil
		}
		return badValue("cannot use non-majority 'w' mode \"%s\" when a host is not a member of a replica set", wv)
	default:
		n, ok := toInt64(w)
		if !ok {
			return cmdErrf(9, "FailedToParse", "w has to be a number or string; found: %s", typeName(w))
		}
		if n < 0 || n > 50 {
			return cmdErrf(9, "FailedToParse", "w has to be a non-negative number and not greater than 50; found: %d", n)
		}
		if n > 1 {
			return badValue("cannot use 'w' > 1 when a host is not replicated")
		}
	}
	return nil
}

func cmdHello(x *cmdCtx) (bson.D, error) {
	r := x.s.helloReply(x.c, x.cmd, x.name != "hello")
	return r[:len(r)-1], nil // without ok; runCommand adds it
}

func cmdBuildInfo(x *cmdCtx) (bson.D, error) {
	v := x.s.version
	return bson.D{
		{Key: "version", Value: x.s.versionString()},
		{Key: "gitVersion", Value: "mongotest"},
		{Key: "versionArray", Value: bson.A{int32(v[0]), int32(v[1]), int32(v[2]), int32(0)}},
		{Key: "bits", Value: int32(64)},
		{Key: "debug", Value: false},
		{Key: "maxBsonObjectSize", Value: int32(maxBSONSize)},
		{Key: "storageEngines", Value: bson.A{"inMemory"}},
		{Key: "modules", Value: bson.A{}},
	}, nil
}

func cmdStartSession(x *cmdCtx) (bson.D, error) {
	var u [16]byte
	x.s.randMu.Lock()
	x.s.rng.Read(u[:])
	x.s.randMu.Unlock()
	return bson.D{{Key: "id", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: u[:]}}}}, {Key: "timeoutMinutes", Value: int32(30)}}, nil
}

func cmdGetParameter(x *cmdCtx) (bson.D, error) {
	out := bson.D{}
	for _, e := range x.cmd[1:] {
		if e.Key == "featureCompatibilityVersion" {
			out = append(out, bson.E{Key: e.Key, Value: bson.D{{Key: "version", Value: fmt.Sprintf("%d.%d", x.s.version[0], x.s.version[1])}}})
		}
	}
	return out, nil
}

func cmdServerStatus(x *cmdCtx) (bson.D, error) {
	out := bson.D{
		{Key: "host", Value: x.s.addr},
		{Key: "version", Value: x.s.versionString()},
		{Key: "process", Value: "mongod"},
		{Key: "localTime", Value: x.s.now()},
	}
	if !x.s.opts.Standalone {
		out = append(out, bson.E{Key: "repl", Value: bson.D{{Key: "setName", Value: ReplicaSetName}, {Key: "isWritablePrimary", Value: true}}})
	}
	out = append(out, bson.E{Key: "metrics", Value: x.s.cursorMetrics()})
	// mongotest's own: what each namespace's writes added to the
	// history, for benchmarks measuring what the sidecar costs MongoDB.
	return append(out, bson.E{Key: "mongotest", Value: bson.D{{Key: "oplog", Value: x.s.writeMetrics()}}}), nil
}

func cmdReplSetGetStatus(x *cmdCtx) (bson.D, error) {
	if x.s.opts.Standalone {
		return nil, cmdErrf(76, "NoReplicationEnabled", "not running with --replSet")
	}
	ts := x.s.clusterTime()
	return bson.D{
		{Key: "set", Value: ReplicaSetName},
		{Key: "date", Value: x.s.now()},
		{Key: "myState", Value: int32(1)},
		{Key: "members", Value: bson.A{bson.D{
			{Key: "_id", Value: int32(0)}, {Key: "name", Value: x.s.addr}, {Key: "health", Value: 1.0},
			{Key: "state", Value: int32(1)}, {Key: "stateStr", Value: "PRIMARY"}, {Key: "self", Value: true},
			{Key: "optime", Value: bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}}},
		}}},
	}, nil
}

// cmdNoAuth answers authentication attempts: the server has no users, so a
// URI with credentials fails clearly instead of with "no such command".
func cmdNoAuth(*cmdCtx) (bson.D, error) {
	return nil, cmdErrf(18, "AuthenticationFailed", "Authentication failed: mongotest has no users; connect without credentials")
}

func cmdNoTransactions(*cmdCtx) (bson.D, error) {
	return nil, cmdErrf(251, "NoSuchTransaction", "mongotest does not support multi-document transactions")
}

func cmdListDatabases(x *cmdCtx) (bson.D, error) {
	nameOnly := x.boolOpt("nameOnly")
	var filter *matcher
	if f := x.doc("filter"); len(f) > 0 {
		m, err := compileFilter(f, x.ec)
		if err != nil {
			return nil, err
		}
		filter = m
	}
	x.s.mu.RLock()
	defer x.s.mu.RUnlock()
	dbs := bson.A{}
	var total int64
	for _, name := range sortedKeys(x.s.dbs) {
		d := x.s.dbs[name]
		if len(d.colls) == 0 {
			continue
		}
		var size int64
		for _, c := range d.colls {
			for n := c.docs.first(); n != nil; n = n.next[0] {
				size += int64(len(n.raw))
			}
		}
		total += size
		entry := bson.D{{Key: "name", Value: name}}
		if !nameOnly {
			entry = append(entry, bson.E{Key: "sizeOnDisk", Value: size}, bson.E{Key: "empty", Value: size == 0})
		}
		if filter != nil && !filter.matches(entry) {
			continue
		}
		dbs = append(dbs, entry)
	}
	out := bson.D{{Key: "databases", Value: dbs}}
	if !nameOnly {
		out = append(out, bson.E{Key: "totalSize", Value: total}, bson.E{Key: "totalSizeMb", Value: total >> 20})
	}
	return out, nil
}

func cmdDBStats(x *cmdCtx) (bson.D, error) {
	x.s.mu.RLock()
	defer x.s.mu.RUnlock()
	var objects, size int64
	colls := 0
	if d := x.s.dbs[x.db]; d != nil {
		for _, c := range d.colls {
			colls++
			for n := c.docs.first(); n != nil; n = n.next[0] {
				objects++
				size += int64(len(n.raw))
			}
		}
	}
	return bson.D{{Key: "db", Value: x.db}, {Key: "collections", Value: int32(colls)}, {Key: "objects", Value: objects}, {Key: "dataSize", Value: float64(size)}}, nil
}

func cmdCollStats(x *cmdCtx) (bson.D, error) {
	name, err := x.collName()
	if err != nil {
		return nil, err
	}
	x.s.mu.RLock()
	defer x.s.mu.RUnlock()
	c := x.s.getColl(x.db, name)
	var count, size int64
	if c != nil {
		for n := c.docs.first(); n != nil; n = n.next[0] {
			count++
			size += int64(len(n.raw))
		}
	}
	return bson.D{{Key: "ns", Value: x.db + "." + name}, {Key: "count", Value: count}, {Key: "size", Value: size}}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// checkDBName applies mongod's NamespaceString::validDBName: not empty,
// under 64 bytes, none of / \ . space " $ or NUL.
func checkDBName(db string) error {
	if db == "" || len(db) >= 64 || strings.ContainsAny(db, "/\\. \"$\x00") {
		return cmdErrf(73, "InvalidNamespace", "Invalid database name: '%s'", db)
	}
	return nil
}

// checkCollName applies validCollectionName: not empty, no $ or NUL, not
// starting with a dot.
func checkCollName(db, coll string) error {
	if err := checkDBName(db); err != nil {
		return err
	}
	if coll == "" || strings.ContainsAny(coll, "$\x00") || strings.HasPrefix(coll, ".") {
		return cmdErrf(73, "InvalidNamespace", "Invalid collection name: %s.%s", db, coll)
	}
	return nil
}

func nsString(db, coll string) string { return fmt.Sprintf("%s.%s", db, coll) }
