package jobstate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
)

// A reindex shared by the pods publishes its chunks in the state
// collection, one document each, which any process running the job with
// the same transform claims through a slot lease:
//
//	{_id: {chunk: <job>, run: <the reindex's nonce>, seq: <n>},
//	 job: <job>, hash: <transform hash>, parallel: <slots>,
//	 ids: [<the chunk's _ids, in order>], leaseEpoch: <the holder's>,
//	 slot: <0..parallel-1>, token: <the claim's>, owner: <process>,
//	 expiresAt: <server date>, submitted: <true once its high mark is written>}
//
// slot, token, owner and expiresAt exist while the chunk is claimed. The
// unique partial index {job: 1, slot: 1} (partial on slot existing) makes
// "at most parallel claims of a job at once" a schema invariant: a second
// claim of a slot is a duplicate key, whoever's clock says what. Every
// staleness decision compares expiresAt with the server's $$NOW; a claim
// that lapsed is reaped (its slot, token and owner removed) by the next
// process that claims, so its holder's fenced writes (RenewClaim,
// WriteChunkResult, SubmitClaim filter on its token) miss from then on.
//
// A claim's result goes to the chunks collection (<state>_chunks), keyed
// by the claim's token, so that a high mark names exactly the result read
// in its window:
//
//	{_id: {job, run, seq, token}, ids: [<_id>...], kinds: <binary>,
//	 body: <binary>, errors: [{id, op, code, msg}], skipped: <n>,
//	 tooLarge: <bool>, parts: <n>}
//
// A result larger than MaxChunkResultBytes is split in parts of at most
// that size, each a document: the first under the key above, with parts
// its number of parts and tooLarge true (a holder of a version that
// reads one document takes it as a result to transform itself, never as
// the whole result), the others under {job, run, seq, token, part: i}.
//
// The holder deletes a chunk's documents (descriptor and results) once
// what it took from them is durable, and every chunk of another run when
// a reindex starts.

// SlotIndexKeys are the keys of the state collection's unique partial
// index of the slot leases.
var SlotIndexKeys = bson.D{{Key: "job", Value: 1}, {Key: "slot", Value: 1}}

// ErrClaimLost is returned (wrapped) by a fenced write of a claim whose
// lease lapsed and was reaped, or was taken by another claim.
var ErrClaimLost = errors.New("the chunk's slot lease was taken over")

// ErrSlotsBusy is returned by ClaimChunk when the job has chunks of the
// claimant's transform but none to claim now (every slot held, or every chunk claimed or too young): a
// reindex runs, worth asking again soon.
var ErrSlotsBusy = errors.New("every slot of the shared reindex is held")

// ErrPaused is returned by ClaimChunk when the job has chunks but is
// paused (its pause record, the one its holder reads): the holder applies
// no result while paused, so a claim would only leave one waiting in the
// chunks collection.
var ErrPaused = errors.New("the job is paused")

// MaxChunkResultBytes bounds each document of a chunk's result, well
// under the 16 MB MongoDB stores: a larger result is split in parts of at
// most this size. Only a result with one write that alone passes it is
// recorded as tooLarge, and the holder transforms that chunk itself.
const MaxChunkResultBytes = 8 << 20

// resultPartOverhead is what a result document's fields other than its
// writes and errors take, with room to spare: its key, the field names,
// skipped, tooLarge and parts.
const resultPartOverhead = 1 << 10

// SharedChunk is one published chunk of a shared reindex.
type SharedChunk struct {
	Job      string
	Run      string // the reindex's nonce
	Seq      int64
	Hash     string // the transform hash a claimant must run
	Parallel int    // the slots a job's chunks may hold at once
	IDs      []bson.RawValue
}

// Claim is one process's slot lease on a chunk.
type Claim struct {
	SharedChunk
	Slot  int
	Token string
	Owner string
}

// ChunkWrite is one write of a chunk's result: a delete, a search
// document's JSON or a mirror's BSON document.
type ChunkWrite struct {
	ID     bson.RawValue
	Delete bool
	JSON   []byte
	Doc    bson.Raw
}

// ChunkError is one document a claimant's transform failed on.
type ChunkError struct {
	ID      bson.RawValue
	Op      string
	Code    string
	Message string
}

