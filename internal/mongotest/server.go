package mongotest

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/wiremessage"
)

// Options configures a Server.
type Options struct {
	// Addr is the address to listen on; "" means 127.0.0.1:0.
	Addr string
	// HistorySize is how many change events are kept for change streams;
	// 0 means DefaultHistorySize.
	HistorySize int
	// Logf, when set, receives a line per connection and per failed command.
	Logf func(format string, args ...any)
	// NoopInterval is how often an idle server writes a no-op to its
	// history, as mongod's periodic no-op writer does every
	// periodicNoopIntervalSecs (10 s) when nothing else was written in the
	// interval (src/mongo/db/repl/noop_writer.cpp, "Writing noop to oplog
	// as there has been no writes to this replica set in over ..."). The
	// no-op is seen by no change stream, but it advances the cluster time,
	// operationTime and every stream's postBatchResumeToken, and it takes a
	// history slot. 0 means DefaultNoopInterval; negative disables it.
	// AdvanceClock by at least the interval writes one at once (the real
	// writer would have run during the skipped time).
	NoopInterval time.Duration
	// CursorTimeout is how long a cursor may sit idle (no getMore) before
	// the server kills it, as mongod's cursorTimeoutMillis (10 minutes);
	// measured on the server clock, so AdvanceClock ages cursors. Change
	// stream cursors time out too. 0 means DefaultCursorTimeout; negative
	// means never. find's noCursorTimeout exempts a cursor.
	CursorTimeout time.Duration
	// Version is the MongoDB version the server answers as, "major.minor.patch"
	// from 6.0.0 to 8.0.x; "" means DefaultVersion. It sets buildInfo's and
	// serverStatus's version, hello's maxWireVersion (17 for 6.0, 21 for
	// 7.0, 25 for 8.0) and the featureCompatibilityVersion, and whether
	// $changeStreamSplitLargeEvent exists: from 7.0 and 6.0.9 on (MongoDB's
	// manual, $changeStreamSplitLargeEvent: "New in MongoDB 7.0 (and
	// 6.0.9)"); before, it is an unknown stage (40324). Nothing else
	// changes with it: the server keeps the behaviour of DefaultVersion.
	Version string
	// Standalone makes the server answer as a standalone mongod (one
	// started without --replSet) instead of a replica set primary: hello
	// has no setName, hosts, primary, me, setVersion or electionId;
	// replies carry no $clusterTime or operationTime; $changeStream is
	// refused with 40573 ("The $changeStream stage is only supported on
	// replica sets"); a command with a txnNumber (a transaction; the
	// driver sends no retryable writes to a standalone) is refused with 20
	// IllegalOperation; write concern w 0, 1 and "majority" are accepted
	// and w above 1 or a tag refused with 2 BadValue; read concern
	// linearizable, afterClusterTime and atClusterTime are 123
	// NotAReplicaSet, majority reads as local; replSetGetStatus is
	// 76 NoReplicationEnabled; serverStatus has no repl section; no
	// periodic no-op is written (there is no oplog). URI then names no
	// replica set.
	Standalone bool
	// NoExpressions makes the server refuse what FerretDB 1.24.2 (SQLite
	// backend) refuses of the aggregation expression language, with its
	// answers: an update pipeline is 14 TypeMismatch ("BSON field
	// 'update.updates.u' is the wrong type 'array', expected type
	// 'object'") in update and 238 NotImplemented ("Aggregation pipelines
	// are not supported yet") in findAndModify; an expression operator
	// other than $sum and $type, in $expr or an aggregation stage, is 238
	// NotImplemented ("The operator $gt is not implemented yet"). FerretDB
	// prefixes the last with "Invalid $match :: caused by :: " (or the
	// stage's name) and judges $expr only on a document the rest of the
	// filter matched; here the whole command is refused at parse time.
	// findAndModify's projection ("fields") is refused too, 238
	// NotImplemented ("findAndModify: support for field \"fields\" with
	// value ... is not implemented yet"). A $type code of a type FerretDB
	// cannot store is refused: 238 NotImplemented ("Type code 19 not
	// implemented") for decimal, MinKey and MaxKey, 2 BadValue ("Invalid
	// numerical type code: 12") for undefined, DBPointer, JavaScript,
	// symbol and JavaScript with scope (FerretDB: when a document is
	// matched against it; here at parse time).
	NoExpressions bool
}

// DefaultVersion is the MongoDB version the server answers as unless
// Options.Version says another.
const DefaultVersion = "7.0.0"

