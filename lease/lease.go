package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
)

// Defaults and bounds of Options.
const (
	DefaultTTL      = 30 * time.Second
	DefaultWaitBase = 500 * time.Millisecond

	MinTTL      = time.Second
	MaxTTL      = time.Hour
	MinWaitBase = time.Millisecond
)

// FenceField is the field Stamp sets and Fence filters on in a fenced
// document (see the package doc).
const FenceField = "leaseEpoch"

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	// TTL is how long a lease lasts without renewal (default 30s, 1s..1h).
	// A holder renews every TTL/3.
	TTL time.Duration
	// WaitBase and WaitCap bound Wait's backoff between attempts: it starts
	// at WaitBase and doubles up to WaitCap, with ±25% jitter. WaitCap may
	// not exceed TTL/3 (the default), so a standby notices a freed lease
	// within one renewal period. WaitBase defaults to 500ms (or WaitCap if
	// smaller) and must be at least 1ms and at most WaitCap.
	WaitBase, WaitCap time.Duration
	// Logger receives standby and loss messages; default: discard.
	Logger hclog.Logger
	// Form says whether the source takes update pipelines with $$NOW;
	// where it does not, the leases are written in the form without them
	// (package doc, "Without update pipelines"). nil: pipelines.
	Form capability.Form
}

// Holder returns this process's holder identity, "host:pid:random". It is
// computed once per process start, so a restarted process is a new holder.
func Holder() string { return processHolder() }

var processHolder = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + randomHex(6)
})

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Manager acquires leases of one holder in one state collection.
type Manager struct {
	coll   *mongo.Collection
	holder string
	ttl    time.Duration
	base   time.Duration
	cap    time.Duration
	log    hclog.Logger
	now    func() time.Time // process clock: scheduling and the holder's own give-up rule only
	jitter func() float64   // uniform in [0,1)
	form   capability.Form
}

