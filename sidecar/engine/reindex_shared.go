package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/pipe"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/sidecar/status"
	"github.com/meilistream/meilistream/transform"
)

// A reindex shared by the pods (the job's parallel > 1, from the first
// chunk after another live process running the job with the same
// transform is seen; before, the holder reads alone).
// The holder keeps the one ordered stream and all it guarantees; what a
// chunk costs (the read, the transform with its lookups, the encoding) is
// done by whichever process claims the chunk, holder or standby:
//
//   - The holder's reindex goroutine walks the collection's _ids alone (a
//     covered read of the _id index, in the walk every reindex takes) and
//     publishes each part of them as a chunk in the state collection
//     (jobstate's slot leases), at most 2 x parallel chunks ahead of its
//     checkpoint.
//   - A claimant takes a chunk in one of parallel slots, writes the
//     chunk's low mark (<run>/<seq>/<token>/lo) into the job's watermark
//     document, reads the chunk's documents by _id in the same causally
//     consistent session, transforms and encodes them, writes the result
//     (fenced by its claim), then the high mark.
//   - The follow loop, at a chunk's low mark, opens a window that collects
//     the _ids the stream changes; at its high mark it drops those from
//     the chunk's result and hands the rest to the pipe, after the pending
//     changes and before every later one: the DBLog rule, per window.
//
// Why a chunk may be a list of _ids: every document that exists when the
// reindex begins (its opening mark) and is not changed after it is found
// by the walk, which starts after that mark, and read in some window;
// every other document's last state reaches the destination through the
// stream, which follows from before the opening mark. A chunk's rows not
// changed in its window held at its high mark the value read, so they
// land in change order.
//
// A result whose window saw a change of a related collection (its
// lookups may be older than the stream's), one with a write too large to
// store (a result larger than a MongoDB document is stored in parts), or
// one that is not there (its claim was taken over after its high mark) is not
// used: the holder reads the chunk's documents by _id at the high mark and
// transforms them itself, as a lean stream's documents are (a read after
// the mark, later changes of the same ids coming after it through the
// stream). A chunk is taken at the first of its high marks the stream
// reaches; another claim's later high mark of it is ignored.

// sharedReindex is the holder's side of a shared reindex.
type sharedReindex struct {
	e        *Engine
	s        *Reindex
	run      string // the reindex chain's nonce: the prefix of the claims' marks
	parallel int

	mu      sync.Mutex
	chunks  map[int64]*sharedChunk // published, not yet handed to the pipe
	pending int
	wake    chan struct{} // closed (and replaced) when a chunk is handed over
	done    map[int64]*sharedChunk
	next    int64 // the next chunk the checkpoint takes, in _id order
	local   map[string]*jobstate.ChunkResult

	// The follow loop's: the open windows by claim token, the chunks
	// handed over.
	windows map[string]*sharedWindow
	taken   map[int64]bool

	stopLocal func()

	// The reindex goroutine's: when join last asked, and that it never
	// will again (the slot index could not be made).
	asked time.Time
	never bool
}

// sharedChunk is one published chunk, as the holder keeps it.
type sharedChunk struct {
	seq  int64
	ids  []bson.RawValue
	last bson.RawValue
}

// sharedWindow is a claim's window, between its low and high marks.
type sharedWindow struct {
	seq     int64
	changed map[string]bool
	related bool // a related collection changed in it
}

// sharePlan says whether the job's reindex is shared: parallel above 1,
// the slot index made, and another live process running the job's
// transform. Anything that says no leaves the reindex to the holder alone.
func (e *Engine) sharePlan(ctx context.Context, jc jobConfig) bool {
	if e.cfg.Process == "" {
		return false
	}
	job, log := jc.job, e.log.With("job", jc.job.Name)
	// Chunks an earlier run left are nobody's now: claimants would do
	// them for nothing.
	if err := e.store.DeleteChunks(ctx, job.Name, ""); err != nil {
		log.Warn("the reindex is read by the holder alone", "error", err)
		return false
	}
	return jc.ReindexParallel > 1
}

// shareCheckEvery is how often a reindex read by its holder alone looks
// for other pods running its transform, to share what is left of it (one
// read of the job's presence records). Pods of a rollout start together,
// and a holder that took the lease a moment before its standbys wrote
// their presence would read alone until its next look: at a sidecar's CPU
// limit a second of that is a fifth of a 100 000-document reindex
// shared by three.
const shareCheckEvery = 200 * time.Millisecond

