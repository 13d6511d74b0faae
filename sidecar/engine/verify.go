package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/jobstate"
	"github.com/meilistream/meilistream/sidecar/sink"
	"github.com/meilistream/meilistream/transform"
)

// Verify (`meilistream verify NAME`) reads the job's collection in _id
// order, in chunks, runs each document through the job's transform (the
// reindex's code path, lookups included), reads the same ids back from
// the destination (sink.Fetch) and compares; then it walks the
// destination's ids (sink.Keys, the walk the in-place sweep takes) for
// the ones the collection does not hold. A document differs as missing
// (the transform gives one the destination lacks), stale (both have it,
// they differ) or extra (the destination holds one the transform does not
// give: deleted, turned away, or never from the collection).
//
// No false positives under churn: a document read while the job's holder
// had not yet applied its latest change differs for a moment. So a
// differing id is only a candidate, re-checked once the job's durable
// position has passed the cluster time of the read (the holder is asked
// to record it at once through the job's wait document, as GET /wait
// does, which its stream follows): the source and the destination are
// read again, the destination first. A candidate whose source document did not
// change between two reads and still differs in two such rounds is drift;
// one that matches is not; one whose source keeps changing is counted
// skippedChanging after verifyMaxRounds. Without a holder (no process
// follows the job) nothing moves the destination: one round re-reads
// both, and what differs is drift (the report says it was not followed).

// Verify's bounds.
const (
	// verifyConfirmRounds is how many re-check rounds in a row a candidate
	// must differ in, its source unchanged, to be drift: a document that
	// changed and changed back between two reads can differ once.
	verifyConfirmRounds = 2
	// verifyMaxRounds bounds the re-checks of a document that keeps
	// changing.
	verifyMaxRounds = 6
	// verifyCandidates is how many candidates wait before a re-check
	// round (their ids and sums only: memory stays bounded).
	verifyCandidates = 1000
	// verifyRepairIDs and verifyRepairBytes bound one repair request (one
	// document in the state collection).
	verifyRepairIDs   = 5000
	verifyRepairBytes = 1 << 20
	// verifyFetchBytes bounds the source bytes of the documents read back
	// from the destination at once, verifyFetchIDs the ids of a re-check's
	// read back (documents of unknown size).
	verifyFetchBytes = 8 << 20
	verifyFetchIDs   = 100
)

// DriftKind is how a document differs.
type DriftKind int

// Drift kinds.
const (
	DriftNone DriftKind = iota
	DriftMissing
	DriftStale
	DriftExtra
)

func (k DriftKind) String() string {
	switch k {
	case DriftMissing:
		return "missing"
	case DriftStale:
		return "stale"
	case DriftExtra:
		return "extra"
	}
	return "none"
}

// VerifySample is one differing document: its source _id and, when
// stale, the first field that differs.
type VerifySample struct {
	ID    bson.RawValue
	Field string
}

// VerifyReport is what a verify found.
type VerifyReport struct {
	Checked               int64 // source documents compared
	Missing, Stale, Extra int64
	Errors                int64 // documents the transform failed on: errors, never drift
	SkippedChanging       int64 // documents that kept changing through every re-check
	Repaired              int64 // differing documents written again (or deleted) durably
	Samples               map[DriftKind][]VerifySample
	Duration              time.Duration
	// Followed: a holder followed the job, so differences were re-checked
	// past its durable position. Without one, a difference may be a change
	// the job has not applied yet.
	Followed bool
}

// Drift is the number of differing documents.
func (r *VerifyReport) Drift() int64 { return r.Missing + r.Stale + r.Extra }