// ChunkResult is what a claim made of its chunk.
type ChunkResult struct {
	Writes  []ChunkWrite
	Errors  []ChunkError
	Skipped int
	// TooLarge: one of the result's writes alone would not fit
	// MaxChunkResultBytes; it holds nothing and the holder transforms the
	// chunk itself.
	TooLarge bool
}

func chunkKey(job, run string, seq int64) bson.D {
	return bson.D{{Key: "chunk", Value: job}, {Key: "run", Value: run}, {Key: "seq", Value: seq}}
}

// resultKey is the key of part part of a claim's result: the first part
// has no part field.
func resultKey(job, run string, seq int64, token string, part int) bson.D {
	k := bson.D{{Key: "job", Value: job}, {Key: "run", Value: run}, {Key: "seq", Value: seq}, {Key: "token", Value: token}}
	if part > 0 {
		k = append(k, bson.E{Key: "part", Value: part})
	}
	return k
}

// chunks is the results collection beside the state collection.
func (s *Store) chunks() *mongo.Collection {
	return s.state.Database().Collection(s.state.Name() + "_chunks")
}

// ChunksCollection is the name of the results collection of the state
// collection state.
func ChunksCollection(state string) string { return state + "_chunks" }

// EnsureSlotIndex creates the unique partial index of the slot leases
// (SlotIndexKeys) if it is not there. Without it the claims would still
// be fenced, but "at most parallel at once" would rest on every process
// reading the slots before it claims: a shared reindex does not start
// without it.
func (s *Store) EnsureSlotIndex(ctx context.Context) error {
	_, err := s.state.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: SlotIndexKeys,
		Options: options.Index().SetUnique(true).SetName("slot_lease").
			SetPartialFilterExpression(bson.D{{Key: "slot", Value: bson.D{{Key: "$exists", Value: true}}}}),
	})
	var se mongo.ServerError
	if err == nil || (errors.As(err, &se) && se.HasErrorCode(85)) {
		return nil
	}
	return errs.Wrap(errs.Failed, "", err, "create the slot leases' unique index {job: 1, slot: 1} on %s (a reindex shared by the pods needs it; grant createIndex, or set parallel: 1)", s.state.Name())
}

// PublishChunk writes the chunk c, claimable from now on, stamped with
// the holder's lease epoch.
func (s *Store) PublishChunk(ctx context.Context, l Fence, c SharedChunk) error {
	if err := l.Err(); err != nil {
		return err
	}
	ids := rawArray(c.IDs)
	set := bson.D{
		{Key: "job", Value: bson.D{{Key: "$literal", Value: c.Job}}}, {Key: "hash", Value: bson.D{{Key: "$literal", Value: c.Hash}}},
		{Key: "parallel", Value: c.Parallel}, {Key: "ids", Value: bson.D{{Key: "$literal", Value: ids}}},
		{Key: fenceField, Value: l.Epoch()}, {Key: "publishedAt", Value: "$$NOW"},
	}
	_, err := s.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: chunkKey(c.Job, c.Run, c.Seq)}},
		mongo.Pipeline{{{Key: "$set", Value: set}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return errs.Wrap(errs.Failed, c.Job, err, "publish chunk %d of the shared reindex", c.Seq)
	}
	return nil
}

// rawArray is ids as one BSON array, copied value by value: a chunk's
// thousands of _ids encoded by reflection, one interface value each, cost
// the holder a sixth of its CPU in a shared reindex.
func rawArray(ids []bson.RawValue) bson.RawValue {
	at, b := bsoncore.AppendArrayStart(make([]byte, 0, 16+len(ids)*24))
	for i, id := range ids {
		// An element: its type, its key (the index) as a C string, its value.
		b = append(b, byte(id.Type))
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(append(b, 0), id.Value...)
	}
	b, _ = bsoncore.AppendArrayEnd(b, at)
	return bson.RawValue{Type: bson.TypeArray, Value: b}
}

// reap frees the job's claims whose lease lapsed by the server's clock.
func (s *Store) reap(ctx context.Context, job string) (int64, error) {
	filter := bson.D{
		{Key: "_id.chunk", Value: job},
		{Key: "slot", Value: bson.D{{Key: "$exists", Value: true}}},
		{Key: "$expr", Value: bson.D{{Key: "$lt", Value: bson.A{"$expiresAt", "$$NOW"}}}},
	}
	res, err := s.state.UpdateMany(ctx, filter, bson.D{{Key: "$unset", Value: bson.D{
		{Key: "slot", Value: ""}, {Key: "token", Value: ""}, {Key: "owner", Value: ""}, {Key: "expiresAt", Value: ""},
	}}})
	if err != nil {
		return 0, err
	}
	return res.ModifiedCount, nil
}