// sharedChunkSize is how many documents a chunk of a shared reindex
// holds: two pages. A chunk costs some fifteen round trips to MongoDB
// whatever its size (its claim, two marks, its result, its slot given
// back; the holder's publish, read and delete of it), which on a busy
// server take longer than a claimant at a sidecar's usual CPU limit
// takes to transform half a page: with two pages they are a small part
// of each chunk's time. A result larger than a MongoDB document holds is
// stored in several (jobstate.MaxChunkResultBytes each), so larger
// documents need no smaller page.
func sharedChunkSize(pageSize int) int {
	return max(1, 2*pageSize)
}

// join says whether the reindex is to be shared from its next chunk on:
// another live pod runs the job's transform (its presence record) and the
// slot index is there. Asked at most every shareCheckEvery; a pod that
// starts while the holder reindexes gets chunks from then on.
func (sh *sharedReindex) join(ctx context.Context) bool {
	if sh.never || time.Since(sh.asked) < shareCheckEvery {
		return false
	}
	sh.asked = time.Now()
	e, job := sh.e, sh.s.src.Job
	others, err := e.store.LiveWithHash(ctx, job.Name, job.Hash, e.cfg.Process)
	if err != nil || len(others) == 0 {
		return false
	}
	if err := e.store.EnsureSlotIndex(ctx); err != nil {
		sh.never = true
		sh.s.src.Log.Warn("the reindex is read by the holder alone", "error", err)
		return false
	}
	sh.s.src.Log.Info("the reindex is shared by the pods running this transform", "parallel", sh.parallel, "others", len(others))
	// Two chunks ahead of the checkpoint for each slot: a slot's next
	// chunk waits published while its last is handed over.
	w := sh.s.win
	w.mu.Lock()
	w.max = max(w.max, 2*sh.parallel*sharedChunkSize(sh.s.opts.PageSize))
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
	return true
}

func newSharedReindex(e *Engine, s *Reindex, parallel int) *sharedReindex {
	return &sharedReindex{
		e: e, s: s, run: s.nonce, parallel: parallel,
		chunks: map[int64]*sharedChunk{}, wake: make(chan struct{}), done: map[int64]*sharedChunk{},
		local: map[string]*jobstate.ChunkResult{}, windows: map[string]*sharedWindow{}, taken: map[int64]bool{},
	}
}

// owns says whether mark is one of the shared reindex's claims' (nil: none).
func (sh *sharedReindex) owns(mark string) bool {
	return sh != nil && strings.HasPrefix(mark, sh.run+"/")
}

// claimMark is the mark of a claim's window: lo or hi.
func claimMark(run string, seq int64, token, end string) string {
	return run + "/" + strconv.FormatInt(seq, 10) + "/" + token + "/" + end
}

// parseMark splits a claim's mark.
func parseMark(mark string) (seq int64, token string, hi, ok bool) {
	p := strings.Split(mark, "/")
	if len(p) != 4 {
		return 0, "", false, false
	}
	seq, err := strconv.ParseInt(p[1], 10, 64)
	return seq, p[2], p[3] == "hi", err == nil
}

// changed notes that the stream changed key k, for every open window.
func (sh *sharedReindex) changed(k string) {
	if sh == nil {
		return
	}
	for _, w := range sh.windows {
		w.changed[k] = true
	}
}

// relatedChanged notes a change of a related collection, for every open
// window: the lookups of their results may be older than the stream's.
func (sh *sharedReindex) relatedChanged() {
	if sh == nil {
		return
	}
	for _, w := range sh.windows {
		w.related = true
	}
}

// publish makes ids chunk seq, claimable.
func (sh *sharedReindex) publish(ctx context.Context, seq int64, ids []bson.RawValue) error {
	s := sh.s
	c := &sharedChunk{seq: seq, ids: ids, last: ids[len(ids)-1]}
	sh.mu.Lock()
	sh.chunks[seq] = c
	sh.pending++
	sh.mu.Unlock()
	s.src.Waiting.Add(1) // the stream hurries while chunks are out
	err := sh.e.store.PublishChunk(ctx, s.opts.Lease, jobstate.SharedChunk{
		Job: s.src.Job.Name, Run: sh.run, Seq: seq, Hash: s.src.Job.Hash, Parallel: sh.parallel, IDs: ids,
	})
	return err
}