// DefaultCursorTimeout is mongod's cursorTimeoutMillis default.
const DefaultCursorTimeout = 10 * time.Minute

// DefaultNoopInterval is mongod's periodicNoopIntervalSecs default.
const DefaultNoopInterval = 10 * time.Second

// DefaultHistorySize is the number of change events kept when
// Options.HistorySize is 0.
const DefaultHistorySize = 100000

// ReplicaSetName is the replica set name the server reports.
const ReplicaSetName = "rs0"

const (
	maxBSONSize = 16 * 1024 * 1024
	// maxInternalBSON is mongod's BSONObjMaxInternalSize (16 MB + 16 KB,
	// bsonobj.h): the largest document it builds for itself, such as a
	// change event; a larger one is 10334 BSONObjectTooLarge.
	maxInternalBSON = maxBSONSize + 16*1024
	maxMessageSize  = 48000000
	// maxBatchBytes is FindCommon::kMaxBytesToReturnToClientAtOnce (16
	// MB): a batch takes a document only while it stays within it, the
	// first document of a batch always.
	maxBatchBytes = 16 * 1024 * 1024
	// maxKeptBuffer bounds the request/reply buffers a connection keeps
	// for reuse.
	maxKeptBuffer = 64 * 1024 * 1024
)

// Server is a MongoDB-compatible test server: the primary of a one-node
// replica set, in memory.
type Server struct {
	opts Options
	ln   net.Listener
	addr string // advertised host:port
	// version is Options.Version: major, minor, patch.
	version [3]int

	mu     sync.RWMutex
	dbs    map[string]*database
	oplog  []*event
	seq    int64          // seq of the newest event
	lastTs bson.Timestamp // newest cluster time handed out
	// lostTs is the cluster time of the newest event trimmed from history.
	lostTs      bson.Timestamp
	lostSeq     int64
	historySize int
	// noopSeen is the newest seq the no-op writer saw at its last look.
	noopSeen int64
	notify   chan struct{}
	dirty    bool
	// written counts, by namespace, the writes appended to the history
	// and their payload bytes (serverStatus's mongotest.oplog; the write
	// lock guards it).
	written map[string]*nsWrites

	clockOffset atomic.Int64

	cursorMu   sync.Mutex
	cursors    map[int64]*cursor
	nextCursor int64
	// Counters of serverStatus's metrics.cursor: cursors registered (change
	// streams among them) and cursors killed for idling.
	cursorsOpened, streamsOpened, cursorsTimedOut int64

	randMu sync.Mutex
	rng    io.Reader

	connMu  sync.Mutex
	conns   map[*conn]struct{}
	connSeq int32

	fpMu sync.Mutex
	fps  map[string]*failPoint // by name: failCommand, failGetMoreAfterCursorCheckout
	// fpEntered counts the times each fail point fired, over every
	// configuration.
	fpEntered map[string]int64

	retryMu sync.Mutex
	retry   map[string]retryEntry

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type retryEntry struct {
	txn   int64
	reply bson.D
}

// Start listens and serves until Close.
func Start(opts Options) (*Server, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	version, err := parseVersion(opts.Version)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mongotest: listen: %w", err)
	}
	if opts.HistorySize <= 0 {
		opts.HistorySize = DefaultHistorySize
	}
	if opts.CursorTimeout == 0 {
		opts.CursorTimeout = DefaultCursorTimeout
	}
	if opts.NoopInterval == 0 {
		opts.NoopInterval = DefaultNoopInterval
	}
	s := &Server{
		opts:        opts,
		version:     version,
		ln:          ln,
		dbs:         map[string]*database{},
		historySize: opts.HistorySize,
		notify:      make(chan struct{}),
		cursors:     map[int64]*cursor{},
		nextCursor:  mrand.Int64N(1<<40) + 1000,
		rng:         rand.Reader,
		conns:       map[*conn]struct{}{},
		retry:       map[string]retryEntry{},
		fps:         map[string]*failPoint{},
		fpEntered:   map[string]int64{},
		closed:      make(chan struct{}),
	}
	s.addr = advertised(ln.Addr().(*net.TCPAddr), addr)
	// Seed the cluster clock, as the reference note §4.6 advises, so the
	// first replies carry a real timestamp.
	s.mu.Lock()
	s.tick()
	s.mu.Unlock()
	s.wg.Add(1)
	go s.acceptLoop()
	if opts.NoopInterval > 0 && !opts.Standalone {
		s.wg.Add(1)
		go s.noopLoop()
	}
	return s, nil
}