// New returns a Manager taking leases as holder in coll (the state
// collection). Invalid options are a CONFIG_INVALID error naming each option.
func New(coll *mongo.Collection, holder string, opts Options) (*Manager, error) {
	var problems []string
	if coll == nil {
		problems = append(problems, "no state collection")
	}
	if strings.TrimSpace(holder) == "" {
		problems = append(problems, "empty holder")
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < MinTTL || ttl > MaxTTL {
		problems = append(problems, fmt.Sprintf("TTL %s: must be between %s and %s", opts.TTL, MinTTL, MaxTTL))
		ttl = DefaultTTL // so the other checks still say something useful
	}
	wcap := opts.WaitCap
	if wcap == 0 {
		wcap = ttl / 3
	}
	if wcap < MinWaitBase || wcap > ttl/3 {
		problems = append(problems, fmt.Sprintf("WaitCap %s: must be between %s and TTL/3 (%s)", opts.WaitCap, MinWaitBase, ttl/3))
	}
	base := opts.WaitBase
	if base == 0 {
		base = min(DefaultWaitBase, wcap)
	}
	if base < MinWaitBase || base > wcap {
		problems = append(problems, fmt.Sprintf("WaitBase %s: must be between %s and WaitCap (%s)", opts.WaitBase, MinWaitBase, wcap))
	}
	if len(problems) > 0 {
		return nil, errs.New(errs.ConfigInvalid, "", "lease options: %s", strings.Join(problems, "; "))
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Manager{
		coll: coll, holder: holder, ttl: ttl, base: base, cap: wcap,
		log: log, now: time.Now, jitter: randFloat, form: opts.Form,
	}, nil
}

// Holder returns the holder identity the Manager acquires as.
func (m *Manager) Holder() string { return m.holder }

// TTL returns the lease duration in effect.
func (m *Manager) TTL() time.Duration { return m.ttl }

// leaseDoc is the stored document.
type leaseDoc struct {
	Holder     string    `bson:"holder"`
	Nonce      string    `bson:"nonce"`
	Epoch      int64     `bson:"epoch"`
	AcquiredAt time.Time `bson:"acquiredAt"`
	ExpiresAt  time.Time `bson:"expiresAt"`
	TTLms      int64     `bson:"ttlMs"`
}

func key(name string) bson.D { return bson.D{{Key: "_id", Value: bson.D{{Key: "lease", Value: name}}}} }

// heldError carries what Wait needs to log; it is wrapped in a RUNNING
// *errs.Error so callers only see the project error.
type heldError struct {
	holder  string
	until   time.Time
	epoch   int64
	unknown bool
}

func (h *heldError) Error() string {
	if h.unknown {
		return "held by another process (a concurrent acquisition won)"
	}
	return fmt.Sprintf("held by %s until %s (server time)", h.holder, h.until.UTC().Format(time.RFC3339Nano))
}

// Acquire takes the lease name if it is free (missing, released, or expired
// by the server's clock) in one round trip. When another lease holds it, the
// error is a RUNNING *errs.Error naming the holder and until when (server
// time); any other failure is FAILED. The returned lease is not renewed until
// Keep is called.
func (m *Manager) Acquire(ctx context.Context, name string) (*Lease, error) {
	l, _, err := m.acquire(ctx, name)
	return l, err
}

func (m *Manager) acquire(ctx context.Context, name string) (*Lease, *heldError, error) {
	if name == "" {
		return nil, nil, errs.New(errs.ConfigInvalid, "", "empty lease name")
	}
	pipelines, err := m.form.Pipelines(ctx)
	if err != nil {
		return nil, nil, errs.Wrap(errs.Failed, name, err, "acquire lease")
	}
	nonce := randomHex(16)
	if !pipelines {
		return m.acquirePlain(ctx, name, nonce)
	}
	ttlMs := m.ttl.Milliseconds()
	// take: the document is new (no expiresAt) or expired by the server clock.
	// Written out rather than relying on "missing < date" in $lte so a reader
	// sees both cases; $$NOW is fixed for the whole command.
	take := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "$eq", Value: bson.A{bson.D{{Key: "$type", Value: "$expiresAt"}}, "missing"}}},
		bson.D{{Key: "$lte", Value: bson.A{"$expiresAt", "$$NOW"}}},
	}}}
	pick := func(taken, kept any) bson.D {
		return bson.D{{Key: "$cond", Value: bson.D{{Key: "if", Value: take}, {Key: "then", Value: taken}, {Key: "else", Value: kept}}}}
	}
	pipeline := mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: "holder", Value: pick(bson.D{{Key: "$literal", Value: m.holder}}, "$holder")},
		{Key: "nonce", Value: pick(bson.D{{Key: "$literal", Value: nonce}}, "$nonce")},
		{Key: "epoch", Value: pick(bson.D{{Key: "$add", Value: bson.A{bson.D{{Key: "$ifNull", Value: bson.A{"$epoch", int64(0)}}}, int64(1)}}}, "$epoch")},
		{Key: "acquiredAt", Value: pick("$$NOW", "$acquiredAt")},
		{Key: "expiresAt", Value: pick(bson.D{{Key: "$add", Value: bson.A{"$$NOW", ttlMs}}}, "$expiresAt")},
		{Key: "ttlMs", Value: pick(ttlMs, "$ttlMs")},
	}}}}
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	var d leaseDoc
	for attempt := 0; attempt < 2; attempt++ {
		sent := m.now()
		err = m.coll.FindOneAndUpdate(ctx, key(name), pipeline, opts).Decode(&d)
		if err == nil {
			if d.Holder == m.holder && d.Nonce == nonce {
				return newLease(m, name, nonce, d, sent), nil, nil
			}
			h := &heldError{holder: d.Holder, until: d.ExpiresAt, epoch: d.Epoch}
			return nil, h, &errs.Error{Code: errs.Running, Job: name, Msg: "lease " + h.Error()}
		}
		// An equality-only upsert filter makes mongod retry an insert race
		// itself; if a server reports it anyway, one retry sees the winner's
		// document and names it.
		if !mongo.IsDuplicateKeyError(err) {
			break
		}
	}
	if mongo.IsDuplicateKeyError(err) {
		h := &heldError{unknown: true}
		return nil, h, &errs.Error{Code: errs.Running, Job: name, Msg: "lease " + h.Error(), Err: err}
	}
	return nil, nil, errs.Wrap(errs.Failed, name, err, "acquire lease")
}

// Lease is one acquisition of a name. Its methods are safe for concurrent use.
type Lease struct {
	m          *Manager
	name       string
	holder     string
	nonce      string // never logged, never in an error
	epoch      int64
	acquiredAt time.Time

	mu        sync.Mutex
	expiresAt time.Time // server time, from the last successful write
	lastOK    time.Time // process clock when the last successful acquire/renewal was sent
	// held is cancelled, with endErr as its cause, when the lease ends:
	// whoever waits for the loss registers on it (context.AfterFunc)
	// rather than parking a goroutine per wait.
	held     context.Context
	endHeld  context.CancelCauseFunc
	endErr   error // LEASE_LOST: why it is no longer held
	released bool  // Release's write succeeded (or there was nothing to release)
	keeps    sync.WaitGroup
}

func newLease(m *Manager, name, nonce string, d leaseDoc, sent time.Time) *Lease {
	held, end := context.WithCancelCause(context.Background())
	return &Lease{
		m: m, name: name, holder: d.Holder, nonce: nonce, epoch: d.Epoch,
		acquiredAt: d.AcquiredAt, expiresAt: d.ExpiresAt, lastOK: sent,
		held: held, endHeld: end,
	}
}