// handed takes chunk seq off the published ones: its rows are in the pipe.
func (sh *sharedReindex) handed(seq int64) *sharedChunk {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.chunks[seq]
	if c == nil {
		return nil
	}
	delete(sh.chunks, seq)
	sh.pending--
	sh.s.src.Waiting.Add(-1)
	close(sh.wake)
	sh.wake = make(chan struct{})
	return c
}

// waitHanded waits until every published chunk is in the pipe.
func (sh *sharedReindex) waitHanded(ctx context.Context, p *pipe.Pipe) error {
	for {
		sh.mu.Lock()
		n, wake := sh.pending, sh.wake
		sh.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-p.Failed():
			if err := p.Err(); err != nil {
				return err
			}
			return pipe.Closed
		}
	}
}

// durable hands chunk c, durable, to the checkpoint in _id order: the
// checkpoint moves over a chunk only once every chunk before it is
// durable too.
func (sh *sharedReindex) durable(c *sharedChunk) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.done[c.seq] = c
	for {
		d := sh.done[sh.next]
		if d == nil {
			return
		}
		delete(sh.done, sh.next)
		sh.next++
		sh.s.ckp.durable(d.last, len(d.ids))
	}
}

// putLocal keeps a result of this process's own claim in memory: the
// holder takes it from there, never from MongoDB.
func (sh *sharedReindex) putLocal(token string, r *jobstate.ChunkResult) {
	sh.mu.Lock()
	sh.local[token] = r
	sh.mu.Unlock()
}

func (sh *sharedReindex) takeLocal(token string) *jobstate.ChunkResult {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.local[token]
	delete(sh.local, token)
	return r
}

// readShared is the holder's reindex goroutine in a shared reindex, from
// after last (the chunks before it were read by the holder alone, and
// are handed over at their own marks, before every shared chunk's): the
// _id walk publishing chunks, the wait until each is
// handed to the pipe, then the last chunk (or the sweep) under its own
// marks, as a reindex read alone ends.
func (s *Reindex) readShared(ctx, sctx context.Context, marks *mongo.Collection, p *pipe.Pipe, last bson.RawValue) error {
	sh := s.shared
	sh.stopLocal = sh.e.startClaims(ctx, s.src.Job, sh, 1, s.opts.Stats)
	defer sh.stopLocal()
	walk := &Chain{src: s.src, coll: s.coll, what: "reindex", idsOnly: true}
	size := sharedChunkSize(s.opts.PageSize)
	for seq := int64(0); ; {
		if err := s.win.acquire(ctx, p, size); err != nil {
			return err
		}
		c, err := walk.readChunk(sctx, nil, last, size)
		if err != nil {
			return err
		}
		s.win.release(size - c.N)
		if c.N > 0 {
			ids := make([]bson.RawValue, c.N)
			for i, it := range c.Items {
				ids[i] = it.ID
			}
			if err := sh.publish(ctx, seq, ids); err != nil {
				return err
			}
			seq++
			last = c.Last
		}
		if c.Final {
			break
		}
	}
	if err := sh.waitHanded(ctx, p); err != nil {
		return err
	}
	if err := s.mark(sctx, marks, &Chunk{Last: last, Final: !s.sweep}); err != nil {
		return err
	}
	if !s.sweep {
		return nil
	}
	return s.readSweep(ctx, sctx, marks, last)
}

// onSharedMark acts on a claim's mark: a low mark opens its window, the
// high mark of a chunk not yet taken hands its result to the pipe.
func (f *follower) onSharedMark(mark string, ev bson.Raw, tok bson.Raw) error {
	sh := f.snap.shared
	seq, token, hi, ok := parseMark(mark)
	if !ok {
		return nil
	}
	if !hi {
		if !sh.taken[seq] {
			sh.windows[token] = &sharedWindow{seq: seq, changed: map[string]bool{}}
		}
		return nil
	}
	w := sh.windows[token]
	delete(sh.windows, token)
	if w == nil || sh.taken[seq] {
		return nil // another claim's high mark of it came first
	}
	for t, o := range sh.windows {
		if o.seq == seq {
			delete(sh.windows, t) // an earlier claim's, taken over
		}
	}
	c := sh.handed(seq)
	if c == nil {
		return nil
	}
	sh.taken[seq] = true
	if err := f.flush(); err != nil {
		return err
	}
	return f.submitShared(c, w, token, tok, eventWall(ev))
}

