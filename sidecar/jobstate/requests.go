package jobstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
)

// `meilistream retry NAME` while another process holds the job's lease
// leaves a request in the state collection, which the holder takes and
// answers in place:
//
//	{_id: {retry: <job>, request: <random hex>}, state, requestedBy,
//	 requestedAt, expiresAt, holder, epoch, startedAt, doneAt,
//	 retried, written, gone, failed, durationMs, code, error}
//
// state is pending (written by the client), running (taken by the holder
// at its lease epoch), done (the counts say what the retry did) or failed
// (code and error say why it did not finish). Every time is the server's.
// A request is bounded: expiresAt is set when it is made (the client's
// wait); the client deletes its request once it has the answer or gives
// up, and a holder deletes the requests of its job that expired (a client
// that died). A running request whose holder lost the lease (an earlier
// epoch) is taken again by the next holder: a retry is idempotent.
//
// `meilistream pause`, `resume` and `reindex` ask the holder the same
// way: their requests have a kind (and a reindex its mode), and a done one
// a note saying what the holder did. Each is idempotent too (pausing a
// paused job, a reindex already running).

// Retry request states.
const (
	RequestPending = "pending"
	RequestRunning = "running"
	RequestDone    = "done"
	RequestFailed  = "failed"
)

func requestKey(job, id string) bson.D {
	return bson.D{{Key: "retry", Value: job}, {Key: "request", Value: id}}
}

// RetryRequest is one request of `meilistream retry` to the job's holder.
type RetryRequest struct {
	Job   string
	ID    string
	State string
	// Kind is what the request asks: empty for a retry of the recorded
	// documents, or PauseKind, ResumeKind, ReindexKind, RepairKind (verify
	// --repair: IDs are the documents to write again); Mode is a
	// reindex's ("inplace", "swap"; empty: as the job says).
	Kind   string
	Mode   string
	IDs    []bson.RawValue
	Holder string // the holder that took it
	Epoch  int64  // the lease epoch it took it at
	// The outcome, once done: as engine.RetrySummary counts them.
	Retried, Written, Gone, Failed int64
	Duration                       time.Duration
	// Code and Error say why a failed request did not finish; Note what
	// a done one did, in words (pause, resume, reindex).
	Code  string
	Error string
	Note  string
	// Started and Done are the server times the holder took and answered
	// the request.
	Started, Done time.Time
}

// The kinds of request besides a retry: `meilistream pause`, `resume`
// and `reindex` while another process holds the job's lease.
const (
	PauseKind   = "pause"
	ResumeKind  = "resume"
	ReindexKind = "reindex"
)

// RequestOf writes a pending request of kind (PauseKind, ResumeKind,
// ReindexKind with mode) for job, as RequestRetry does, and returns its
// id.
func RequestOf(ctx context.Context, state *mongo.Collection, job, requestedBy string, ttl time.Duration, kind, mode string, form capability.Form) (string, error) {
	return request(ctx, state, job, requestedBy, ttl, bson.D{{Key: "kind", Value: kind}, {Key: "mode", Value: mode}}, form)
}

// RequestRetry writes a pending retry request for job on behalf of
// requestedBy, expiring ttl from now by the server's clock, and returns
// its id.
func RequestRetry(ctx context.Context, state *mongo.Collection, job, requestedBy string, ttl time.Duration, form capability.Form) (string, error) {
	return request(ctx, state, job, requestedBy, ttl, nil, form)
}

// RepairKind is the kind of a request of verify --repair.
const RepairKind = "repair"

// RequestRepair writes a pending repair request for job: the holder writes
// ids again (or deletes them) as a retry does. ids are bounded by the
// caller (a request is one document of at most 16 MB).
func RequestRepair(ctx context.Context, state *mongo.Collection, job, requestedBy string, ttl time.Duration, ids []bson.RawValue, form capability.Form) (string, error) {
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	return request(ctx, state, job, requestedBy, ttl, bson.D{{Key: "kind", Value: RepairKind}, {Key: "ids", Value: in}}, form)
}

