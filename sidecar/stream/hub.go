package stream

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/jobdef"
)

// A change stream is an oplog reader on the server and holds a connection
// between its getMores; one per job makes hundreds of jobs hundreds of
// readers. A Hub reads one stream of a database for every job the process
// follows there (a $match on the union of their namespaces and watermark
// documents) and hands each job what its own stream would have carried,
// in the same order, through a Sub with the Reader's shape (Items, Taken,
// Close). Each job keeps its own position: the token of the last event or
// post-batch report handed to it.
//
// Positions are compared by their resume tokens: the token of one event is
// the same in every stream of its database, and tokens order as their
// `_data` strings do (the KeyString of cluster time, then the event's
// place in it; mongos merges the streams of its shards sorted on
// {"_id._data": 1}, kSortSpec in mongod's change stream stages), as the
// test server's do (internal/mongotest: time, oplog sequence, kind).
// TokenLess is that comparison.
//
// A job joins at its recorded position. Near the shared stream's (within
// CatchUpWindow of its cluster time, or with no shared stream yet), the
// shared stream is reopened from the lower of the two with the new
// filter, and each job skips what it already had (an event is handed to a
// job only when its token is after the job's position): nothing lost,
// nothing twice. Farther back, the job first reads a stream of its own
// from its position (a catch-up), and merges into the shared one at the
// first empty getMore of its own, when it is at the present: no other job
// rereads that history, and a job whose position left the history gets
// HISTORY_LOST from its own catch-up, not the others.
//
// Read-ahead is bounded per job: the Hub never waits for a job. A job
// whose items handed over and not yet Taken would pass its readAhead bytes
// is detached to a catch-up stream from its position (which waits for it,
// bounded as a Reader is) and merges again once it is at the present with
// half its budget free. So the memory a slow destination holds is its own
// readAhead, and the shared stream is never slower than its fastest job.

// CatchUpWindow is how far behind the shared stream (in cluster time) a
// job joining it may be and still join it directly, the shared stream
// reopened from the job's position: a few seconds of history read again
// cost less than a second stream.
const CatchUpWindow = 10 * time.Second

// joinDelay gathers the joins and leaves of a moment (a process starting
// its jobs) into one reopening of the shared stream.
const joinDelay = 20 * time.Millisecond

// TokenLess says whether resume token a is before b in the stream; an
// empty token is before every other.
func TokenLess(a, b bson.Raw) bool { return tokenData(a) < tokenData(b) }

func tokenData(t bson.Raw) string {
	if len(t) == 0 {
		return ""
	}
	s, _ := t.Lookup("_data").StringValueOK()
	// mongod writes the hex in upper case; compare case-blind regardless.
	return strings.ToUpper(s)
}

// Hubs holds the Hub of each source database of a process. The zero
// value is not usable; NewHubs makes one.
type Hubs struct {
	mu    sync.Mutex
	state string
	hubs  map[hubKey]*Hub
}

type hubKey struct {
	client  *mongo.Client
	db      string
	cluster bool
}

// NewHubs returns the Hubs of a process whose state collection is state.
func NewHubs(state string) *Hubs { return &Hubs{state: state, hubs: map[hubKey]*Hub{}} }

// For returns db's Hub, made on first use. A Hub's goroutine runs only
// while it has jobs, so a Hubs needs no Close.
func (hs *Hubs) For(db *mongo.Database) *Hub {
	return hs.hub(hubKey{db.Client(), db.Name(), false}, db)
}

// Cluster returns the Hub of the cluster-wide stream of main's cluster,
// for the jobs that read another database than main, the state
// collection's (Cluster): their events are told apart by namespace.
func (hs *Hubs) Cluster(main *mongo.Database) *Hub {
	return hs.hub(hubKey{main.Client(), main.Name(), true}, main)
}

func (hs *Hubs) hub(key hubKey, db *mongo.Database) *Hub {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.hubs[key]
	if h == nil {
		h = &Hub{db: db, cluster: key.cluster, state: hs.state, members: map[*Sub]bool{}, joining: map[*Sub]bool{}, wake: make(chan struct{}, 1)}
		hs.hubs[key] = h
	}
	return h
}

