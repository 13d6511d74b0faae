package mongotest

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// oplogColl is the replica set's oplog, local.oplog.rs.
const oplogColl = "oplog.rs"

// findOplog answers a find on local.oplog.rs from the change history: one
// entry per retained event, oldest first, as mongod's capped oplog holds
// them. It serves the reads a client makes to measure the oplog's window:
// {$natural: 1} or {$natural: -1} order (or none: natural order), no
// filter, a limit, a projection. Anything else is refused plainly rather
// than answered wrongly. The entries carry ts, t, v, op, ns, wall and an
// empty o: the history keeps no oplog-shaped documents, and the window
// needs only ts and wall.
func findOplog(x *cmdCtx) (bson.D, error) {
	if f := x.doc("filter"); len(f) > 0 {
		return nil, cmdErrf(2, "BadValue", "mongotest serves local.oplog.rs without a filter only")
	}
	reverse := false
	for _, e := range x.doc("sort") {
		n, ok := toInt64(e.Value)
		if e.Key != "$natural" || !ok || (n != 1 && n != -1) {
			return nil, cmdErrf(2, "BadValue", "mongotest sorts local.oplog.rs by {$natural: 1} or {$natural: -1} only")
		}
		reverse = n == -1
	}
	var limit int64
	single := x.boolOpt("singleBatch")
	if v, ok := x.get("limit"); ok {
		limit, _ = toInt64(v)
		if limit < 0 {
			limit, single = -limit, true
		}
	}
	var project func(bson.D) (bson.D, error)
	if p := x.doc("projection"); len(p) > 0 {
		var err error
		if project, err = compileProjection(p, x.ec, true); err != nil {
			return nil, err
		}
	}
	bs, err := batchSizeOf(x.cmd, "batchSize")
	if err != nil {
		return nil, err
	}
	entries := x.s.oplogEntries(reverse, limit)
	items := make([]rawDoc, 0, len(entries))
	for _, d := range entries {
		if project != nil {
			if d, err = project(d); err != nil {
				return nil, err
			}
		}
		items = append(items, rawDoc(encodeDoc(d)))
	}
	return x.s.cursorReply(nsString(x.db, oplogColl), items, bs, single), nil
}

// oplogEntries returns up to limit (0: all) retained events as oplog
// entries, newest first when reverse.
func (s *Server) oplogEntries(reverse bool, limit int64) []bson.D {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := int64(len(s.oplog))
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]bson.D, 0, n)
	for k := int64(0); k < n; k++ {
		i := k
		if reverse {
			i = int64(len(s.oplog)) - 1 - k
		}
		out = append(out, oplogEntry(s.oplog[i]))
	}
	return out
}

// oplogEntry is ev as mongod writes it to the oplog (op i/u/d/n/c).
func oplogEntry(ev *event) bson.D {
	op, ns := "c", ""
	switch ev.op {
	case "insert":
		op = "i"
	case "update", "replace":
		op = "u"
	case "delete":
		op = "d"
	case opNoop:
		op = "n"
	}
	if ev.evNS != nil && ev.db != "" {
		ns = ev.db + "." + ev.coll
	}
	return bson.D{
		{Key: "op", Value: op},
		{Key: "ns", Value: ns},
		{Key: "o", Value: bson.D{}},
		{Key: "ts", Value: ev.ts},
		{Key: "t", Value: int64(1)},
		{Key: "v", Value: int64(2)},
		{Key: "wall", Value: ev.wall},
	}
}