// request writes a pending request with the fields extra besides, in the
// form the source takes (form).
func request(ctx context.Context, state *mongo.Collection, job, requestedBy string, ttl time.Duration, extra bson.D, form capability.Form) (string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now, err := readClock(ctx, state, form)
	if err != nil {
		return "", errs.Wrap(errs.Failed, job, err, "write the request to the job's holder")
	}
	if now != nil {
		set := bson.D{
			{Key: "state", Value: RequestPending},
			{Key: "requestedBy", Value: requestedBy},
			{Key: "expiresAt", Value: now.Add(ttl)},
		}
		set = append(set, extra...)
		update := bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: bson.D{{Key: "requestedAt", Value: true}}}}
		if _, err := state.UpdateOne(ctx, bson.D{{Key: "_id", Value: requestKey(job, id)}}, update, options.UpdateOne().SetUpsert(true)); err != nil {
			return "", errs.Wrap(errs.Failed, job, err, "write the request to the job's holder")
		}
		return id, nil
	}
	set := bson.D{
		{Key: "state", Value: RequestPending},
		{Key: "requestedBy", Value: bson.D{{Key: "$literal", Value: requestedBy}}},
		{Key: "requestedAt", Value: "$$NOW"},
		{Key: "expiresAt", Value: bson.D{{Key: "$add", Value: bson.A{"$$NOW", ttl.Milliseconds()}}}},
	}
	for _, e := range extra {
		set = append(set, bson.E{Key: e.Key, Value: bson.D{{Key: "$literal", Value: e.Value}}})
	}
	_, err = state.UpdateOne(ctx, bson.D{{Key: "_id", Value: requestKey(job, id)}},
		mongo.Pipeline{{{Key: "$set", Value: set}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return "", errs.Wrap(errs.Failed, job, err, "write the request to the job's holder")
	}
	return id, nil
}

// requestDoc is a request as stored.
type requestDoc struct {
	ID struct {
		Job     string `bson:"retry"`
		Request string `bson:"request"`
	} `bson:"_id"`
	State      string          `bson:"state"`
	Kind       string          `bson:"kind"`
	Mode       string          `bson:"mode"`
	IDs        []bson.RawValue `bson:"ids"`
	Note       string          `bson:"note"`
	StartedAt  time.Time       `bson:"startedAt"`
	DoneAt     time.Time       `bson:"doneAt"`
	Holder     string          `bson:"holder"`
	Epoch      int64           `bson:"epoch"`
	Retried    int64           `bson:"retried"`
	Written    int64           `bson:"written"`
	Gone       int64           `bson:"gone"`
	Failed     int64           `bson:"failed"`
	DurationMs int64           `bson:"durationMs"`
	Code       string          `bson:"code"`
	Error      string          `bson:"error"`
}

func (d *requestDoc) request() *RetryRequest {
	return &RetryRequest{
		Job: d.ID.Job, ID: d.ID.Request, State: d.State, Kind: d.Kind, Mode: d.Mode, IDs: d.IDs, Note: d.Note,
		Started: d.StartedAt, Done: d.DoneAt, Holder: d.Holder, Epoch: d.Epoch,
		Retried: d.Retried, Written: d.Written, Gone: d.Gone, Failed: d.Failed,
		Duration: time.Duration(d.DurationMs) * time.Millisecond, Code: d.Code, Error: d.Error,
	}
}

// ReadRequest returns the request id of job; nil when it is gone.
func ReadRequest(ctx context.Context, state *mongo.Collection, job, id string) (*RetryRequest, error) {
	var d requestDoc
	err := state.FindOne(ctx, bson.D{{Key: "_id", Value: requestKey(job, id)}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the retry request")
	}
	return d.request(), nil
}

// WithdrawRequest deletes request id of job unless a holder has taken it:
// true when it was still pending (and is now gone).
func WithdrawRequest(ctx context.Context, state *mongo.Collection, job, id string) (bool, error) {
	res, err := state.DeleteOne(ctx, bson.D{{Key: "_id", Value: requestKey(job, id)}, {Key: "state", Value: RequestPending}})
	if err != nil {
		return false, errs.Wrap(errs.Failed, job, err, "withdraw the retry request")
	}
	return res.DeletedCount == 1, nil
}

// DeleteRequest deletes request id of job, whatever its state.
func DeleteRequest(ctx context.Context, state *mongo.Collection, job, id string) error {
	if _, err := state.DeleteOne(ctx, bson.D{{Key: "_id", Value: requestKey(job, id)}}); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete the retry request")
	}
	return nil
}

// ClaimRetry takes the oldest unexpired retry request of job that is
// pending, or running under an earlier lease epoch (its holder went away),
// for holder at epoch; nil when there is none.
func (s *Store) ClaimRetry(ctx context.Context, job, holder string, epoch int64) (*RetryRequest, error) {
	live, err := s.before(ctx, "$gt", "expiresAt")
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "take a retry request")
	}
	filter := bson.D{
		{Key: "_id.retry", Value: job},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "state", Value: RequestPending}},
			bson.D{{Key: "state", Value: RequestRunning}, {Key: "epoch", Value: bson.D{{Key: "$lt", Value: epoch}}}},
		}},
		live,
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "state", Value: RequestRunning}, {Key: "holder", Value: holder}, {Key: "epoch", Value: epoch}}},
		{Key: "$currentDate", Value: bson.D{{Key: "startedAt", Value: true}}},
	}
	opts := options.FindOneAndUpdate().SetSort(bson.D{{Key: "requestedAt", Value: 1}}).SetReturnDocument(options.After)
	var d requestDoc
	err = s.state.FindOneAndUpdate(ctx, filter, update, opts).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "take a retry request")
	}
	return d.request(), nil
}