// VerifyOptions tune a verify.
type VerifyOptions struct {
	// Rate bounds the documents read per second (0: no bound).
	Rate float64
	// Show is how many samples of each kind are kept.
	Show int
	// Followed says a holder follows the job: re-checks wait for its
	// durable position.
	Followed bool
	// PositionWait bounds each wait for the holder's position (default:
	// twice the position interval, at least a minute).
	PositionWait time.Duration
	// Repair, when set, gets the drift's ids in batches (missing, stale
	// and extra alike: each is read from the collection again and written,
	// or deleted when the collection or the transform no longer gives it)
	// and returns how many it made durable.
	Repair func(ctx context.Context, ids []bson.RawValue) (int64, error)
	// Log, when set, hears of the progress.
	Log hclog.Logger
	// Resume continues a pass from its checkpoint (a background verify
	// after a restart or a takeover): its counts, its phase, its last _id.
	Resume *jobstate.VerifyPass
	// Checkpoint, when set, records the pass so far: every
	// CheckpointEvery while the collection is walked (once no candidate
	// waits, so the counts are whole) and when the destination's walk
	// begins.
	Checkpoint      func(ctx context.Context, p *jobstate.VerifyPass) error
	CheckpointEvery time.Duration
	// Progress, when set, hears of the documents checked so far.
	Progress func(checked int64)
}

// Verify compares job's destination dst with what its transform makes of
// the collection. An error means the verify did not finish (a server
// refused or did not answer, the holder did not move, the job is not in a
// state to verify); the report then counts what was found before it and
// must not be taken as a result.
func (e *Engine) Verify(ctx context.Context, job *transform.Job, dst sink.Sink, o VerifyOptions) (*VerifyReport, error) {
	v, err := e.newVerifier(ctx, job, dst, o)
	if err != nil {
		return nil, err
	}
	defer v.sess.EndSession(context.WithoutCancel(ctx))
	err = v.run(ctx)
	v.rep.Duration = time.Since(v.start)
	return v.rep, err
}

type verifier struct {
	e    *Engine
	jc   jobConfig
	job  *transform.Job
	dst  sink.Sink
	o    VerifyOptions
	log  hclog.Logger
	rep  *VerifyReport
	sess *mongo.Session
	coll *mongo.Collection // majority read concern

	start time.Time
	paced int64 // documents read, for the rate

	cands   []*verifyCandidate
	pending map[string]bool // keys of cands
	repair  []bson.RawValue
	rbytes  int

	nonce string
	marks int
}

// verifyCandidate is a differing id waiting for its re-check.
type verifyCandidate struct {
	id     bson.RawValue
	sum    string         // the source document's sum when read ("": absent)
	at     bson.Timestamp // the cluster time of that read
	kind   DriftKind
	field  string
	stable int // rounds in a row it differed with its source unchanged
	rounds int
}

func (e *Engine) newVerifier(ctx context.Context, job *transform.Job, dst sink.Sink, o VerifyOptions) (*verifier, error) {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.PositionWait <= 0 {
		o.PositionWait = max(2*e.cfg.PositionInterval, time.Minute)
	}
	sess, err := e.source.Client().StartSession(options.Session().SetCausalConsistency(true))
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job.Name, err, "start a session to verify")
	}
	v := &verifier{
		e: e, jc: e.jobCfg(job), job: job, dst: dst, o: o, log: o.Log, sess: sess,
		coll:    jobColl(e.source, &job.Job, options.Collection().SetReadConcern(readconcern.Majority())),
		rep:     &VerifyReport{Samples: map[DriftKind][]VerifySample{}, Followed: o.Followed},
		start:   time.Now(),
		pending: map[string]bool{},
		nonce:   newVerifyNonce(),
	}
	return v, nil
}

func newVerifyNonce() string {
	s := sha256.Sum256([]byte(time.Now().String()))
	return hex.EncodeToString(s[:6])
}

func (v *verifier) run(ctx context.Context) error {
	if err := v.ready(ctx); err != nil {
		return err
	}
	var last bson.RawValue
	phase := "source"
	if r := v.o.Resume; r != nil {
		v.rep.counts(r.Counts)
		last, phase = r.LastID, r.Phase
	}
	if phase != "destination" {
		if err := v.walkSource(ctx, last); err != nil {
			return err
		}
		if err := v.checkpoint(ctx, "destination", bson.RawValue{}); err != nil {
			return err
		}
	}
	if err := v.walkDestination(ctx); err != nil {
		return err
	}
	for len(v.cands) > 0 {
		if err := v.recheck(ctx); err != nil {
			return err
		}
	}
	return v.flushRepair(ctx)
}