// submitShared hands chunk c's result of claim token, without the rows
// the stream changed in its window w, to the pipe; once durable the chunk
// is deleted and goes to the checkpoint.
func (f *follower) submitShared(c *sharedChunk, w *sharedWindow, token string, tok bson.Raw, wall time.Time) error {
	snap, jc, e, stats, sh := f.snap, f.jc, f.e, f.stats, f.snap.shared
	set := f.p.errs
	clearing := snap.InPlace()
	name := jc.job.Name
	var clear []int
	fl := &pipe.Flight{To: pipe.ToStaged, Bytes: len(c.ids) * docBytes}
	fl.Prepare = func(ctx context.Context, fl *pipe.Flight) error {
		r := sh.takeLocal(token)
		if r == nil && !w.related {
			var err error
			if r, err = e.store.ReadChunkResult(ctx, name, sh.run, c.seq, token); err != nil {
				return err
			}
		}
		var writes []sink.Write
		var bad []DocError
		var sk int
		if r == nil || r.TooLarge || w.related {
			stats.Update(func(s *status.JobSnapshot) { s.ChunksRedone++ })
			items := make([]Item, 0, len(c.ids))
			for _, id := range c.ids {
				if !w.changed[keyOf(id)] {
					items = append(items, Item{ID: id, Fill: true, Op: transform.OpReindex})
				}
			}
			if err := e.fillDocs(ctx, jc, items); err != nil {
				return err
			}
			var err error
			if writes, sk, bad, err = e.prepareItems(ctx, jc, stats, set, snap.Made(), items, snap.InPlace(), nil); err != nil {
				return err
			}
		} else {
			writes, sk, bad = sharedWrites(name, r, w.changed)
			if err := e.handleDocErrors(ctx, jc, stats, set, bad); err != nil {
				return err
			}
			for _, b := range bad {
				snap.Made().Add(b.ID)
			}
			stats.Add(0, 0, int64(sk), 0)
			e.observeSkipped(name, int64(sk))
		}
		if clearing {
			clear = set.Candidates(writes, failedIDs(bad))
		}
		snap.Prepared(sk, len(bad))
		fl.Batch = sink.Batch{Writes: writes}
		return nil
	}
	var record func(ctx context.Context, fl *pipe.Flight) error
	if time.Since(f.posReq) >= chunkPositionInterval {
		record = f.recordAfter(tok, wall)
		f.posReq = time.Now()
	}
	fl.Durable = func(ctx context.Context, fl *pipe.Flight) error {
		if err := set.Cleared(ctx, fl, clear); err != nil {
			return err
		}
		snap.counted(fl)
		if err := e.store.DeleteChunk(ctx, name, sh.run, c.seq); err != nil {
			return err
		}
		sh.durable(c)
		if record == nil {
			return nil
		}
		return record(ctx, fl)
	}
	return f.p.Submit(fl)
}

// sharedWrites turns a claim's result into writes, without the rows in
// changed; its per-document errors come back as DocErrors of the codes
// and messages the claimant's transform gave.
func sharedWrites(job string, r *jobstate.ChunkResult, changed map[string]bool) ([]sink.Write, int, []DocError) {
	writes := make([]sink.Write, 0, len(r.Writes))
	for _, w := range r.Writes {
		if changed[keyOf(w.ID)] {
			continue
		}
		switch {
		case w.Delete:
			writes = append(writes, sink.Write{SourceID: w.ID, Delete: true})
		case w.Doc != nil:
			writes = append(writes, sink.Write{SourceID: w.ID, Doc: w.Doc})
		default:
			writes = append(writes, sink.Write{SourceID: w.ID, Doc: json.RawMessage(w.JSON)})
		}
	}
	var bad []DocError
	for _, b := range r.Errors {
		if changed[keyOf(b.ID)] {
			continue
		}
		bad = append(bad, DocError{ID: b.ID, Op: transform.Operation(b.Op), Err: errs.New(errs.Code(b.Code), job, "%s", b.Message)})
	}
	return writes, r.Skipped, bad
}