// parseVersion reads Options.Version.
func parseVersion(v string) ([3]int, error) {
	var out [3]int
	parts := strings.Split(v, ".")
	ok := len(parts) == 3
	for i := 0; ok && i < 3; i++ {
		n, err := strconv.Atoi(parts[i])
		ok = err == nil && n >= 0
		out[i] = n
	}
	if !ok || out[0] < 6 || out[0] > 8 || out[0] == 6 && out[1] != 0 || out[0] == 8 && out[1] != 0 || out[0] == 7 && out[1] != 0 {
		return out, fmt.Errorf("mongotest: Version %q: want 6.0.x, 7.0.x or 8.0.x", v)
	}
	return out, nil
}

// versionString is the version as buildInfo gives it.
func (s *Server) versionString() string {
	return fmt.Sprintf("%d.%d.%d-mongotest", s.version[0], s.version[1], s.version[2])
}

// maxWireVersion is hello's for the version (wire_version.h: 17 is 6.0,
// 21 is 7.0, 25 is 8.0).
func (s *Server) maxWireVersion() int32 {
	switch s.version[0] {
	case 6:
		return 17
	case 8:
		return 25
	}
	return 21
}

// splitsLargeEvents says whether the version has $changeStreamSplitLargeEvent.
func (s *Server) splitsLargeEvents() bool {
	return s.version[0] > 6 || s.version[2] >= 9
}

// noopLoop is mongod's periodic no-op writer: every NoopInterval, if
// nothing was written since the last look, it writes a no-op
// (noop_writer.cpp _writeNoop compares lastAppliedOpTime with the last
// known one).
func (s *Server) noopLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.NoopInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			s.lockWrite()
			if s.seq == s.noopSeen {
				s.appendNoop()
			}
			s.noopSeen = s.seq
			s.unlockWrite()
		}
	}
}

// appendNoop writes a no-op entry (caller holds the write lock).
func (s *Server) appendNoop() {
	s.appendEvent(nil, &event{op: opNoop, evNS: noopNS})
}

// advertised is the host:port put in hello's hosts/primary/me: the address
// the client is told to use, which the driver requires to match its seed
// (reference note §0.4). A wildcard listen address is advertised as
// 127.0.0.1.
func advertised(a *net.TCPAddr, requested string) string {
	host, _, _ := net.SplitHostPort(requested)
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(a.Port))
}

// URI returns a connection string for the driver:
// mongodb://127.0.0.1:PORT/?replicaSet=rs0. No directConnection is needed:
// hello advertises exactly this host:port in hosts/primary/me, so the
// driver's replica-set discovery keeps the seed (reference note §0.4).
func (s *Server) URI() string {
	if s.opts.Standalone {
		return "mongodb://" + s.addr + "/"
	}
	return "mongodb://" + s.addr + "/?replicaSet=" + ReplicaSetName
}

// Addr returns the host:port the server listens on (and advertises).
func (s *Server) Addr() string { return s.addr }

// Close stops the server and closes every connection. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.ln.Close()
		s.DropConnections()
	})
	s.wg.Wait()
	return nil
}

// Now returns the server clock: the wall clock moved by AdvanceClock.
func (s *Server) Now() time.Time {
	return time.Now().Add(time.Duration(s.clockOffset.Load()))
}

// AdvanceClock moves the server clock forward by d: $$NOW, $currentDate,
// wallTime, localTime and the seconds of new cluster times follow it.
//
// With the no-op writer on, a move of at least NoopInterval writes one
// no-op at the new time, as the writer would have while that time passed
// (on an idle server): operationTime and postBatchResumeTokens advance.
func (s *Server) AdvanceClock(d time.Duration) {
	if d <= 0 {
		return
	}
	s.clockOffset.Add(int64(d))
	if iv := s.opts.NoopInterval; iv > 0 && d >= iv {
		s.lockWrite()
		s.appendNoop()
		s.noopSeen = s.seq
		s.unlockWrite()
	}
}

