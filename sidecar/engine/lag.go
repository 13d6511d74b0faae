package engine

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/status"
)

// The lag also counts what the stream has not read yet. The age of the
// oldest change delivered and not yet durable (status.JobStats) knows
// nothing of the changes still in the source's history: after a dropped
// connection, or while the stream reads a backlog, it says the job is
// current. So every lagInterval the follower asks the source for its
// latest cluster time (one ask a lagInterval for all the engine's jobs:
// the operationTime of a ping, which for a read at read concern "local"
// is the timestamp of the newest oplog entry:
// https://www.mongodb.com/docs/v6.2/reference/method/db.runCommand/,
// "Response"), and compares it with the cluster time everything is
// durable up to: the recorded position's, or, with nothing pending or in
// flight, the last token the stream read (its post-batch resume token
// when caught up). The difference, in whole seconds of cluster time, is
// the lag when it is 2 s or more; below that it is the timestamps' one-
// second resolution and a getMore's wait, not changes waiting. The job's
// lag is the larger of the two measures.

// unreadSlack is the least difference of cluster seconds counted as lag.
const unreadSlack = 2

// lagClock holds the cluster times the unread lag compares.
type lagClock struct {
	mu      sync.Mutex
	read    bson.Timestamp // of the last token the stream read
	durable bson.Timestamp // of the last position recorded
	latest  bson.Timestamp // the source's newest, last asked
}

func newLagClock(tok bson.Raw) *lagClock {
	c := &lagClock{}
	if ts, ok := tokenTime(tok); ok {
		c.read, c.durable = ts, ts
	}
	return c
}

// readTo notes the last token the stream read.
func (c *lagClock) readTo(tok bson.Raw) {
	if ts, ok := tokenTime(tok); ok {
		c.mu.Lock()
		if after(ts, c.read) {
			c.read = ts
		}
		c.mu.Unlock()
	}
}

// recorded notes the position just recorded.
func (c *lagClock) recorded(tok bson.Raw) {
	if ts, ok := tokenTime(tok); ok {
		c.mu.Lock()
		if after(ts, c.durable) {
			c.durable = ts
		}
		c.mu.Unlock()
	}
}

// unread is the lag in seconds of what the source holds beyond what is
// durable; idle says nothing is pending or in flight, so everything read
// is durable.
func (c *lagClock) unread(idle bool) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.durable
	if idle && after(c.read, d) {
		d = c.read
	}
	if c.latest.T == 0 || d.T == 0 || !after(c.latest, d) || c.latest.T-d.T < unreadSlack {
		return 0
	}
	return float64(c.latest.T - d.T)
}

func after(a, b bson.Timestamp) bool { return a.T > b.T || (a.T == b.T && a.I > b.I) }

// tokenTime is the cluster time a change stream resume token begins with:
// its _data (a hex string since MongoDB 4.2, BinData before) is a
// KeyString whose first value is the event's clusterTime, a timestamp
// (canonical type 130) of 4 bytes of seconds and 4 of increment, big
// endian. (src/mongo/db/pipeline/resume_token.cpp; the drivers' own
// decoders read it so.)
func tokenTime(tok bson.Raw) (bson.Timestamp, bool) {
	v, err := tok.LookupErr("_data")
	if err != nil {
		return bson.Timestamp{}, false
	}
	var b []byte
	if s, ok := v.StringValueOK(); ok {
		if len(s) < 18 {
			return bson.Timestamp{}, false
		}
		b, err = hex.DecodeString(s[:18])
		if err != nil {
			return bson.Timestamp{}, false
		}
	} else if _, data, ok := v.BinaryOK(); ok {
		b = data
	}
	if len(b) < 9 || b[0] != 130 {
		return bson.Timestamp{}, false
	}
	return bson.Timestamp{T: binary.BigEndian.Uint32(b[1:5]), I: binary.BigEndian.Uint32(b[5:9])}, true
}

// sourceClock is the source's newest cluster time as last asked, shared
// by the engine's jobs: the oplog is one for every collection, so one
// ping a lagInterval serves them all however many there are.
type sourceClock struct {
	mu sync.Mutex // held while asking, so jobs asking at once ask once
	at time.Time  // when last asked; zero: never
	ts bson.Timestamp
	ok bool
}

// sourceTime returns the source's newest cluster time (false: it gives
// none, as a standalone server does not, or does not answer), asking at
// most once per half lagInterval, each ask bounded by 2 lagIntervals.
func (e *Engine) sourceTime(ctx context.Context) (bson.Timestamp, bool) {
	c := &e.srcClock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < lagInterval/2 {
		return c.ts, c.ok
	}
	c.at, c.ok = time.Now(), false
	// The bound's context only when asking: every job's clock calls this
	// every lagInterval, and one context and timer each was most of what
	// an idle job's clock cost.
	ctx, cancel := context.WithTimeout(ctx, 2*lagInterval)
	defer cancel()
	raw, err := e.source.RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Raw()
	if err != nil {
		return bson.Timestamp{}, false
	}
	t, i, ok := raw.Lookup("operationTime").TimestampOK()
	c.ts, c.ok = bson.Timestamp{T: t, I: i}, ok
	return c.ts, ok
}

// clock keeps the job's unread lag in stats until ctx ends or stop is
// called: every
// lagInterval the source's newest cluster time against what is durable.
// A source that does not answer keeps the last time it gave. then, when
// not nil, is called after each update.
func (e *Engine) clock(ctx context.Context, c *lagClock, w *watchdog, stats *status.JobStats, then func(now time.Time)) (stop func()) {
	return e.lagTicks.every(ctx, lagInterval, func(now time.Time) {
		ts, ok := e.sourceTime(ctx)
		if ok {
			c.mu.Lock()
			if after(ts, c.latest) {
				c.latest = ts
			}
			c.mu.Unlock()
		}
		stats.LagUnread(c.unread(w.idleNow()))
		if then != nil {
			then(now)
		}
	}, nil)
}