// ready refuses a job whose destination is not what its transform was
// last applied to: an unfinished reindex, no position, another transform.
func (v *verifier) ready(ctx context.Context) error {
	name := v.job.Name
	cp, err := v.e.store.ReadCheckpoint(ctx, name)
	if err != nil {
		return errs.Wrap(errs.Failed, name, err, "read the reindex checkpoint before verifying")
	}
	if cp != nil {
		return errs.New(errs.Failed, name, "a reindex of job %s is unfinished (%d documents done): verify once it is done (meilistream status shows it)", name, cp.Count)
	}
	pos, err := v.e.store.ReadPosition(ctx, name)
	if err != nil {
		return errs.Wrap(errs.Failed, name, err, "read the job's position before verifying")
	}
	if pos == nil {
		return errs.New(errs.Failed, name, "job %s has no recorded position: it has not finished a first reindex; verify once it has", name)
	}
	if pos.Hash != v.job.Hash && !legacyOf(v.job, pos.Hash) {
		return errs.New(errs.Failed, name, "job %s's destination was built with another transform (hash %s) than this one (%s): its holder reindexes it when it runs this transform; verify with the transform it runs", name, short(pos.Hash), short(v.job.Hash))
	}
	return nil
}

// chunkSize is how many documents one read takes: a reindex's part (half
// the page size: one cursor reply, so never more than the 16 MB MongoDB
// returns at once), at most a second's worth at the rate. Each chunk costs
// a read of the collection, a read back from the destination and a turn
// of the transform's workers, so bigger chunks cost less per document.
func (v *verifier) chunkSize() int {
	n := PartSize(v.jc.PageSize)
	if v.o.Rate > 0 {
		n = min(n, max(1, int(v.o.Rate)))
	}
	return n
}

// pace sleeps as long as reading n more documents at the rate takes.
func (v *verifier) pace(ctx context.Context, n int) error {
	if v.o.Rate <= 0 {
		return nil
	}
	v.paced += int64(n)
	due := v.start.Add(time.Duration(float64(v.paced) / v.o.Rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		return sleep(ctx, d)
	}
	return nil
}

// readAfter is the source's _id walk: one chunk after last.
func (v *verifier) readAfter(ctx context.Context, last bson.RawValue, n int, checked int64) ([]Item, bool, bson.Timestamp, error) {
	sctx := mongo.NewSessionContext(ctx, v.sess)
	for attempt := 0; ; attempt++ {
		items, final, err := readAfter(sctx, v.coll, v.job, last, n)
		if err == nil {
			return items, final, v.opTime(), nil
		}
		if ctx.Err() != nil || attempt >= 4 {
			return nil, false, bson.Timestamp{}, errs.Wrap(errs.Failed, v.job.Name, err, "read collection %s to verify (after %d documents)", v.job.Collection, checked)
		}
		if err := v.e.wait(ctx, attempt); err != nil {
			return nil, false, bson.Timestamp{}, err
		}
	}
}

// readIDs reads the documents of ids, one item each (Doc nil when the
// collection does not hold it), and the cluster time of the read.
func (v *verifier) readIDs(ctx context.Context, ids []bson.RawValue) ([]Item, bson.Timestamp, error) {
	sctx := mongo.NewSessionContext(ctx, v.sess)
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	var found map[string]bson.Raw
	for attempt := 0; ; attempt++ {
		var err error
		found, err = v.find(sctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}, retryFind(v.job))
		if err == nil {
			break
		}
		if ctx.Err() != nil || attempt >= 4 {
			return nil, bson.Timestamp{}, errs.Wrap(errs.Failed, v.job.Name, err, "read documents of collection %s again to re-check them", v.job.Collection)
		}
		if err := v.e.wait(ctx, attempt); err != nil {
			return nil, bson.Timestamp{}, err
		}
	}
	items := make([]Item, len(ids))
	for i, id := range ids {
		items[i] = Item{ID: id, Doc: found[jobdef.IDKey(id)], Op: transform.OpReindex}
	}
	return items, v.opTime(), nil
}