// Hub shares one change stream of a database among the jobs a process
// follows there (see the comment above CatchUpWindow).
type Hub struct {
	db    *mongo.Database // the stream's, or for a cluster-wide one the state collection's
	state string
	// cluster: a cluster-wide stream, whose clauses and routes name
	// databases (namespaces, db.coll).
	cluster bool

	mu       sync.Mutex
	members  map[*Sub]bool // served by the shared stream
	joining  map[*Sub]bool // served from the next reopening on
	reshape  bool          // a job was detached: the filter may narrow
	running  bool          // the goroutine runs
	pos      bson.Raw      // the last token the shared stream read
	noSplit  bool          // the server has no $changeStreamSplitLargeEvent
	opened   int           // shared streams opened, for tests
	detached int           // jobs detached for their budget, for tests
	wake     chan struct{}
	// index: the members by collection (theirs, and those their lookups
	// read) and by job name; stale when membership changed.
	byColl map[string][]*Sub
	byName map[string]*Sub
	stale  bool
}

// Opened is how many times the shared stream was opened.
func (h *Hub) Opened() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opened
}

// Sub is one job's share of a Hub: the Reader's shape to the follow loop.
type Sub struct {
	h         *Hub
	job       *jobdef.Job
	pace      time.Duration
	readAhead int
	hurry     func() bool
	ctx       context.Context
	cancel    context.CancelFunc
	start     bson.Raw
	ch        chan Item
	narrowing narrowing // what its job's own stream drops and trims

	// mu guards the rest; the Hub's mu, when both are held, is taken
	// first.
	mu     sync.Mutex
	queue  []Item
	bytes  int      // handed over (queued or in ch) and not yet Taken
	pos    bson.Raw // the last position queued: where to resume
	seen   bson.Raw // where the last event queued ends (Item.ends)
	closed bool
	wg     sync.WaitGroup // catch-ups starting or running
}