// ReapClaims frees the job's claims whose lease lapsed (by the server's
// clock) and returns how many.
func (s *Store) ReapClaims(ctx context.Context, job string) (int64, error) {
	n, err := s.reap(ctx, job)
	if err != nil {
		return 0, errs.Wrap(errs.Failed, job, err, "reap the lapsed slot leases of the shared reindex")
	}
	return n, nil
}

// ClaimChunk reaps the job's lapsed claims, then claims the first
// unclaimed, unsubmitted chunk of the job published for hash at least
// minAge ago (the server's clock) in one of its free slots, leased for
// ttl from the server's now: nil, nil when the job has no chunk,
// ErrPaused when it has some but is paused, ErrSlotsBusy when it has
// some but none to claim now.
func (s *Store) ClaimChunk(ctx context.Context, job, hash, owner string, ttl, minAge time.Duration) (*Claim, error) {
	// With no chunk (no shared reindex runs: nearly always) one read
	// answers: an idle claimant costs MongoDB that alone. It also says
	// how many slots the job's chunks may hold.
	var any struct {
		Parallel int `bson:"parallel"`
	}
	err := s.state.FindOne(ctx, bson.D{{Key: "_id.chunk", Value: job}, {Key: "hash", Value: hash}},
		options.FindOne().SetProjection(bson.D{{Key: "parallel", Value: 1}})).Decode(&any)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "find a chunk of the shared reindex to claim")
	}
	// Read only when there are chunks, so that an idle claimant still
	// costs one read a poll.
	if p, err := s.ReadPause(ctx, job); err != nil {
		return nil, err
	} else if p != nil {
		return nil, ErrPaused
	}
	if _, err := s.reap(ctx, job); err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "reap the lapsed slot leases of the shared reindex")
	}
	free, err := s.freeSlots(ctx, job, any.Parallel)
	if err != nil {
		return nil, err
	}
	token := newToken()
	for _, slot := range free {
		c, err := s.claimFirst(ctx, job, hash, owner, token, slot, ttl, minAge)
		if mongo.IsDuplicateKeyError(err) {
			continue // another process took that slot meanwhile
		}
		if err != nil {
			return nil, errs.Wrap(errs.Failed, job, err, "claim a chunk of the shared reindex")
		}
		if c == nil {
			return nil, ErrSlotsBusy // every chunk claimed, or too young
		}
		return c, nil
	}
	return nil, ErrSlotsBusy // every free slot went to others
}

// ClaimInSlot is ClaimChunk's short way for a claimant that has just
// done a chunk of job, while a shared reindex runs: it reads the pause
// record, then claims the first chunk it could take in slot (the slot of
// the claimant's chunk before, given back), in two round trips instead of
// ClaimChunk's five. nil, nil when that slot is another claim's or no
// chunk is there to take: ClaimChunk then says which, and reaps. It
// reaps nothing itself: a caller uses it only for a moment after a
// ClaimChunk, so lapsed claims are still reaped that often.
func (s *Store) ClaimInSlot(ctx context.Context, job, hash, owner string, slot int, ttl, minAge time.Duration) (*Claim, error) {
	if p, err := s.ReadPause(ctx, job); err != nil {
		return nil, err
	} else if p != nil {
		return nil, ErrPaused
	}
	c, err := s.claimFirst(ctx, job, hash, owner, newToken(), slot, ttl, minAge)
	if mongo.IsDuplicateKeyError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "claim a chunk of the shared reindex")
	}
	return c, nil
}

