package mongotest

import (
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// noteOrigin records the command that opened the cursor of reply, if it
// opened one: $currentOp shows it as the cursor's originatingCommand.
func (s *Server) noteOrigin(reply bson.D, cmd bson.D) {
	cv, _ := docGet(reply, "cursor")
	cd, _ := cv.(bson.D)
	idv, _ := docGet(cd, "id")
	id, _ := idv.(int64)
	if id == 0 {
		return
	}
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	if cur := s.cursors[id]; cur != nil && cur.origin == nil {
		cur.origin = cmd
	}
}

// currentOp runs {aggregate: 1, pipeline: [{$currentOp: {...}}, ...]} on
// admin, as mongod's $currentOp stage (document_source_current_op.cpp)
// answers for what this server knows: the $currentOp command itself, each
// cursor a command is using (a getMore, such as a change stream's waiting
// for events) as an active "getmore" op with its cursor, and with
// idleCursors: true each idle cursor as type "idleCursor". Every entry's
// cursor holds cursorId, createdDate, noCursorTimeout, tailable,
// awaitData and originatingCommand (an idle one also lastAccessDate), so
// the change streams open on the server are the cursors whose
// originatingCommand's pipeline starts with $changeStream. Other commands
// running at the time are not listed.
func (s *Server) currentOp(x *cmdCtx, spec any, rest bson.A, batchSize int) (bson.D, error) {
	opts, ok := spec.(bson.D)
	if !ok {
		return nil, cmdErrf(9, "FailedToParse", "$currentOp options must be specified in an object, but found: %s", typeName(spec))
	}
	if _, isColl := x.cmd[0].Value.(string); isColl || x.db != "admin" {
		return nil, cmdErrf(73, "InvalidNamespace", "$currentOp must be run against the 'admin' database with {aggregate: 1}")
	}
	idle := false
	if v, ok := docGet(opts, "idleCursors"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, cmdErrf(9, "FailedToParse", "The 'idleCursors' parameter of the $currentOp stage must be a boolean value, but found: %s", typeName(v))
		}
		idle = b
	}
	stages, err := compilePipeline(rest, x.ec)
	if err != nil {
		return nil, err
	}
	docs := []bson.D{{
		{Key: "type", Value: "op"}, {Key: "host", Value: s.addr}, {Key: "active", Value: true},
		{Key: "op", Value: "command"}, {Key: "ns", Value: "admin.$cmd.aggregate"}, {Key: "command", Value: x.cmd},
	}}
	docs = append(docs, s.cursorOps(idle)...)
	docs, err = runStages(stages, docs)
	if err != nil {
		return nil, err
	}
	items := make([]rawDoc, len(docs))
	for i, d := range docs {
		items[i] = encodeDoc(d)
	}
	return s.cursorReply("admin.$cmd.aggregate", items, batchSize, false), nil
}

// cursorOps lists the cursors in use (and with idle, the idle ones) as
// $currentOp entries, by cursor id.
func (s *Server) cursorOps(idle bool) []bson.D {
	s.cursorMu.Lock()
	defer s.cursorMu.Unlock()
	ids := make([]int64, 0, len(s.cursors))
	for id := range s.cursors {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []bson.D
	for _, id := range ids {
		cur := s.cursors[id]
		info := bson.D{
			{Key: "cursorId", Value: cur.id},
			{Key: "createdDate", Value: bson.NewDateTimeFromTime(cur.created)},
			{Key: "noCursorTimeout", Value: cur.noTimeout},
			{Key: "tailable", Value: cur.stream != nil},
			{Key: "awaitData", Value: cur.stream != nil},
		}
		if cur.origin != nil {
			info = append(info, bson.E{Key: "originatingCommand", Value: cur.origin})
		}
		// A cursor a command holds is in use: TryLock never waits for a
		// blocking getMore.
		if !cur.mu.TryLock() {
			out = append(out, bson.D{
				{Key: "type", Value: "op"}, {Key: "host", Value: s.addr}, {Key: "active", Value: true},
				{Key: "op", Value: "getmore"}, {Key: "ns", Value: cur.ns},
				{Key: "command", Value: bson.D{{Key: "getMore", Value: cur.id}, {Key: "collection", Value: collOf(cur.ns)}}},
				{Key: "cursor", Value: info},
			})
			continue
		}
		last := cur.lastUsed
		expired := s.expired(cur)
		cur.mu.Unlock()
		if !idle || expired {
			continue
		}
		info = append(info, bson.E{Key: "lastAccessDate", Value: bson.NewDateTimeFromTime(last)})
		out = append(out, bson.D{
			{Key: "type", Value: "idleCursor"}, {Key: "host", Value: s.addr}, {Key: "ns", Value: cur.ns},
			{Key: "cursor", Value: info},
		})
	}
	return out
}

// collOf is the collection part of a namespace ("db.coll" -> "coll").
func collOf(ns string) string {
	for i := 0; i < len(ns); i++ {
		if ns[i] == '.' {
			return ns[i+1:]
		}
	}
	return ns
}