// Name returns the lease's name (the job name).
func (l *Lease) Name() string { return l.name }

// Epoch returns the epoch of this acquisition; it is larger than the epoch
// of every earlier acquisition of the name.
func (l *Lease) Epoch() int64 { return l.epoch }

// Holder returns the holder identity that took the lease.
func (l *Lease) Holder() string { return l.holder }

// AcquiredAt returns the server time of the acquisition.
func (l *Lease) AcquiredAt() time.Time { return l.acquiredAt }

// ExpiresAt returns the expiry the last successful acquisition or renewal
// wrote, in server time. It is information, not a promise: compare it only
// with other server times.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Lost returns a channel closed once the lease is no longer held: lost
// (taken over, expired, or unprovable) or released. Err says which.
func (l *Lease) Lost() <-chan struct{} { return l.held.Done() }

// Context returns a context that is cancelled once the lease is no longer
// held, with the LEASE_LOST *errs.Error (Err) as its context.Cause. It has
// no deadline and carries no values; it is meant for context.AfterFunc,
// which costs no goroutine while the lease lasts.
func (l *Lease) Context() context.Context { return l.held }

// Err returns nil while the lease is held, then the LEASE_LOST *errs.Error
// saying why it is not.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endErr
}

// String describes the lease without its nonce.
func (l *Lease) String() string {
	return fmt.Sprintf("lease %s epoch %d holder %s", l.name, l.epoch, l.holder)
}

// GoString is String, so %#v cannot print the nonce either.
func (l *Lease) GoString() string { return l.String() }

// end marks the lease as no longer held, once; the first reason wins.
func (l *Lease) end(reason error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endErr != nil {
		return false
	}
	l.endErr = reason
	l.endHeld(reason)
	return true
}

func (l *Lease) lose(reason string) {
	err := errs.New(errs.LeaseLost, l.name, "lease lost: %s", reason)
	if l.end(err) {
		l.m.log.Warn("lease lost", "job", l.name, "epoch", l.epoch, "reason", reason)
	}
}

func (l *Lease) filter() bson.D {
	return append(key(l.name), bson.E{Key: "holder", Value: l.holder}, bson.E{Key: "nonce", Value: l.nonce})
}

// renew extends the lease once. held=false with a nil error means the server
// says it is not ours any more (definitive); an error means we do not know.
func (l *Lease) renew(ctx context.Context) (held bool, err error) {
	pipelines, err := l.m.form.Pipelines(ctx)
	if err != nil {
		return false, err
	}
	if !pipelines {
		return l.renewPlain(ctx)
	}
	sent := l.m.now()
	// Not an upsert, so $expr is allowed here: a lease that expired is not
	// renewed even if nobody took it, because another holder may have
	// judged it free in the meantime.
	filter := append(l.filter(), bson.E{Key: "$expr", Value: bson.D{{Key: "$gt", Value: bson.A{"$expiresAt", "$$NOW"}}}})
	update := mongo.Pipeline{{{Key: "$set", Value: bson.D{
		{Key: "expiresAt", Value: bson.D{{Key: "$add", Value: bson.A{"$$NOW", l.m.ttl.Milliseconds()}}}},
		{Key: "ttlMs", Value: l.m.ttl.Milliseconds()},
	}}}}
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After).
		SetProjection(bson.D{{Key: "expiresAt", Value: 1}})
	var d leaseDoc
	err = l.m.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&d)
	return l.renewed(sent, d, err)
}

// renewed records the answer to a renewal sent at sent.
func (l *Lease) renewed(sent time.Time, d leaseDoc, err error) (bool, error) {
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endErr != nil {
		// Declared lost while this was in flight (give-up rule or release):
		// lost stays lost.
		return false, nil
	}
	if sent.After(l.lastOK) {
		l.lastOK = sent
	}
	if d.ExpiresAt.After(l.expiresAt) {
		l.expiresAt = d.ExpiresAt
	}
	return true, nil
}

// whyNotHeld reads the document once to explain a failed renewal; it is
// best effort and never reveals the nonce.
func (l *Lease) whyNotHeld(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.m.ttl/6)
	defer cancel()
	var d leaseDoc
	err := l.m.coll.FindOne(ctx, key(l.name)).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return "the lease document was deleted"
	case err != nil:
		return "the renewal matched nothing"
	case d.Holder == l.holder && d.Nonce == l.nonce:
		return fmt.Sprintf("it expired at %s (server time) before it was renewed", d.ExpiresAt.UTC().Format(time.RFC3339Nano))
	case d.Holder == "":
		return fmt.Sprintf("it expired and was released by a later holder (epoch %d)", d.Epoch)
	default:
		return fmt.Sprintf("taken over by %s (epoch %d)", d.Holder, d.Epoch)
	}
}