// claimFirst claims, in one write, the first chunk of job a claim could
// take (published for hash at least minAge ago, unclaimed, unsubmitted)
// in slot: nil when there is none; a duplicate key error when the slot
// is another chunk's. Picking and claiming at once, claimants that ask
// together each get a chunk rather than all but one losing the first.
func (s *Store) claimFirst(ctx context.Context, job, hash, owner, token string, slot int, ttl, minAge time.Duration) (*Claim, error) {
	filter := bson.D{
		{Key: "_id.chunk", Value: job}, {Key: "hash", Value: hash},
		{Key: "slot", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "submitted", Value: bson.D{{Key: "$ne", Value: true}}},
		// A slot the chunk's run has (a claimant's slot of a run before
		// may be past this one's parallel).
		{Key: "parallel", Value: bson.D{{Key: "$gt", Value: slot}}},
		{Key: "$expr", Value: bson.D{{Key: "$lte", Value: bson.A{"$publishedAt", bson.D{{Key: "$subtract", Value: bson.A{"$$NOW", minAge.Milliseconds()}}}}}}},
	}
	set := bson.D{
		{Key: "slot", Value: slot},
		{Key: "token", Value: bson.D{{Key: "$literal", Value: token}}},
		{Key: "owner", Value: bson.D{{Key: "$literal", Value: owner}}},
		{Key: "expiresAt", Value: bson.D{{Key: "$add", Value: bson.A{"$$NOW", ttl.Milliseconds()}}}},
	}
	var d struct {
		ID struct {
			Run string `bson:"run"`
			Seq int64  `bson:"seq"`
		} `bson:"_id"`
		Parallel int             `bson:"parallel"`
		IDs      []bson.RawValue `bson:"ids"`
	}
	err := s.state.FindOneAndUpdate(ctx, filter, mongo.Pipeline{{{Key: "$set", Value: set}}},
		options.FindOneAndUpdate().SetSort(bson.D{{Key: "_id.seq", Value: 1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &Claim{SharedChunk: SharedChunk{Job: job, Run: d.ID.Run, Seq: d.ID.Seq, Hash: hash, Parallel: d.Parallel, IDs: d.IDs},
		Slot: slot, Token: token, Owner: owner}, nil
}

// freeSlots returns the slots of [0, parallel) no claim of job holds, in
// a random order (claimants starting together try different ones).
func (s *Store) freeSlots(ctx context.Context, job string, parallel int) ([]int, error) {
	cur, err := s.state.Find(ctx, bson.D{{Key: "job", Value: job}, {Key: "slot", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(bson.D{{Key: "slot", Value: 1}}))
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the slot leases of the shared reindex")
	}
	defer cur.Close(ctx)
	used := map[int]bool{}
	for cur.Next(ctx) {
		var d struct {
			Slot int `bson:"slot"`
		}
		if err := cur.Decode(&d); err == nil {
			used[d.Slot] = true
		}
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the slot leases of the shared reindex")
	}
	var free []int
	for i := 0; i < max(parallel, 1); i++ {
		if !used[i] {
			free = append(free, i)
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	return free, nil
}

// RenewClaim extends c's lease by ttl from the server's now; ErrClaimLost
// when it lapsed and was reaped or the chunk is gone.
func (s *Store) RenewClaim(ctx context.Context, c *Claim, ttl time.Duration) error {
	res, err := s.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: chunkKey(c.Job, c.Run, c.Seq)}, {Key: "token", Value: c.Token}},
		mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$add", Value: bson.A{"$$NOW", ttl.Milliseconds()}}}}}}}})
	if err != nil {
		return errs.Wrap(errs.Failed, c.Job, err, "renew the slot lease of chunk %d", c.Seq)
	}
	if res.MatchedCount == 0 {
		return errs.Wrap(errs.Failed, c.Job, ErrClaimLost, "renew the slot lease of chunk %d", c.Seq)
	}
	return nil
}

// WriteChunkResult stores r as c's result (in parts when larger than
// MaxChunkResultBytes), then checks, fenced by c's token, that the claim
// still holds: when it lapsed meanwhile the result is deleted again and
// ErrClaimLost returned (the claimant then writes no high mark, and the
// chunk's next claim does it over).
func (s *Store) WriteChunkResult(ctx context.Context, c *Claim, r *ChunkResult) error {
	parts := splitResult(r, MaxChunkResultBytes)
	if parts == nil {
		parts = []*ChunkResult{{TooLarge: true}}
	}
	// The first part last: written, it says the others are there.
	for i := len(parts) - 1; i >= 0; i-- {
		raw, err := bson.Marshal(resultDoc(c, parts[i], i, len(parts)))
		if err != nil {
			return errs.Wrap(errs.Failed, c.Job, err, "encode the result of chunk %d", c.Seq)
		}
		key := resultKey(c.Job, c.Run, c.Seq, c.Token, i)
		if _, err := s.chunks().ReplaceOne(ctx, bson.D{{Key: "_id", Value: key}}, raw, options.Replace().SetUpsert(true)); err != nil {
			return errs.Wrap(errs.Failed, c.Job, err, "write part %d of %d of the result of chunk %d", i+1, len(parts), c.Seq)
		}
	}
	if err := s.CheckClaim(ctx, c); err != nil {
		_, _ = s.chunks().DeleteMany(context.WithoutCancel(ctx), bson.D{
			{Key: "_id.job", Value: c.Job}, {Key: "_id.run", Value: c.Run}, {Key: "_id.seq", Value: c.Seq}, {Key: "_id.token", Value: c.Token}})
		return err
	}
	return nil
}

// splitResult splits r in parts whose documents each take at most limit
// bytes, in order: the writes, then the errors, as many to a part as fit;
// skipped goes with the first. nil when a write or an error alone does
// not fit.
func splitResult(r *ChunkResult, limit int) []*ChunkResult {
	cur := &ChunkResult{Skipped: r.Skipped}
	parts := []*ChunkResult{cur}
	size := resultPartOverhead
	// add makes room for n more bytes, in a new part when the current
	// one is full; false when n alone passes limit.
	add := func(n int) bool {
		if resultPartOverhead+n > limit {
			return false
		}
		if size+n > limit && (len(cur.Writes) > 0 || len(cur.Errors) > 0) {
			cur = &ChunkResult{}
			parts = append(parts, cur)
			size = resultPartOverhead
		}
		size += n
		return true
	}
	for _, w := range r.Writes {
		// The _id in the ids array (type, index key, value), its kind,
		// its document's length and the document.
		if !add(len(w.ID.Value) + 12 + 1 + 4 + len(w.JSON) + len(w.Doc)) {
			return nil
		}
		cur.Writes = append(cur.Writes, w)
	}
	for _, e := range r.Errors {
		if !add(len(e.ID.Value) + len(e.Op) + len(e.Code) + len(e.Message) + 64) {
			return nil
		}
		cur.Errors = append(cur.Errors, e)
	}
	return parts
}

// CheckClaim says whether c still holds its chunk (ErrClaimLost if not).
func (s *Store) CheckClaim(ctx context.Context, c *Claim) error {
	n, err := s.state.CountDocuments(ctx, bson.D{{Key: "_id", Value: chunkKey(c.Job, c.Run, c.Seq)}, {Key: "token", Value: c.Token}})
	if err != nil {
		return errs.Wrap(errs.Failed, c.Job, err, "check the slot lease of chunk %d", c.Seq)
	}
	if n == 0 {
		return errs.Wrap(errs.Failed, c.Job, ErrClaimLost, "write the result of chunk %d", c.Seq)
	}
	return nil
}

// resultDoc is r as stored: the writes' _ids in one array, their kinds
// (0 search JSON, 1 delete, 2 mirror document) in one binary and their
// documents one after the other in another, each after its length (4
// bytes, little endian): a few large values rather than one subdocument
// per write, cheap to encode for the claimant and to decode for the
// holder.
//
// Part part of parts: the first says how many there are, and when more
// than one that it is not the whole result (tooLarge, for a holder that
// reads one document).
func resultDoc(c *Claim, r *ChunkResult, part, parts int) bson.D {
	ids := make([]bson.RawValue, len(r.Writes))
	kinds := make([]byte, len(r.Writes))
	var size int
	for _, w := range r.Writes {
		size += 4 + len(w.JSON) + len(w.Doc)
	}
	body := make([]byte, 0, size)
	for i, w := range r.Writes {
		ids[i] = w.ID
		doc := w.JSON
		switch {
		case w.Delete:
			kinds[i], doc = 1, nil
		case w.Doc != nil:
			kinds[i], doc = 2, w.Doc
		}
		body = binary.LittleEndian.AppendUint32(body, uint32(len(doc)))
		body = append(body, doc...)
	}
	bad := make(bson.A, len(r.Errors))
	for i, e := range r.Errors {
		bad[i] = bson.D{{Key: "id", Value: e.ID}, {Key: "op", Value: e.Op}, {Key: "code", Value: e.Code}, {Key: "msg", Value: e.Message}}
	}
	d := bson.D{
		{Key: "_id", Value: resultKey(c.Job, c.Run, c.Seq, c.Token, part)},
		{Key: "ids", Value: rawArray(ids)}, {Key: "kinds", Value: bson.Binary{Data: kinds}}, {Key: "body", Value: bson.Binary{Data: body}},
		{Key: "errors", Value: bad}, {Key: "skipped", Value: r.Skipped}, {Key: "tooLarge", Value: r.TooLarge || parts > 1},
	}
	if part == 0 {
		d = append(d, bson.E{Key: "parts", Value: parts})
	}
	return d
}

// decodeResult reads a result document (resultDoc) into r, after what r
// holds already (the parts before).
func decodeResult(raw bson.Raw, r *ChunkResult) error {
	if v, ok := raw.Lookup("skipped").AsInt64OK(); ok {
		r.Skipped += int(v)
	}
	ids, _ := raw.Lookup("ids").ArrayOK()
	_, kinds, _ := raw.Lookup("kinds").BinaryOK()
	_, body, _ := raw.Lookup("body").BinaryOK()
	vals, err := ids.Values()
	if err != nil {
		return err
	}
	if len(vals) != len(kinds) {
		return errors.New("a chunk result's ids and kinds differ in number")
	}
	r.Writes = slices.Grow(r.Writes, len(vals))
	for i, id := range vals {
		if len(body) < 4 {
			return errors.New("a chunk result's body is cut short")
		}
		n := int(binary.LittleEndian.Uint32(body))
		if len(body) < 4+n {
			return errors.New("a chunk result's body is cut short")
		}
		doc := body[4 : 4+n : 4+n]
		body = body[4+n:]
		w := ChunkWrite{ID: id}
		switch kinds[i] {
		case 1:
			w.Delete = true
		case 2:
			w.Doc = bson.Raw(doc)
		default:
			w.JSON = doc
		}
		r.Writes = append(r.Writes, w)
	}
	bad, _ := raw.Lookup("errors").ArrayOK()
	evals, err := bad.Values()
	if err != nil {
		return err
	}
	for _, v := range evals {
		d, _ := v.DocumentOK()
		op, _ := d.Lookup("op").StringValueOK()
		code, _ := d.Lookup("code").StringValueOK()
		msg, _ := d.Lookup("msg").StringValueOK()
		r.Errors = append(r.Errors, ChunkError{ID: d.Lookup("id"), Op: op, Code: code, Message: msg})
	}
	return nil
}

// SubmitClaim frees c's slot once its high mark is written: the chunk is
// not claimed again (its result waits for the holder). ErrClaimLost when
// the claim was taken over before.
func (s *Store) SubmitClaim(ctx context.Context, c *Claim) error {
	res, err := s.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: chunkKey(c.Job, c.Run, c.Seq)}, {Key: "token", Value: c.Token}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "submitted", Value: true}}}, {Key: "$unset", Value: bson.D{
			{Key: "slot", Value: ""}, {Key: "expiresAt", Value: ""},
		}}})
	if err != nil {
		return errs.Wrap(errs.Failed, c.Job, err, "free the slot of chunk %d", c.Seq)
	}
	if res.MatchedCount == 0 {
		return errs.Wrap(errs.Failed, c.Job, ErrClaimLost, "free the slot of chunk %d", c.Seq)
	}
	return nil
}