// DropConnections closes every open client connection, as a network blip
// or a primary stepping down would. The server keeps listening.
func (s *Server) DropConnections() {
	s.connMu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connMu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// SetHistorySize trims the change history to the newest n events now and
// keeps at most n from now on. Opening or resuming a change stream from
// before the kept history fails with 286 ChangeStreamHistoryLost; an open
// stream overtaken by the trim fails its next getMore with 136
// CappedPositionLost, as mongod's oplog scan does.
func (s *Server) SetHistorySize(n int) {
	if n < 0 {
		n = 0
	}
	s.lockWrite()
	s.historySize = n
	before := s.lostSeq
	s.trimHistory()
	// Wake waiting getMores: a stream left behind fails now with 286.
	s.dirty = s.dirty || s.lostSeq != before
	s.unlockWrite()
}

// FailCommand configures a fail point, exactly like the configureFailPoint
// command's document: {configureFailPoint: "failCommand", mode: ..., data:
// {...}} (or "failGetMoreAfterCursorCheckout"). Without the leading
// configureFailPoint field it configures failCommand.
func (s *Server) FailCommand(spec bson.D) {
	d, _ := normalize(spec).(bson.D)
	if err := s.configureFailPoint(d); err != nil {
		panic("mongotest: FailCommand: " + err.Error())
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

func (s *Server) now() bson.DateTime {
	return bson.DateTime(s.Now().UnixMilli())
}

// tick advances the cluster clock (caller holds s.mu for writing).
func (s *Server) tick() bson.Timestamp {
	t := uint32(s.Now().Unix())
	if t > s.lastTs.T {
		s.lastTs = bson.Timestamp{T: t, I: 1}
	} else {
		s.lastTs.I++
	}
	return s.lastTs
}

func (s *Server) clusterTime() bson.Timestamp {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastTs
}

func (s *Server) newID() bson.ObjectID {
	return bson.NewObjectIDFromTimestamp(s.Now())
}

// ---- connections and the wire protocol ----

type conn struct {
	rbuf   []byte // request buffer, reused
	wbuf   []byte // reply buffer, reused
	s      *Server
	nc     net.Conn
	id     int32
	app    string
	done   chan struct{}
	once   sync.Once
	wmu    sync.Mutex
	closed atomic.Bool
}

func (c *conn) close() {
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.done)
		c.nc.Close()
	})
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		s.connMu.Lock()
		s.connSeq++
		c := &conn{s: s, nc: nc, id: s.connSeq, done: make(chan struct{})}
		select {
		case <-s.closed:
			s.connMu.Unlock()
			nc.Close()
			return
		default:
		}
		s.conns[c] = struct{}{}
		s.connMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.logf("mongotest: connection %d from %s", c.id, nc.RemoteAddr())
			defer s.logf("mongotest: connection %d closed", c.id)
			s.serve(c)
			c.close()
			s.connMu.Lock()
			delete(s.conns, c)
			s.connMu.Unlock()
		}()
	}
}

func (s *Server) serve(c *conn) {
	r := bufio.NewReaderSize(c.nc, 64*1024)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		length := int32(binary.LittleEndian.Uint32(hdr[:]))
		if length < 16 || length > maxMessageSize {
			return
		}
		// The request buffer is reused for the connection's next message:
		// nothing a command keeps refers into it (inserted documents and
		// decoded values are copies).
		var msg []byte
		if cap(c.rbuf) >= int(length) {
			msg = c.rbuf[:length]
		} else {
			msg = make([]byte, length)
			if length <= maxKeptBuffer {
				c.rbuf = msg
			}
		}
		copy(msg, hdr[:])
		if _, err := io.ReadFull(r, msg[4:]); err != nil {
			return
		}
		if !s.handleMessage(c, msg) {
			return
		}
	}
}

// handleMessage processes one request; false closes the connection.
func (s *Server) handleMessage(c *conn, msg []byte) bool {
	_, reqID, _, op, body, ok := wiremessage.ReadHeader(msg)
	if !ok {
		return false
	}
	if op == wiremessage.OpCompressed {
		orig, rem, ok := wiremessage.ReadCompressedOriginalOpCode(body)
		if !ok {
			return false
		}
		_, rem, ok = wiremessage.ReadCompressedUncompressedSize(rem)
		if !ok {
			return false
		}
		id, rem, ok := wiremessage.ReadCompressedCompressorID(rem)
		if !ok || id != wiremessage.CompressorNoOp {
			return false
		}
		op, body = orig, rem
	}
	switch op {
	case wiremessage.OpQuery:
		return s.handleQuery(c, reqID, body)
	case wiremessage.OpMsg:
		return s.handleMsg(c, reqID, body)
	}
	return false
}