// counted counts the writes of fl, durable: indexed, and refused.
func (s *Reindex) counted(fl *pipe.Flight) {
	var up int64
	for i := range fl.Batch.Writes {
		if !fl.Batch.Writes[i].Delete && !fl.IsRefused(i) {
			up++
		}
	}
	s.indexed.Add(up)
	s.bad.Add(int64(fl.RefusedCount()))
}

// HelpReindex claims and does chunks of job's shared reindexes until ctx
// ends, as a standby does beside waiting for the job's lease: a chunk is
// claimed only when it was published for job's transform hash (a process
// with another transform never transforms a chunk). It returns once its
// claimants have stopped.
func (e *Engine) HelpReindex(ctx context.Context, job *transform.Job, stats *status.JobStats) {
	if e.jobCfg(job).ReindexParallel <= 1 || e.cfg.Process == "" {
		return
	}
	// One claimant: it transforms one chunk at a time, and writes the one
	// before meanwhile. A second one would split the process's CPU (a
	// sidecar's limit is a fraction of a core) between two chunks and hold
	// their slots twice as long, slots the other pods could use.
	stop := e.startClaims(ctx, job, nil, 1, stats)
	<-ctx.Done()
	stop()
}

// startClaims starts n claimants of job's chunks; sh is the holder's own
// shared reindex (results kept in memory), nil for a standby. The
// returned function stops them and waits.
func (e *Engine) startClaims(ctx context.Context, job *transform.Job, sh *sharedReindex, n int, stats *status.JobStats) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	paused := new(atomic.Bool) // the process's claimants said the job is paused
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.claimLoop(ctx, job, sh, stats, paused)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// slotTTL is how long a claim lasts without renewal: a third of the job's
// lease (the presence's cadence), so a claimant stopped mid-chunk delays
// the reindex that long, and until a claim reaps it (claimShortFor).
func (e *Engine) slotTTL() time.Duration { return max(e.cfg.PresenceInterval, 300*time.Millisecond) }

// Polls of a claimant that failed, finds the job paused, or (the
// holder's own) finds no chunk yet back off from the first to the last; a
// standby's claimant finding no chunk waits for the process's chunk watch.
// While every slot is held, a claimant asks every claimPollBusy.
// holderClaimAge is how long a chunk waits for a standby before the
// holder's own claimant takes it.
const (
	claimPollFirst = 100 * time.Millisecond
	claimPollLast  = 2 * time.Second
	claimPollBusy  = 50 * time.Millisecond
	holderClaimAge = 500 * time.Millisecond
)

// claimShortFor is how long after a claim the long way (ClaimChunk, which
// reaps the lapsed claims) a claimant claims its next chunks the short way
// (jobstate.ClaimInSlot): a third of the slot lease, its renewal cadence,
// so a claim stopped mid-chunk is reaped within 4/3 of a slot lease.
func (e *Engine) claimShortFor() time.Duration { return e.slotTTL() / 3 }