// ReleaseClaim frees c's slot without a result (the claimant stops): the
// chunk is claimable again at once.
func (s *Store) ReleaseClaim(ctx context.Context, c *Claim) error {
	_, err := s.state.UpdateOne(ctx, bson.D{{Key: "_id", Value: chunkKey(c.Job, c.Run, c.Seq)}, {Key: "token", Value: c.Token}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "slot", Value: ""}, {Key: "token", Value: ""}, {Key: "owner", Value: ""}, {Key: "expiresAt", Value: ""}}}})
	if err != nil {
		return errs.Wrap(errs.Failed, c.Job, err, "release the slot of chunk %d", c.Seq)
	}
	return nil
}

// ReadChunkResult returns the result the claim token wrote for chunk seq
// of run, all its parts; nil, nil when there is none, or a part is
// missing (the chunk is then transformed by the holder).
func (s *Store) ReadChunkResult(ctx context.Context, job, run string, seq int64, token string) (*ChunkResult, error) {
	raw, err := s.chunks().FindOne(ctx, bson.D{{Key: "_id", Value: resultKey(job, run, seq, token, 0)}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the result of chunk %d", seq)
	}
	r := &ChunkResult{}
	if err := decodeResult(raw, r); err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the result of chunk %d", seq)
	}
	parts, _ := raw.Lookup("parts").AsInt64OK()
	if parts <= 1 {
		r.TooLarge, _ = raw.Lookup("tooLarge").BooleanOK()
		if r.TooLarge {
			r.Writes, r.Errors = nil, nil
		}
		return r, nil
	}
	// One read a part, by its whole _id: the key index finds it, and no
	// reply holds more than one part.
	for i := 1; i < int(parts); i++ {
		raw, err := s.chunks().FindOne(ctx, bson.D{{Key: "_id", Value: resultKey(job, run, seq, token, i)}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, nil
		}
		if err == nil {
			err = decodeResult(raw, r)
		}
		if err != nil {
			return nil, errs.Wrap(errs.Failed, job, err, "read part %d of %d of the result of chunk %d", i+1, parts, seq)
		}
	}
	return r, nil
}

// DeleteChunk deletes chunk seq of run: its descriptor and every result
// written for it.
func (s *Store) DeleteChunk(ctx context.Context, job, run string, seq int64) error {
	if _, err := s.chunks().DeleteMany(ctx, bson.D{{Key: "_id.job", Value: job}, {Key: "_id.run", Value: run}, {Key: "_id.seq", Value: seq}}); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete the results of chunk %d", seq)
	}
	if _, err := s.state.DeleteOne(ctx, bson.D{{Key: "_id", Value: chunkKey(job, run, seq)}}); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete chunk %d of the shared reindex", seq)
	}
	return nil
}