func (v *verifier) find(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder) (map[string]bson.Raw, error) {
	cur, err := v.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	found := map[string]bson.Raw{}
	for cur.Next(ctx) {
		d := append(bson.Raw(nil), cur.Current...)
		found[jobdef.IDKey(d.Lookup("_id"))] = d
	}
	return found, cur.Err()
}

// findKeys says which of ids the collection holds, reading their _ids
// alone: the walk of the destination's ids needs no document, nor a copy
// of one. It reads every id of the destination, so the keys are made
// without a string each: in one buffer, a map of views into it.
func (v *verifier) findKeys(ctx context.Context, ids []bson.RawValue) (idKeys, error) {
	cur, err := v.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: idArray(ids)}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(len(ids))))
	if err != nil {
		return idKeys{}, err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	var buf []byte
	var ends []int
	for cur.Next(ctx) {
		buf = jobdef.AppendIDKey(buf, cur.Current.Lookup("_id"))
		ends = append(ends, len(buf))
	}
	if err := cur.Err(); err != nil {
		return idKeys{}, err
	}
	all := string(buf)
	k := idKeys{set: make(map[string]struct{}, len(ends))}
	start := 0
	for _, end := range ends {
		k.set[all[start:end]] = struct{}{}
		start = end
	}
	return k, nil
}

// idKeys is a set of _ids by jobdef.IDKey.
type idKeys struct {
	set     map[string]struct{}
	scratch []byte
}

// has says whether the set holds id.
func (k *idKeys) has(id bson.RawValue) bool {
	k.scratch = jobdef.AppendIDKey(k.scratch[:0], id)
	_, ok := k.set[string(k.scratch)]
	return ok
}

// idArray is ids as one BSON array, built as bytes: the $in of a page of
// the destination's ids, without the driver's reflection over each.
func idArray(ids []bson.RawValue) bson.RawValue {
	idx, b := bsoncore.ReserveLength(make([]byte, 0, 5+len(ids)*16))
	var key []byte
	for i, id := range ids {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		b = bsoncore.AppendHeader(b, bsoncore.Type(id.Type), string(key))
		b = append(b, id.Value...)
	}
	b = append(b, 0)
	return bson.RawValue{Type: bson.TypeArray, Value: bsoncore.UpdateLength(b, idx, int32(len(b)-int(idx)))}
}

// opTime is the cluster time of the session's last read.
func (v *verifier) opTime() bson.Timestamp {
	if t := v.sess.OperationTime(); t != nil {
		return *t
	}
	return bson.Timestamp{}
}

// walkSource compares the collection, chunk by chunk, with the
// destination. The next chunk is read, and read back from the
// destination, while one is transformed and compared (so two chunks are
// in memory at most): verify's own reads then wait less, and its
// transform's workers are less often idle. The session is the reading's
// alone while it runs: a re-check or a checkpoint first waits for it.
func (v *verifier) walkSource(ctx context.Context, last bson.RawValue) error {
	n := v.chunkSize()
	saved := time.Now()
	ahead := v.readAhead(ctx, last, n, v.rep.Checked)
	defer func() { ahead.wait() }() // no read outlives the walk: the session ends after it
	for {
		c := ahead.wait()
		if c.err != nil {
			return c.err
		}
		items := c.items
		if len(items) > 0 {
			last = items[len(items)-1].ID
			last = bson.RawValue{Type: last.Type, Value: append([]byte(nil), last.Value...)}
		}
		if !c.final {
			if err := v.pace(ctx, len(items)); err != nil {
				return err
			}
			ahead = v.readAhead(ctx, last, n, v.rep.Checked+int64(len(items)))
		}
		if len(items) > 0 {
			v.rep.Checked += int64(len(items))
			res, err := v.judge(ctx, items, c.have)
			if err != nil {
				return err
			}
			for i, r := range res {
				switch {
				case r.err:
					v.rep.Errors++
				case r.kind != DriftNone:
					v.candidate(items[i], c.at, r)
				}
			}
			if len(v.cands) >= verifyCandidates {
				ahead.hold()
				if err := v.recheck(ctx); err != nil {
					return err
				}
			}
			if v.o.Progress != nil {
				v.o.Progress(v.rep.Checked)
			}
		}
		if c.final {
			return nil
		}
		if v.o.Checkpoint != nil && time.Since(saved) >= v.o.CheckpointEvery {
			ahead.hold()
			if err := v.checkpoint(ctx, "source", last); err != nil {
				return err
			}
			saved = time.Now()
		}
	}
}