// handleQuery serves the legacy OP_QUERY handshake (the driver's first
// message on each connection, reference note §1.1). Only hello/isMaster are
// accepted, as on MongoDB 5.1+ (code 352 otherwise).
func (s *Server) handleQuery(c *conn, reqID int32, body []byte) bool {
	_, rem, ok := wiremessage.ReadQueryFlags(body)
	if !ok {
		return false
	}
	_, rem, ok = wiremessage.ReadQueryFullCollectionName(rem)
	if !ok {
		return false
	}
	_, rem, ok = wiremessage.ReadQueryNumberToSkip(rem)
	if !ok {
		return false
	}
	_, rem, ok = wiremessage.ReadQueryNumberToReturn(rem)
	if !ok {
		return false
	}
	q, _, ok := wiremessage.ReadQueryQuery(rem)
	if !ok {
		return false
	}
	cmd, err := decodeDoc(q)
	if err != nil {
		return false
	}
	if inner, ok := docGet(cmd, "$query"); ok {
		if d, ok := inner.(bson.D); ok {
			cmd = d
		}
	}
	var reply bson.D
	name := ""
	if len(cmd) > 0 {
		name = cmd[0].Key
	}
	switch name {
	case "hello", "isMaster", "ismaster":
		reply = s.withClusterTime(s.helloReply(c, cmd, name != "hello"), bson.Timestamp{})
	default:
		reply = s.withClusterTime(errorReply(cmdErrf(352, "UnsupportedOpQueryCommand", "Unsupported OP_QUERY command: %s. The client driver may require an upgrade.", name)), bson.Timestamp{})
	}
	doc := encodeDoc(reply)
	idx, out := wiremessage.AppendHeaderStart(make([]byte, 0, len(doc)+36), wiremessage.NextRequestID(), reqID, wiremessage.OpReply)
	out = wiremessage.AppendReplyFlags(out, wiremessage.AwaitCapable)
	out = wiremessage.AppendReplyCursorID(out, 0)
	out = wiremessage.AppendReplyStartingFrom(out, 0)
	out = wiremessage.AppendReplyNumberReturned(out, 1)
	out = append(out, doc...)
	out = bsoncore.UpdateLength(out, idx, int32(len(out[idx:])))
	return c.write(out)
}

func (c *conn) write(b []byte) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err == nil
}

// handleMsg serves OP_MSG (source/message/OP_MSG.md): one kind-0 body,
// kind-1 document sequences merged into it as arrays.
func (s *Server) handleMsg(c *conn, reqID int32, body []byte) bool {
	flags, rem, ok := wiremessage.ReadMsgFlags(body)
	if !ok {
		return false
	}
	if flags&wiremessage.ChecksumPresent != 0 {
		if len(rem) < 4 {
			return false
		}
		rem = rem[:len(rem)-4]
	}
	var cmdRaw []byte
	type seq struct {
		id   string
		docs []bsoncore.Document
	}
	var seqs []seq
	for len(rem) > 0 {
		st, r, ok := wiremessage.ReadMsgSectionType(rem)
		if !ok {
			return false
		}
		switch st {
		case wiremessage.SingleDocument:
			doc, r2, ok := wiremessage.ReadMsgSectionSingleDocument(r)
			if !ok || cmdRaw != nil {
				return false
			}
			cmdRaw, rem = doc, r2
		case wiremessage.DocumentSequence:
			id, docs, r2, ok := wiremessage.ReadMsgSectionDocumentSequence(r)
			if !ok {
				return false
			}
			seqs = append(seqs, seq{id, docs})
			rem = r2
		default:
			// Unknown section kind: "MUST result in an error and the socket MUST be closed".
			return false
		}
	}
	if cmdRaw == nil {
		return false
	}
	cmd, err := decodeDoc(cmdRaw)
	if err != nil {
		return false
	}
	for _, sq := range seqs {
		arr := make(bson.A, len(sq.docs))
		for i, d := range sq.docs {
			arr[i] = rawDoc(d)
		}
		cmd = append(cmd, bson.E{Key: sq.id, Value: arr})
	}
	reply, closeConn := s.runCommand(c, cmd)
	if closeConn {
		return false
	}
	if flags&wiremessage.MoreToCome != 0 {
		return true // unacknowledged write: no reply
	}
	// Encode straight into the connection's reply buffer, sized from the
	// reply's documents, so a batch of large documents is copied once.
	out := c.wbuf[:0]
	if need := sizeHint(reply) + 64; cap(out) < need {
		out = make([]byte, 0, need)
	}
	idx, out := wiremessage.AppendHeaderStart(out, wiremessage.NextRequestID(), reqID, wiremessage.OpMsg)
	out = wiremessage.AppendMsgFlags(out, 0)
	out = wiremessage.AppendMsgSectionType(out, wiremessage.SingleDocument)
	out = appendDoc(out, reply)
	out = bsoncore.UpdateLength(out, idx, int32(len(out[idx:])))
	if cap(out) <= maxKeptBuffer {
		c.wbuf = out[:0]
	}
	return c.write(out)
}