// DeleteChunks deletes every chunk of job (descriptors and results) but
// those of run keep ("": all): what an earlier holder's reindex left.
func (s *Store) DeleteChunks(ctx context.Context, job, keep string) error {
	f := bson.D{{Key: "_id.chunk", Value: job}}
	r := bson.D{{Key: "_id.job", Value: job}}
	if keep != "" {
		f = append(f, bson.E{Key: "_id.run", Value: bson.D{{Key: "$ne", Value: keep}}})
		r = append(r, bson.E{Key: "_id.run", Value: bson.D{{Key: "$ne", Value: keep}}})
	}
	if _, err := s.state.DeleteMany(ctx, f); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete the chunks of an earlier shared reindex")
	}
	if _, err := s.chunks().DeleteMany(ctx, r); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete the results of an earlier shared reindex")
	}
	return nil
}

// ChunkCounts returns how many chunks of job are published and not yet
// deleted, and how many results wait in the chunks collection.
func (s *Store) ChunkCounts(ctx context.Context, job string) (chunks, results int64, err error) {
	if chunks, err = s.state.CountDocuments(ctx, bson.D{{Key: "_id.chunk", Value: job}}); err != nil {
		return 0, 0, errs.Wrap(errs.Failed, job, err, "count the chunks of the shared reindex")
	}
	if results, err = s.chunks().CountDocuments(ctx, bson.D{{Key: "_id.job", Value: job}}); err != nil {
		return 0, 0, errs.Wrap(errs.Failed, job, err, "count the results of the shared reindex")
	}
	return chunks, results, nil
}

func newToken() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// JobsWithChunks returns which of jobs (job name -> the transform hash
// its claimants run) have chunks published for that hash: one read
// whatever the number of jobs, so that a process standing by for many
// jobs learns of a shared reindex promptly at the cost of one read a
// poll, not one per job.
func (s *Store) JobsWithChunks(ctx context.Context, jobs map[string]string) (map[string]bool, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	or := make(bson.A, 0, len(jobs))
	for job, hash := range jobs {
		or = append(or, bson.D{{Key: "_id.chunk", Value: job}, {Key: "hash", Value: hash}})
	}
	res := s.state.Distinct(ctx, "_id.chunk", bson.D{{Key: "$or", Value: or}})
	if err := res.Err(); errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	} else if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "look for chunks of shared reindexes to claim")
	}
	var names []string
	if err := res.Decode(&names); err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "look for chunks of shared reindexes to claim")
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}