// Join adds job to the Hub at token (at the present when empty): its
// events come through the Sub from after token on, every getMore batch's
// post-batch token when the batch had none of them. pace, readAhead and
// hurry are as for Start; ctx bounds the Sub's own catch-up streams.
// Errors are those of opening a stream at the present (token empty); a
// later error comes as an Item, after which the Sub is out of the Hub.
func (h *Hub) Join(ctx context.Context, job *jobdef.Job, token bson.Raw, pace time.Duration, readAhead int, hurry func() bool) (*Sub, error) {
	if readAhead <= 0 {
		readAhead = DefaultReadAhead
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Sub{h: h, job: job, pace: pace, readAhead: readAhead, hurry: hurry, ctx: sctx, cancel: cancel, ch: make(chan Item, 1)}
	stateDB := ""
	if h.cluster {
		stateDB = h.db.Name()
	}
	own := reads(job, stateDB)
	s.narrowing = narrowing{coll: h.colls(job)[0], updates: own.updates, trim: own.trim}
	token = append(bson.Raw(nil), token...)
	h.mu.Lock()
	direct := len(token) > 0 && (len(h.members)+len(h.joining) == 0 || len(h.pos) == 0 || near(token, h.pos))
	if len(token) == 0 && len(h.pos) > 0 && len(h.members) > 0 {
		token, direct = h.pos, true // the present, as the shared stream knows it
	}
	s.start, s.pos, s.seen = token, token, token
	if direct {
		h.joining[s] = true
		h.nudge()
		h.mu.Unlock()
		return s, nil
	}
	h.mu.Unlock()
	if len(token) == 0 {
		// No shared stream to ask the present of: a stream of its own at
		// the present, merged at its first empty getMore.
		cs, err := h.open(ctx, []*jobdef.Job{job}, nil)
		if err != nil {
			cancel()
			return nil, err
		}
		s.start = append(bson.Raw(nil), cs.ResumeToken()...)
		s.pos, s.seen = s.start, s.start
		s.wg.Add(1)
		go s.reaped(start(sctx, cs, pace, readAhead, hurry, s.deliver, s.caught))
		return s, nil
	}
	s.wg.Add(1)
	go s.catchUp()
	return s, nil
}

// near says whether token is within CatchUpWindow of the shared stream's
// position pos.
func near(token, pos bson.Raw) bool {
	t, ok1 := TokenTime(token)
	p, ok2 := TokenTime(pos)
	if !ok1 || !ok2 {
		return false
	}
	return int64(t.T)+int64(CatchUpWindow/time.Second) >= int64(p.T)
}

// ResumeToken is the position the Sub started from.
func (s *Sub) ResumeToken() bson.Raw { return s.start }

// Items is where the batches come. Each call hands the next queued item
// to the channel when it is empty, so it must be called before each
// receive (the follow loop does).
func (s *Sub) Items() <-chan Item {
	s.mu.Lock()
	s.fill()
	s.mu.Unlock()
	return s.ch
}

func (s *Sub) fill() {
	if len(s.ch) == 0 && len(s.queue) > 0 {
		s.ch <- s.queue[0]
		s.queue[0] = Item{}
		s.queue = s.queue[1:]
	}
}

// Taken gives an item's bytes back once the follow loop took its events
// in.
func (s *Sub) Taken(it Item) {
	if it.from != nil {
		it.from.Release(it.bytes)
	}
	s.mu.Lock()
	s.bytes -= it.bytes
	s.mu.Unlock()
}

// Close takes the job out of the Hub and stops its catch-up stream.
// Idempotent.
func (s *Sub) Close() {
	h := s.h
	h.mu.Lock()
	if h.members[s] || h.joining[s] {
		// The filter narrows at the next join's reopening: until then
		// the shared stream may carry a few events no job takes.
		delete(h.members, s)
		delete(h.joining, s)
		h.stale = true
		if len(h.members)+len(h.joining) == 0 {
			h.nudge() // the goroutine ends
		}
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	h.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// queueItem queues it for the follow loop; an idle report replaces one
// queued last (only the latest position matters).
func (s *Sub) queueItem(it Item) {
	if s.closed {
		if it.from != nil {
			it.from.Release(it.bytes)
		}
		return
	}
	if it.Token != nil && it.Events == nil && it.Err == nil {
		s.pos, s.seen = it.Token, it.Token
		if n := len(s.queue); n > 0 && s.queue[n-1].Token != nil && s.queue[n-1].Events == nil {
			s.queue[n-1] = it
			return
		}
	}
	if n := len(it.Events); n > 0 {
		if tok, ok := it.Events[n-1].Lookup("_id").DocumentOK(); ok {
			s.pos = tok
		}
		if n <= len(it.ends) {
			s.seen = it.ends[n-1]
		} else {
			s.seen = s.pos
		}
	}
	s.bytes += it.bytes
	s.queue = append(s.queue, it)
	s.fill()
}

// deliver takes a catch-up stream's items.
func (s *Sub) deliver(it Item) {
	s.mu.Lock()
	s.queueItem(it)
	s.mu.Unlock()
}

// caught is told of the catch-up stream's empty getMores: at the present,
// with half its budget free, the job joins the shared stream at tok (its
// catch-up then ends).
func (s *Sub) caught(tok bson.Raw) bool {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	if s.bytes > s.readAhead/2 {
		return false
	}
	s.pos, s.seen = tok, tok
	h.joining[s] = true
	h.nudge()
	return true
}

// catchUp reads the job's own stream from its position until caught
// merges it.
func (s *Sub) catchUp() {
	defer s.wg.Done()
	s.mu.Lock()
	from := s.pos
	s.mu.Unlock()
	for attempt := 0; ; attempt++ {
		cs, err := s.h.open(s.ctx, []*jobdef.Job{s.job}, from)
		if err == nil {
			// Close cancels s.ctx, which ends it.
			<-start(s.ctx, cs, s.pace, s.readAhead, s.hurry, s.deliver, s.caught).done
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		if IsHistoryLost(err) || TooLarge(err) || attempt >= 5 {
			s.deliver(Item{Err: err})
			return
		}
		if sleep(s.ctx, retryDelay(attempt)) != nil {
			return
		}
	}
}

// reaped waits for a catch-up stream started by Join.
func (s *Sub) reaped(r *Reader) {
	defer s.wg.Done()
	<-r.done
}

func retryDelay(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 6)
	return d/2 + rand.N(d/2+1)
}

// nudge wakes the Hub's goroutine, starting it when it is not running.
// h.mu is held.
func (h *Hub) nudge() {
	if !h.running {
		h.running = true
		go h.run()
		return
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// open opens a stream of jobs' union on the Hub's database after token.
func (h *Hub) open(ctx context.Context, jobs []*jobdef.Job, token bson.Raw) (*mongo.ChangeStream, error) {
	for {
		h.mu.Lock()
		split := !h.noSplit
		h.mu.Unlock()
		opts := options.ChangeStream().SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(Await)
		for _, j := range jobs {
			if needsPreImages(j) {
				opts.SetFullDocumentBeforeChange(options.WhenAvailable)
				break
			}
		}
		if len(token) > 0 {
			opts.SetResumeAfter(token)
		}
		var pipeline mongo.Pipeline
		stateDB := ""
		if h.cluster {
			stateDB = h.db.Name()
			pipeline = mongo.Pipeline{ClusterUnionFilter(jobs, stateDB, h.state)}
		} else {
			pipeline = mongo.Pipeline{UnionFilter(jobs, h.state)}
		}
		if t := unionTrim(unionReads(jobs, stateDB)); t != nil {
			pipeline = append(pipeline, t)
		}
		if split {
			pipeline = append(pipeline, SplitStage)
		}
		var cs *mongo.ChangeStream
		var err error
		if h.cluster {
			cs, err = h.db.Client().Watch(ctx, pipeline, opts)
		} else {
			cs, err = h.db.Watch(ctx, pipeline, opts)
		}
		if split && UnknownStage(err) {
			h.mu.Lock()
			h.noSplit = true
			h.mu.Unlock()
			continue
		}
		return cs, err
	}
}

// UnionFilter is the $match of a stream shared by jobs: an event passes
// when it passes the Filter of one of them (for a collection, as the
// widest of its jobs needs: unionReads).
func UnionFilter(jobs []*jobdef.Job, state string) bson.D {
	var names bson.A
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	or := collClauses(unionReads(jobs, ""))
	or = append(or,
		bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.watermark", Value: bson.D{{Key: "$in", Value: names}}}},
		bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.wait", Value: bson.D{{Key: "$in", Value: names}}}},
		bson.D{{Key: "ns.coll", Value: state}, {Key: "documentKey._id.retry", Value: bson.D{{Key: "$in", Value: names}}}, {Key: "operationType", Value: "insert"}},
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$in", Value: bson.A{"dropDatabase", "invalidate"}}}}},
	)
	return bson.D{{Key: "$match", Value: bson.D{{Key: "$or", Value: or}}}}
}

// run is the Hub's goroutine: while it has jobs, it reads the shared
// stream and hands each job its part; a join or leave reopens the stream
// (after joinDelay, gathering the others of the moment) from the lowest
// position a job needs.
func (h *Hub) run() {
	ctx := context.Background()
	var r *Reader
	var jobs map[*Sub]bool // the members r's filter was made for
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	attempt := 0
	for {
		h.mu.Lock()
		if len(h.members)+len(h.joining) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		change := len(h.joining) > 0 || h.reshape
		h.mu.Unlock()
		if r == nil || change {
			if r != nil {
				if sleep(ctx, joinDelay) != nil {
					return
				}
				h.retire(r, jobs)
				r = nil
			}
			var err error
			r, jobs, err = h.reopen(ctx)
			if err != nil {
				if attempt++; attempt >= 5 {
					// Each job then retries, and says so, as with a
					// stream of its own.
					h.fail(err)
					attempt = 0
				}
				if sleep(ctx, retryDelay(attempt)) != nil {
					return
				}
				continue
			}
			attempt = 0
		}
		select {
		case it := <-r.Items():
			if it.Err != nil {
				r.Close()
				r = nil
				if IsHistoryLost(it.Err) || TooLarge(it.Err) {
					// The shared stream's own position is gone or
					// unreadable: every job on it is where it is; each
					// acts on it from a stream of its own.
					h.fail(it.Err)
				}
				continue
			}
			h.distribute(it, jobs)
			r.Taken(it)
		case <-h.wake:
		}
	}
}

// retire closes a shared stream once its getMore in flight returned
// (Reader.Finish: cutting it short can leave its cursor open on the
// server), handing on what it read until then, while the next one opens
// beside it: a join waits for no getMore. The next one opens from the
// lowest position a job needs, so it reads again whatever this one still
// hands on, and a job takes an event only after its position: each of
// them once, in order, whichever stream hands it first.
func (h *Hub) retire(r *Reader, jobs map[*Sub]bool) {
	r.Finish()
	take := func(it Item) {
		if it.Err == nil {
			h.distribute(it, jobs)
			r.Taken(it)
		}
	}
	go func() {
		for {
			select {
			case it := <-r.Items():
				take(it)
			case <-r.done:
				for {
					select {
					case it := <-r.Items():
						take(it)
					default:
						r.Close()
						return
					}
				}
			}
		}
	}()
}

// reopen opens the shared stream for the members and the joiners (who
// become members) from the lowest of their positions. A position the
// history no longer holds is the joiners': they catch up on their own and
// the shared stream opens from its own position.
func (h *Hub) reopen(ctx context.Context) (*Reader, map[*Sub]bool, error) {
	h.mu.Lock()
	for s := range h.joining {
		h.members[s] = true
		delete(h.joining, s)
	}
	h.reshape, h.stale = false, true
	jobs := make([]*jobdef.Job, 0, len(h.members))
	var from bson.Raw
	pace, readAhead := time.Duration(-1), 0
	first := true
	var hurries []func() bool
	served := make(map[*Sub]bool, len(h.members)) // the jobs the filter is made for
	for s := range h.members {
		served[s] = true
		jobs = append(jobs, s.job)
		s.mu.Lock()
		if first || TokenLess(s.pos, from) {
			from, first = s.pos, false
		}
		s.mu.Unlock()
		if pace < 0 || s.pace < pace {
			pace = s.pace
		}
		readAhead = max(readAhead, s.readAhead)
		if s.hurry != nil {
			hurries = append(hurries, s.hurry)
		}
	}
	own := h.pos
	h.mu.Unlock()
	if len(jobs) == 0 {
		return nil, nil, errNoMembers
	}
	cs, err := h.open(ctx, jobs, from)
	if err != nil && IsHistoryLost(err) && len(own) > 0 && TokenLess(from, own) {
		h.detachBefore(own)
		return h.reopen(ctx)
	}
	if err != nil {
		if IsHistoryLost(err) || TooLarge(err) {
			h.fail(err)
		}
		return nil, nil, err
	}
	h.mu.Lock()
	h.opened++
	if len(from) == 0 {
		// Opened at the present: that is where every member starts.
		from = append(bson.Raw(nil), cs.ResumeToken()...)
		for s := range h.members {
			s.mu.Lock()
			if len(s.pos) == 0 {
				s.pos, s.seen = from, from
			}
			s.mu.Unlock()
		}
	}
	if len(h.pos) == 0 || TokenLess(h.pos, from) {
		h.pos = from
	}
	h.mu.Unlock()
	hurry := func() bool {
		for _, f := range hurries {
			if f() {
				return true
			}
		}
		return false
	}
	return start(ctx, cs, max(pace, 0), readAhead, hurry, nil, nil), served, nil
}

var errNoMembers = errorString("no job on the shared stream")

type errorString string

func (e errorString) Error() string { return string(e) }

// detachBefore sends the members whose position is before pos to catch-up
// streams of their own.
func (h *Hub) detachBefore(pos bson.Raw) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.members {
		s.mu.Lock()
		if TokenLess(s.pos, pos) {
			h.detach(s)
		}
		s.mu.Unlock()
	}
}

// detach moves s from the shared stream to a catch-up stream from its
// position. h.mu and s.mu are held.
func (h *Hub) detach(s *Sub) {
	delete(h.members, s)
	h.stale, h.reshape = true, true
	if s.closed {
		return
	}
	s.wg.Add(1)
	go s.catchUp()
}

// fail hands err to every member and takes them out: each stops its
// follow on it (or reopens), as with a stream of its own.
func (h *Hub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.members {
		s.mu.Lock()
		s.queueItem(Item{Err: err})
		s.mu.Unlock()
		delete(h.members, s)
	}
	h.stale = true
}

// distribute hands one item of the shared stream to the members it
// serves (those its filter was made for: a stream retired while the next
// opens has not read for the jobs that joined since, and its post-batch
// tokens say nothing of theirs): each event to those whose Filter it
// passes and whose position it is after, and the batch's post-batch
// token (or an idle report) to the others.
func (h *Hub) distribute(it Item, served map[*Sub]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if it.Events == nil {
		if len(it.Token) > 0 {
			if TokenLess(h.pos, it.Token) {
				h.pos = it.Token
			}
			for s := range h.members {
				if !served[s] {
					continue
				}
				s.mu.Lock()
				if TokenLess(s.seen, it.Token) {
					s.queueItem(Item{Token: it.Token})
				}
				s.mu.Unlock()
			}
		}
		return
	}
	if h.stale {
		h.index()
	}
	type share struct{ evs, ends []bson.Raw }
	got := map[*Sub]*share{}
	var over []*Sub
	for i, ev := range it.Events {
		tok, _ := ev.Lookup("_id").DocumentOK()
		end := tok
		if i < len(it.ends) {
			end = it.ends[i]
		}
		coll, _ := h.eventColl(ev, "ns")
		for _, s := range h.route(ev) {
			if !h.members[s] || !served[s] {
				continue
			}
			sev, ok := s.narrowing.narrow(coll, ev)
			if !ok {
				continue
			}
			g := got[s]
			var seen bson.Raw
			if g != nil {
				seen = g.ends[len(g.ends)-1]
			} else {
				s.mu.Lock()
				seen = s.seen
				s.mu.Unlock()
			}
			if TokenLess(seen, end) {
				if g == nil {
					g = &share{}
					got[s] = g
				}
				g.evs, g.ends = append(g.evs, sev), append(g.ends, end)
			}
		}
		if len(tok) > 0 && TokenLess(h.pos, tok) {
			h.pos = tok
		}
	}
	for s := range h.members {
		if !served[s] {
			continue
		}
		g := got[s]
		s.mu.Lock()
		if g != nil {
			size := 0
			for _, ev := range g.evs {
				size += len(ev)
			}
			if s.bytes > 0 && s.bytes+size > s.readAhead {
				// Its destination is slower than the stream: it reads
				// on from its own position, at its own pace.
				over = append(over, s)
			} else {
				s.queueItem(Item{Events: g.evs, ends: g.ends, bytes: size})
			}
		} else if len(it.after) > 0 && TokenLess(s.seen, it.after) {
			s.queueItem(Item{Token: it.after})
		}
		s.mu.Unlock()
	}
	for _, s := range over {
		h.detached++
		s.mu.Lock()
		h.detach(s)
		s.mu.Unlock()
	}
	if len(it.after) > 0 && TokenLess(h.pos, it.after) {
		h.pos = it.after
	}
}

// index rebuilds the members' routes. h.mu is held.
func (h *Hub) index() {
	h.byColl, h.byName = map[string][]*Sub{}, map[string]*Sub{}
	for s := range h.members {
		h.byName[s.job.Name] = s
		for _, c := range h.colls(s.job) {
			h.byColl[c] = append(h.byColl[c], s)
		}
	}
	h.stale = false
}

// colls are the collections job's events come from, its own first, without
// repeats: by name in a database stream, by namespace in a cluster-wide
// one.
func (h *Hub) colls(job *jobdef.Job) []string {
	own := job.Collection
	if h.cluster {
		own = jobdef.Namespace(orDB(job.Database, h.db.Name()), job.Collection)
	}
	out := []string{own}
	for _, d := range job.Dependencies() {
		c := d.Collection
		if h.cluster {
			c = jobdef.Namespace(orDB(d.Database, h.db.Name()), d.Collection)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func orDB(db, main string) string {
	if db == "" {
		return main
	}
	return db
}

// eventColl is the collection of an event's field at ("ns", "to") as
// index keys it.
func (h *Hub) eventColl(ev bson.Raw, at string) (string, bool) {
	coll, ok := ev.Lookup(at, "coll").StringValueOK()
	if !ok || !h.cluster {
		return coll, ok
	}
	db, _ := ev.Lookup(at, "db").StringValueOK()
	return jobdef.Namespace(db, coll), true
}

// route is the members whose Filter ev passes (Filter's clauses, by
// collection and by job name). h.mu is held.
func (h *Hub) route(ev bson.Raw) []*Sub {
	op, _ := ev.Lookup("operationType").StringValueOK()
	if op == "dropDatabase" || op == "invalidate" {
		// A cluster-wide stream passes the drop of a job's own database
		// and of the state collection's (ClusterFilter).
		db, _ := ev.Lookup("ns", "db").StringValueOK()
		out := make([]*Sub, 0, len(h.members))
		for s := range h.members {
			if !h.cluster || db == h.db.Name() || db == orDB(s.job.Database, h.db.Name()) {
				out = append(out, s)
			}
		}
		return out
	}
	coll, _ := h.eventColl(ev, "ns")
	state := h.state
	if h.cluster {
		state = jobdef.Namespace(h.db.Name(), h.state)
	}
	if coll == state {
		var out []*Sub
		for _, k := range []string{"watermark", "wait", "retry"} {
			if name, ok := ev.Lookup("documentKey", "_id", k).StringValueOK(); ok {
				if s := h.byName[name]; s != nil {
					out = append(out, s)
				}
			}
		}
		return out
	}
	out := h.byColl[coll]
	if to, ok := h.eventColl(ev, "to"); ok && to != coll {
		for _, s := range h.byColl[to] {
			if !containsSub(out, s) {
				out = append(out[:len(out):len(out)], s)
			}
		}
	}
	return out
}

func containsSub(subs []*Sub, s *Sub) bool {
	for _, x := range subs {
		if x == s {
			return true
		}
	}
	return false
}

// ClusterUnionFilter is UnionFilter for a cluster-wide stream: an event
// passes when it passes the ClusterFilter of one of jobs; stateDB is the
// state collection's database.
func ClusterUnionFilter(jobs []*jobdef.Job, stateDB, state string) bson.D {
	var names bson.A
	drops := bson.A{stateDB}
	for _, j := range jobs {
		names = append(names, j.Name)
		if db := orDB(j.Database, stateDB); !slices.Contains(drops, any(db)) {
			drops = append(drops, db)
		}
	}
	or := collClauses(unionReads(jobs, stateDB))
	or = append(or,
		bson.D{{Key: "ns.db", Value: stateDB}, {Key: "ns.coll", Value: state}, {Key: "documentKey._id.watermark", Value: bson.D{{Key: "$in", Value: names}}}},
		bson.D{{Key: "ns.db", Value: stateDB}, {Key: "ns.coll", Value: state}, {Key: "documentKey._id.wait", Value: bson.D{{Key: "$in", Value: names}}}},
		bson.D{{Key: "ns.db", Value: stateDB}, {Key: "ns.coll", Value: state}, {Key: "documentKey._id.retry", Value: bson.D{{Key: "$in", Value: names}}}, {Key: "operationType", Value: "insert"}},
		bson.D{{Key: "operationType", Value: "dropDatabase"}, {Key: "ns.db", Value: bson.D{{Key: "$in", Value: drops}}}})
	return bson.D{{Key: "$match", Value: bson.D{{Key: "$or", Value: or}}}}
}