// sourceChunk is one chunk of the collection and what the destination
// holds of its ids.
type sourceChunk struct {
	items []Item
	final bool
	at    bson.Timestamp // the cluster time of the read
	have  [][]byte
	err   error
}

// chunkAhead is a chunk being read in a goroutine of its own.
type chunkAhead struct {
	ch   chan sourceChunk
	got  *sourceChunk
	done bool
}

// readAhead starts reading the chunk after last (checked: the documents
// compared before it, for messages).
func (v *verifier) readAhead(ctx context.Context, last bson.RawValue, n int, checked int64) *chunkAhead {
	a := &chunkAhead{ch: make(chan sourceChunk, 1)}
	go func() { a.ch <- v.readChunk(ctx, last, n, checked) }()
	return a
}

// hold waits until the read has ended, keeping its chunk for wait.
func (a *chunkAhead) hold() {
	if a.got == nil && !a.done {
		c := <-a.ch
		a.got = &c
	}
}

// wait returns the chunk read (once; later calls return an empty chunk).
func (a *chunkAhead) wait() sourceChunk {
	a.hold()
	if a.done {
		return sourceChunk{final: true}
	}
	a.done = true
	return *a.got
}

// readChunk reads the chunk after last and the destination's documents
// of its ids.
func (v *verifier) readChunk(ctx context.Context, last bson.RawValue, n int, checked int64) sourceChunk {
	items, final, at, err := v.readAfter(ctx, last, n, checked)
	if err != nil {
		return sourceChunk{err: err}
	}
	have, err := v.fetchChunk(ctx, items, checked)
	if err != nil {
		return sourceChunk{err: err}
	}
	return sourceChunk{items: items, final: final, at: at, have: have}
}

// walkDestination walks the destination's ids for those the collection
// does not hold: each is a candidate extra.
func (v *verifier) walkDestination(ctx context.Context) error {
	err := v.dst.Keys(ctx, func(ids []bson.RawValue) error {
		if len(ids) == 0 {
			return nil
		}
		sctx := mongo.NewSessionContext(ctx, v.sess)
		var found idKeys
		for attempt := 0; ; attempt++ {
			var err error
			found, err = v.findKeys(sctx, ids)
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt >= 4 {
				return errs.Wrap(errs.Failed, v.job.Name, err, "look up the destination's ids in collection %s", v.job.Collection)
			}
			if err := v.e.wait(ctx, attempt); err != nil {
				return err
			}
		}
		at := v.opTime()
		for _, id := range ids {
			if !found.has(id) {
				v.candidate(Item{ID: id}, at, verifyResult{kind: DriftExtra})
			}
		}
		if len(v.cands) >= verifyCandidates {
			if err := v.recheck(ctx); err != nil {
				return err
			}
		}
		return v.pace(ctx, len(ids))
	})
	if err != nil {
		return v.destErr(err, "walk the destination's ids", v.rep.Checked)
	}
	return nil
}