// FinishRetry writes r's outcome (State done or failed, the counts, Code
// and Error) into its request, if it is still the one taken at r.Epoch
// (a later holder may have taken it again).
func (s *Store) FinishRetry(ctx context.Context, r *RetryRequest) error {
	filter := bson.D{{Key: "_id", Value: requestKey(r.Job, r.ID)}, {Key: "epoch", Value: r.Epoch}, {Key: "state", Value: RequestRunning}}
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "state", Value: r.State},
			{Key: "retried", Value: r.Retried},
			{Key: "written", Value: r.Written},
			{Key: "gone", Value: r.Gone},
			{Key: "failed", Value: r.Failed},
			{Key: "durationMs", Value: r.Duration.Milliseconds()},
			{Key: "code", Value: r.Code},
			{Key: "error", Value: cutMessage(r.Error, maxMessage)},
			{Key: "note", Value: cutMessage(r.Note, maxMessage)},
		}},
		{Key: "$currentDate", Value: bson.D{{Key: "doneAt", Value: true}}},
	}
	if _, err := s.state.UpdateOne(ctx, filter, update); err != nil {
		return errs.Wrap(errs.Failed, r.Job, err, "answer the retry request")
	}
	return nil
}

// DropExpiredRequests deletes the requests of job whose time is up: their
// client no longer waits for them.
func (s *Store) DropExpiredRequests(ctx context.Context, job string) error {
	expired, err := s.before(ctx, "$lte", "expiresAt")
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete expired retry requests")
	}
	filter := bson.D{{Key: "_id.retry", Value: job}, expired}
	if _, err := s.state.DeleteMany(ctx, filter); err != nil {
		return errs.Wrap(errs.Failed, job, err, "delete expired retry requests")
	}
	return nil
}

// RequestsWaiting returns, of the jobs in epochs (a job's name and its
// holder's lease epoch), those with a request ClaimRetry would take for
// them: pending, or running under an earlier epoch, and not expired. It is
// one query for all of them, so a process holding hundreds of jobs asks
// once rather than once per job.
func (s *Store) RequestsWaiting(ctx context.Context, epochs map[string]int64) ([]string, error) {
	if len(epochs) == 0 {
		return nil, nil
	}
	live, err := s.before(ctx, "$gt", "expiresAt")
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "look for requests to the jobs held here")
	}
	names := make(bson.A, 0, len(epochs))
	for name := range epochs {
		names = append(names, name)
	}
	filter := bson.D{
		{Key: "_id.retry", Value: bson.D{{Key: "$in", Value: names}}},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{RequestPending, RequestRunning}}}},
		live,
	}
	cur, err := s.state.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "state", Value: 1}, {Key: "epoch", Value: 1}}))
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "look for requests to the jobs held here")
	}
	defer cur.Close(ctx)
	var out []string
	seen := map[string]bool{}
	for cur.Next(ctx) {
		var d requestDoc
		if err := cur.Decode(&d); err != nil {
			return nil, errs.Wrap(errs.Failed, "", err, "look for requests to the jobs held here")
		}
		epoch, ok := epochs[d.ID.Job]
		if !ok || seen[d.ID.Job] || (d.State == RequestRunning && d.Epoch >= epoch) {
			continue
		}
		seen[d.ID.Job] = true
		out = append(out, d.ID.Job)
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "look for requests to the jobs held here")
	}
	return out, nil
}

// DropExpiredRequestsOf deletes the expired requests of jobs in one write
// (DropExpiredRequests for each of them).
func (s *Store) DropExpiredRequestsOf(ctx context.Context, jobs []string) error {
	if len(jobs) == 0 {
		return nil
	}
	expired, err := s.before(ctx, "$lte", "expiresAt")
	if err != nil {
		return errs.Wrap(errs.Failed, "", err, "delete expired requests to the jobs held here")
	}
	names := make(bson.A, 0, len(jobs))
	for _, j := range jobs {
		names = append(names, j)
	}
	filter := bson.D{{Key: "_id.retry", Value: bson.D{{Key: "$in", Value: names}}}, expired}
	if _, err := s.state.DeleteMany(ctx, filter); err != nil {
		return errs.Wrap(errs.Failed, "", err, "delete expired requests to the jobs held here")
	}
	return nil
}