// claimLoop is one claimant: it claims a chunk, does it, and again; with
// nothing to claim, or the job paused, it polls, backing off. paused is
// shared by the process's claimants of job, so that one of them says when
// they stop for a pause and when they go on.
//
// A chunk's last steps (its result, its high mark, its slot given back)
// are round trips to MongoDB that need none of the process's CPU: they go
// on while the claimant claims, reads and transforms its next chunk, one
// chunk's at a time. The claimant then holds two slots for a moment, each
// by a claim of its own, so the slot index still bounds the claims.
func (e *Engine) claimLoop(ctx context.Context, job *transform.Job, sh *sharedReindex, stats *status.JobStats, paused *atomic.Bool) {
	log := e.log.With("job", job.Name)
	poll := claimPollFirst
	// The holder leaves the chunks to the standbys while they keep up:
	// its own time goes to the stream and the destination. A chunk
	// nobody took for holderClaimAge it does itself.
	var minAge time.Duration
	if sh != nil {
		minAge = holderClaimAge
	}
	var said time.Time
	done := 0
	warn := func(err error) {
		if err != nil && !errors.Is(err, jobstate.ErrClaimLost) && ctx.Err() == nil && time.Since(said) > time.Minute {
			said = time.Now()
			log.Warn("a chunk of the shared reindex could not be done here; another process will", "error", err)
		}
	}
	// finishing is the last steps of the claimant's previous chunk, under
	// way: its seq, and its error once they are over.
	var finishing chan error
	var finishingSeq int64
	// finished takes the previous chunk's end: whether it was done (its
	// slot given back).
	finished := func(err error) bool {
		finishing = nil
		if err != nil {
			warn(err)
			return false
		}
		stats.Update(func(s *status.JobSnapshot) { s.Chunks++ })
		if done++; done == 1 {
			log.Info("did a chunk of the job's shared reindex", "seq", finishingSeq)
		}
		return true
	}
	defer func() {
		if finishing != nil {
			finished(<-finishing)
		}
	}()
	// The slot of the claimant's chunk before the one finishing, given
	// back (-1: none), and when the claimant last claimed the long way.
	free, prevSlot := -1, -1
	var reaped time.Time
	for ctx.Err() == nil {
		var c *jobstate.Claim
		var err error
		if free >= 0 && time.Since(reaped) < e.claimShortFor() {
			// Between two chunks, CPU the claimant could spend on the next
			// one waits for the claim: five round trips to a busy MongoDB
			// took a fifth of a chunk's transform.
			c, err = e.store.ClaimInSlot(ctx, job.Name, job.Hash, e.cfg.Process, free, e.slotTTL(), minAge)
		}
		if c == nil && err == nil {
			reaped = time.Now()
			c, err = e.store.ClaimChunk(ctx, job.Name, job.Hash, e.cfg.Process, e.slotTTL(), minAge)
		}
		free = -1
		if notePause(log, job.Name, paused, c, err) {
			// The holder applies nothing while paused: a claim now would
			// only leave its result waiting in the chunks collection.
			if sleep(ctx, poll) != nil {
				return
			}
			poll = min(2*poll, claimPollLast)
			continue
		}
		if errors.Is(err, jobstate.ErrSlotsBusy) {
			// A reindex runs: a slot frees as soon as a chunk is done,
			// the claimant's own previous one among them.
			poll = claimPollFirst
			t := time.NewTimer(claimPollBusy)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case err := <-finishing:
				finished(err)
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if err == nil && c != nil {
			poll = claimPollFirst
			var finish func() error
			finish, err = e.doClaim(ctx, job, sh, c)
			if err == nil {
				if finishing != nil {
					if finished(<-finishing) {
						free = prevSlot
					}
				}
				finishing, finishingSeq, prevSlot = make(chan error, 1), c.Seq, c.Slot
				go func(ch chan<- error) { ch <- finish() }(finishing)
				continue
			}
			if errors.Is(err, jobstate.ErrClaimLost) {
				continue
			}
		}
		if err == nil && c == nil && sh == nil {
			// No shared reindex runs: a standby waits for the process's
			// one watch to see chunks of the job published.
			poll = claimPollFirst
			if finishing != nil {
				finished(<-finishing)
			}
			if e.chunks.wait(ctx, job.Name, job.Hash) != nil {
				return
			}
			continue
		}
		warn(err)
		if sleep(ctx, poll) != nil {
			return
		}
		poll = min(2*poll, claimPollLast)
	}
}

// notePause says whether ClaimChunk's answer (c, err) was that the job is
// paused, and logs, once for the process's claimants (paused), when they
// stop for a pause and when they go on.
func notePause(log hclog.Logger, job string, paused *atomic.Bool, c *jobstate.Claim, err error) bool {
	if errors.Is(err, jobstate.ErrPaused) {
		if paused.CompareAndSwap(false, true) {
			log.Info("the job is paused: no chunk of its shared reindex is claimed here until `meilistream resume " + job + "`")
		}
		return true
	}
	// A claim, or chunks all taken, says the pause record was read and is
	// gone; no chunk at all says nothing of it.
	if ((err == nil && c != nil) || errors.Is(err, jobstate.ErrSlotsBusy)) && paused.CompareAndSwap(true, false) {
		log.Info("the job is no longer paused: claiming chunks of its shared reindex again")
	}
	return false
}

// doClaim does claim c up to its transform: the low mark, the read by _id,
// the transform and its encoding. It returns the rest, to be called once:
// the result (fenced), the high mark, the slot given back. The claim is
// renewed until the rest is over; lost, the work stops and writes no high
// mark.
func (e *Engine) doClaim(ctx context.Context, job *transform.Job, sh *sharedReindex, c *jobstate.Claim) (finish func() error, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(e.slotTTL() / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := e.store.RenewClaim(ctx, c, e.slotTTL()); errors.Is(err, jobstate.ErrClaimLost) {
					cancel(err)
					return
				}
			}
		}
	}()
	var end func()
	// over ends the claim's work: the session, the slot given back when
	// the chunk was not done (another claim does it at once), the renewal.
	over := func(err error) error {
		if end != nil {
			end()
		}
		if err != nil && !errors.Is(err, jobstate.ErrClaimLost) {
			_ = e.store.ReleaseClaim(context.WithoutCancel(ctx), c)
		}
		cancel(nil)
		<-renewed
		return err
	}
	src := Source{DB: e.source, State: e.stateName, Job: job, Log: e.log.With("job", job.Name), Wait: e.wait,
		Blame: func(_ context.Context, err error) error { return err }}
	ch := newChain(src, "shared reindex")
	sctx, marks, endSession, err := ch.session(ctx)
	if err != nil {
		return nil, over(err)
	}
	end = endSession
	if err := writeMark(sctx, marks, job.Name, claimMark(c.Run, c.Seq, c.Token, "lo")); err != nil {
		return nil, over(orCause(ctx, err))
	}
	read, err := ch.readIDs(sctx, c.IDs)
	if err != nil {
		return nil, over(orCause(ctx, err))
	}
	r, err := e.transformChunk(ctx, job, read.Items)
	if err != nil {
		return nil, over(orCause(ctx, err))
	}
	return func() error { return over(e.submitClaim(ctx, sctx, marks, job, sh, c, r)) }, nil
}