// destErr says what verify was doing when the destination failed it.
func (v *verifier) destErr(err error, what string, checked int64) error {
	var e *errs.Error
	if errors.As(err, &e) && e.Code != errs.Failed {
		return err
	}
	return errs.Wrap(errs.Failed, v.job.Name, err, "%s (after %d documents checked)", what, checked)
}

func (v *verifier) candidate(it Item, at bson.Timestamp, r verifyResult) {
	k := jobdef.IDKey(it.ID)
	if v.pending[k] {
		return
	}
	v.pending[k] = true
	id := bson.RawValue{Type: it.ID.Type, Value: append([]byte(nil), it.ID.Value...)}
	v.cands = append(v.cands, &verifyCandidate{id: id, sum: docSum(it.Doc), at: at, kind: r.kind, field: r.field})
}

func docSum(doc bson.Raw) string {
	if doc == nil {
		return ""
	}
	s := sha256.Sum256(doc)
	return string(s[:])
}

// recheck runs one re-check round over the waiting candidates: once the
// holder's durable position passed their reads, the destination is read
// again, then the source.
func (v *verifier) recheck(ctx context.Context) error {
	cs := v.cands
	v.cands = nil
	if v.o.Followed {
		var latest bson.Timestamp
		for _, c := range cs {
			if c.at.After(latest) {
				latest = c.at
			}
		}
		if err := v.waitPosition(ctx, latest, len(cs)); err != nil {
			return err
		}
	}
	ids := make([]bson.RawValue, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	have, err := v.fetchIDs(ctx, ids, "read documents back from the destination to re-check them")
	if err != nil {
		return err
	}
	items, at, err := v.readIDs(ctx, ids)
	if err != nil {
		return err
	}
	res, err := v.judge(ctx, items, have)
	if err != nil {
		return err
	}
	need := verifyConfirmRounds
	if !v.o.Followed {
		need = 1
	}
	v.log.Debug("re-checking differing documents", "documents", len(cs))
	for i, c := range cs {
		r, sum := res[i], docSum(items[i].Doc)
		c.rounds++
		switch {
		case r.err:
			v.rep.Errors++
		case r.kind == DriftNone:
		case sum != c.sum:
			c.sum, c.at, c.stable = sum, at, 0
			if c.rounds >= verifyMaxRounds {
				v.rep.SkippedChanging++
				break
			}
			v.cands = append(v.cands, c)
			continue
		default:
			c.stable++
			c.at, c.kind, c.field = at, r.kind, r.field
			if c.stable < need {
				v.cands = append(v.cands, c)
				continue
			}
			if err := v.confirm(ctx, c); err != nil {
				return err
			}
		}
		delete(v.pending, jobdef.IDKey(c.id))
	}
	return nil
}

// confirm counts c as drift and queues it for repair.
func (v *verifier) confirm(ctx context.Context, c *verifyCandidate) error {
	switch c.kind {
	case DriftMissing:
		v.rep.Missing++
	case DriftStale:
		v.rep.Stale++
	case DriftExtra:
		v.rep.Extra++
	}
	if s := v.rep.Samples[c.kind]; len(s) < v.o.Show {
		v.rep.Samples[c.kind] = append(s, VerifySample{ID: c.id, Field: c.field})
	}
	if v.o.Repair == nil {
		return nil
	}
	v.repair = append(v.repair, c.id)
	v.rbytes += len(c.id.Value) + 16
	if len(v.repair) >= verifyRepairIDs || v.rbytes >= verifyRepairBytes {
		return v.flushRepair(ctx)
	}
	return nil
}

func (v *verifier) flushRepair(ctx context.Context) error {
	if len(v.repair) == 0 || v.o.Repair == nil {
		return nil
	}
	ids := v.repair
	v.repair, v.rbytes = nil, 0
	n, err := v.o.Repair(ctx, ids)
	v.rep.Repaired += n
	if err != nil {
		return err
	}
	v.log.Info("repaired differing documents", "documents", len(ids), "repaired", n)
	return nil
}

// waitPosition waits until the holder made every change up to at
// durable, prompting it to record its position now and then.
func (v *verifier) waitPosition(ctx context.Context, at bson.Timestamp, n int) error {
	deadline := time.Now().Add(v.o.PositionWait)
	var prompted time.Time
	pause := 50 * time.Millisecond
	for {
		if v.passed(ctx, at) {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if time.Since(prompted) >= 2*time.Second {
			prompted = time.Now()
			if err := v.prompt(ctx); err != nil && ctx.Err() == nil {
				v.log.Warn("asking the job's holder to record its position failed; waiting for its own record", "error", err)
			}
		}
		if time.Now().After(deadline) {
			return errs.New(errs.Failed, v.job.Name, "the job's holder recorded no position past the reads of %d differing documents within %s, so they cannot be re-checked: "+
				"is it stalled or failing? (meilistream status %s)", n, v.o.PositionWait, v.job.Name)
		}
		if err := sleep(ctx, pause); err != nil {
			return err
		}
		pause = min(2*pause, time.Second)
	}
}

// prompt writes the job's wait document (read your writes): one more
// event in the holder's stream, at which it records its position as soon
// as everything before it is durable, instead of at its next position
// interval.
func (v *verifier) prompt(ctx context.Context) error {
	_, err := jobstate.MarkWait(ctx, v.e.source.Collection(v.e.stateName), v.job.Name)
	return err
}

// passed says whether the holder has made every change up to cluster
// time at durable: its recorded durable time, or, from a holder that
// records none, its position.
func (v *verifier) passed(ctx context.Context, at bson.Timestamp) bool {
	if d, err := jobstate.ReadDurable(ctx, v.e.source.Collection(v.e.stateName), v.job.Name); err == nil && !d.IsZero() {
		return !at.After(d)
	}
	pos, err := v.e.store.ReadPosition(ctx, v.job.Name)
	return err == nil && pos != nil && positionPassed(pos.Token, pos.WallTime, at)
}

// positionPassed says whether a position (its resume token's cluster
// time, lag.go's tokenTime, else its wall time) is at or past cluster time
// at.
func positionPassed(tok bson.Raw, wall time.Time, at bson.Timestamp) bool {
	if t, ok := tokenTime(tok); ok {
		return !at.After(t)
	}
	return wall.Unix() > int64(at.T)
}

// errsFor wraps err, what verify was doing, as FAILED unless it already
// carries a code of its own.
func errsFor(job string, err error, what string) error {
	var e *errs.Error
	if errors.As(err, &e) && e.Code != errs.Failed {
		return err
	}
	return errs.Wrap(errs.Failed, job, err, "%s", what)
}

// checkpoint records the pass so far, once every candidate is settled
// and every repair sent (so a resume counts each document once).
func (v *verifier) checkpoint(ctx context.Context, phase string, last bson.RawValue) error {
	if v.o.Checkpoint == nil {
		return nil
	}
	for len(v.cands) > 0 {
		if err := v.recheck(ctx); err != nil {
			return err
		}
	}
	if err := v.flushRepair(ctx); err != nil {
		return err
	}
	return v.o.Checkpoint(ctx, &jobstate.VerifyPass{Phase: phase, LastID: last, Hash: v.job.Hash, Counts: v.rep.Counts()})
}

// Counts are the report's counts, as a checkpoint keeps them.
func (r *VerifyReport) Counts() jobstate.VerifyCounts {
	return jobstate.VerifyCounts{Checked: r.Checked, Missing: r.Missing, Stale: r.Stale, Extra: r.Extra,
		Errors: r.Errors, SkippedChanging: r.SkippedChanging, Repaired: r.Repaired}
}

func (r *VerifyReport) counts(c jobstate.VerifyCounts) {
	r.Checked, r.Missing, r.Stale, r.Extra = c.Checked, c.Missing, c.Stale, c.Extra
	r.Errors, r.SkippedChanging, r.Repaired = c.Errors, c.SkippedChanging, c.Repaired
}