// Confirm proves with one round trip that the lease is still held, and
// renews it. It returns a LEASE_LOST *errs.Error if the lease is not held
// (and marks it lost), or FAILED if the server could not be asked; a lease
// already lost or released is never resurrected.
func (l *Lease) Confirm(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	held, err := l.renew(ctx)
	if err != nil {
		return errs.Wrap(errs.Failed, l.name, err, "confirm lease")
	}
	if !held {
		if e := l.Err(); e != nil {
			return e
		}
		l.lose(l.whyNotHeld(ctx))
		return l.Err()
	}
	return nil
}

// Release gives the lease up: it stops renewals and, only if the document is
// still this lease's (holder and nonce), frees it while keeping its epoch.
// It is safe to call twice, after the lease was lost, and on a nil Lease.
// Afterwards Lost is closed and Keep's contexts are cancelled.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.end(errs.New(errs.LeaseLost, l.name, "lease released"))
	l.keeps.Wait()
	l.mu.Lock()
	done := l.released
	l.mu.Unlock()
	if done {
		return nil
	}
	pipelines, err := l.m.form.Pipelines(ctx)
	if err != nil {
		return errs.Wrap(errs.Failed, l.name, err, "release lease")
	}
	var update any = mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "expiresAt", Value: "$$NOW"}}}},
		{{Key: "$unset", Value: bson.A{"holder", "nonce"}}},
	}
	if !pipelines {
		update = releasePlain
	}
	if _, err := l.m.coll.UpdateOne(ctx, l.filter(), update); err != nil {
		return errs.Wrap(errs.Failed, l.name, err, "release lease")
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	return nil
}

// Fence returns the condition to add to the filter of a write that a deposed
// holder must not make: {leaseEpoch: {$lte: epoch}}. See the package doc.
func (l *Lease) Fence() bson.D {
	return bson.D{{Key: FenceField, Value: bson.D{{Key: "$lte", Value: l.epoch}}}}
}

// Stamp returns the field to $set in a fenced write: leaseEpoch = epoch.
func (l *Lease) Stamp() bson.E { return bson.E{Key: FenceField, Value: l.epoch} }

// Fenced maps the duplicate key error of a fenced upsert (a later holder
// already wrote the document) to LEASE_LOST and marks the lease lost; other
// errors and nil are returned as they are.
func (l *Lease) Fenced(err error) error {
	if err == nil || !mongo.IsDuplicateKeyError(err) {
		return err
	}
	l.lose("a write was fenced off: a holder with a later epoch wrote first")
	return l.Err()
}

// Info describes a lease document for `meilistream status`. It never holds
// the nonce.
type Info struct {
	Name       string
	Holder     string // empty when released
	Epoch      int64
	AcquiredAt time.Time // server time
	ExpiresAt  time.Time // server time
	Expired    bool      // judged by the server clock: expiresAt <= $$NOW
}

// List returns every lease document in coll, sorted by name, with Expired
// computed by the server.
func List(ctx context.Context, coll *mongo.Collection) ([]Info, error) {
	pipeline := mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "_id.lease", Value: bson.D{{Key: "$exists", Value: true}}}}}},
		{{Key: "$project", Value: bson.D{
			{Key: "holder", Value: 1},
			{Key: "epoch", Value: 1},
			{Key: "acquiredAt", Value: 1},
			{Key: "expiresAt", Value: 1},
			{Key: "expired", Value: bson.D{{Key: "$lte", Value: bson.A{"$expiresAt", "$$NOW"}}}},
		}}},
	}
	cur, err := coll.Aggregate(ctx, pipeline)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	var rows []leaseRow
	if err := cur.All(ctx, &rows); err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	return infos(rows, func(r leaseRow) bool { return r.Expired }), nil
}

// leaseRow is a lease document as List reads it; Expired is the server's
// judgement where an update pipeline could make it ($$NOW).
type leaseRow struct {
	ID struct {
		Lease string `bson:"lease"`
	} `bson:"_id"`
	Holder     string    `bson:"holder"`
	Epoch      int64     `bson:"epoch"`
	AcquiredAt time.Time `bson:"acquiredAt"`
	ExpiresAt  time.Time `bson:"expiresAt"`
	Expired    bool      `bson:"expired"`
}

// infos are rows as List returns them, by name, each judged by expired.
func infos(rows []leaseRow, expired func(leaseRow) bool) []Info {
	out := make([]Info, 0, len(rows))
	for _, r := range rows {
		out = append(out, Info{Name: r.ID.Lease, Holder: r.Holder, Epoch: r.Epoch,
			AcquiredAt: r.AcquiredAt, ExpiresAt: r.ExpiresAt, Expired: expired(r)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