// submitClaim hands claim c's result r over: kept in memory for the
// holder's own claim, else written to MongoDB (fenced), then the high
// mark in the claim's session, then its slot is given back.
func (e *Engine) submitClaim(ctx, sctx context.Context, marks *mongo.Collection, job *transform.Job, sh *sharedReindex, c *jobstate.Claim, r *jobstate.ChunkResult) error {
	if sh != nil && sh.run == c.Run {
		if err := e.store.CheckClaim(ctx, c); err != nil {
			return err
		}
		sh.putLocal(c.Token, r)
	} else if err := e.store.WriteChunkResult(ctx, c, r); err != nil {
		return orCause(ctx, err)
	}
	if err := writeMark(sctx, marks, job.Name, claimMark(c.Run, c.Seq, c.Token, "hi")); err != nil {
		return orCause(ctx, err)
	}
	e.claimsDone.Add(1)
	if err := e.store.SubmitClaim(ctx, c); err != nil && !errors.Is(err, jobstate.ErrClaimLost) {
		return err
	}
	return nil
}

// orCause is err, or the cause of ctx's end when it ended (a lost claim).
func orCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil {
			return c
		}
	}
	return err
}

// writeMark writes mark into job's watermark document, with the majority
// write concern of marks (the chain's session orders the read after it).
func writeMark(ctx context.Context, marks *mongo.Collection, job, mark string) error {
	_, err := marks.UpdateOne(ctx, bson.D{{Key: "_id", Value: watermarkKey(job)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "mark", Value: mark}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "write a watermark of the shared reindex")
	}
	return nil
}

// transformChunk transforms a chunk's documents as the holder would (its
// lookups resolved here), into a result: a reindex in place deletes what
// the transform keeps out.
func (e *Engine) transformChunk(ctx context.Context, job *transform.Job, items []Item) (*jobstate.ChunkResult, error) {
	jc := e.jobCfg(job)
	inPlace := job.Reindex == "inplace" || job.Kind == jobdef.Mirror
	lk, err := e.lookups(ctx, jc, items)
	if err != nil {
		return nil, err
	}
	writes, skipped, bad, err := Transform(ctx, job, items, lk, inPlace)
	if err != nil {
		return nil, err
	}
	r := &jobstate.ChunkResult{Skipped: skipped}
	for _, w := range writes {
		cw := jobstate.ChunkWrite{ID: w.SourceID, Delete: w.Delete}
		switch d := w.Doc.(type) {
		case json.RawMessage:
			cw.JSON = d
		case bson.Raw:
			cw.Doc = d
		}
		r.Writes = append(r.Writes, cw)
	}
	for _, b := range bad {
		r.Errors = append(r.Errors, jobstate.ChunkError{ID: b.ID, Op: string(b.Op), Code: string(errs.CodeOf(b.Err)), Message: b.Err.Error()})
	}
	return r, nil
}