// ---- errors ----

// cmdError is a command error as the server shapes it
// ({ok: 0, errmsg, code (int32), codeName, errorLabels}).
type cmdError struct {
	code   int32
	name   string
	msg    string
	labels []string
	extra  bson.D
}

func (e *cmdError) Error() string { return fmt.Sprintf("(%s) %s", e.name, e.msg) }

func cmdErrf(code int32, name, format string, args ...any) error {
	return &cmdError{code: code, name: name, msg: fmt.Sprintf(format, args...)}
}

func errorReply(err error) bson.D {
	var ce *cmdError
	if !errors.As(err, &ce) {
		ce = &cmdError{code: 1, name: "InternalError", msg: err.Error()}
	}
	d := bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: ce.msg}, {Key: "code", Value: ce.code}, {Key: "codeName", Value: ce.name}}
	d = append(d, ce.extra...)
	if len(ce.labels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: ce.labels})
	}
	return d
}

func (s *Server) withClusterTime(reply bson.D, opTime bson.Timestamp) bson.D {
	// A standalone mongod gossips no cluster time and reports no
	// operationTime: only replica set members and mongos keep a logical
	// clock (the driver's causal consistency spec: "a standalone server
	// does not report operationTime").
	if s.opts.Standalone {
		return reply
	}
	ct := s.clusterTime()
	if opTime.T == 0 {
		opTime = ct
	}
	return append(reply,
		bson.E{Key: "$clusterTime", Value: bson.D{
			{Key: "clusterTime", Value: ct},
			{Key: "signature", Value: bson.D{{Key: "hash", Value: bson.Binary{Subtype: 0, Data: make([]byte, 20)}}, {Key: "keyId", Value: int64(0)}}},
		}},
		bson.E{Key: "operationTime", Value: opTime},
	)
}

// ---- hello ----

func (s *Server) helloReply(c *conn, cmd bson.D, legacy bool) bson.D {
	if cl, ok := docGet(cmd, "client"); ok {
		if cd, ok := cl.(bson.D); ok {
			if app, ok := docGet(cd, "application"); ok {
				if ad, ok := app.(bson.D); ok {
					if n, ok := docGet(ad, "name"); ok {
						c.app, _ = n.(string)
					}
				}
			}
		}
	}
	primaryKey := "isWritablePrimary"
	if legacy {
		primaryKey = "ismaster"
	}
	// topologyVersion and compression are deliberately omitted (reference
	// note §0.2, §0.7): without topologyVersion the driver polls instead of
	// streaming awaitable hellos.
	var member bson.D
	if s.opts.Standalone {
		// A standalone's hello says nothing of a replica set: it is
		// writable, and the driver takes a hello without setName (and
		// without msg "isdbgrid") for a standalone.
		member = bson.D{{Key: primaryKey, Value: true}}
	} else {
		member = bson.D{
			{Key: "hosts", Value: bson.A{s.addr}},
			{Key: "setName", Value: ReplicaSetName},
			{Key: "setVersion", Value: int32(1)},
			{Key: primaryKey, Value: true},
			{Key: "secondary", Value: false},
			{Key: "primary", Value: s.addr},
			{Key: "me", Value: s.addr},
			{Key: "electionId", Value: bson.ObjectID{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}},
		}
	}
	return append(member, bson.D{
		{Key: "helloOk", Value: true},
		{Key: "maxBsonObjectSize", Value: int32(maxBSONSize)},
		{Key: "maxMessageSizeBytes", Value: int32(maxMessageSize)},
		{Key: "maxWriteBatchSize", Value: int32(100000)},
		{Key: "localTime", Value: s.now()},
		{Key: "logicalSessionTimeoutMinutes", Value: int32(30)},
		{Key: "connectionId", Value: c.id},
		{Key: "minWireVersion", Value: int32(0)},
		{Key: "maxWireVersion", Value: s.maxWireVersion()},
		{Key: "readOnly", Value: false},
		{Key: "ok", Value: 1.0},
	}...)
}
