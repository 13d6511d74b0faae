package jobstate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/jobdef"
)

// Job state lives in the state collection beside the leases:
//
//	{_id: {position: <job>}, token: <resume token>, wallTime: <date>,
//	 hash: <transform hash>, previousHash: <the hash before it>,
//	 hashSince: <server date hash was first recorded>,
//	 destination: <index uid or replica collection>,
//	 staleJoins: [<dependency fields whose joins may be old>],
//	 leaseEpoch: <int64>, updatedAt: <server date>}
//	{_id: {reindex: <job>}, startedAt, hash, inPlace, destination, lastId,
//	 count, swapping, throttled, leaseEpoch, updatedAt}
//	{_id: {watermark: <job>}, mark: <a running reindex's latest mark>}
//
// The position's hash is the transform the destination was last rebuilt
// with: only a finished reindex writes it; every other record moves the
// token alone. wallTime is the wall time of the change the token stands
// after (the server's, from the change event; for an idle stream, the
// process clock when it was taken). The watermark document is written by a
// running reindex only (the engine's snapshot), never fenced: a mark is a
// random nonce and a sequence number that a deposed holder's reindex cannot
// make the new holder's act on. Every write is fenced by the
// lease epoch (lease package doc): the filter has {leaseEpoch: {$lte:
// epoch}} and the update sets leaseEpoch, so a deposed holder's upsert
// misses and fails with a duplicate key, which is LEASE_LOST. A holder
// stamps both documents (creating them empty if needed) before it works.
// Neither is ever deleted: clearing a position or a checkpoint $unsets its
// payload and restamps leaseEpoch, so a deposed holder cannot recreate it;
// readers take a document without its token as "none".

// fenceField is lease.FenceField.
const fenceField = "leaseEpoch"

// Fence is what the state writes need of the job's lease: the epoch they
// are fenced by, and why it ended, if it did (written nothing then).
// *lease.Lease has it.
type Fence interface {
	Epoch() int64
	Err() error
}

// Store keeps the jobs' state: positions and reindex checkpoints in the
// state collection, per-document error records in the errors collection.
// It is safe for concurrent use.
type Store struct {
	state   *mongo.Collection
	errColl *mongo.Collection // nil: per-document errors are not kept
	pause   func(ctx context.Context, attempt int) error
	form    capability.Form // nil: the source takes update pipelines and $$NOW
}

// SetForm says, before the store is used, whether the source takes update
// pipelines and $$NOW (nil: it does); where it does not, the presence
// records and requests are written and judged against a reading of the
// server's clock (see readClock).
func (s *Store) SetForm(f capability.Form) { s.form = f }

// New returns the store over state and errorsColl (normally state's name +
// "_errors"; nil keeps no per-document errors). A state write that fails
// for a transient reason is tried again a few times, each time after
// pause(ctx, attempt) (the engine's backoff); an error of pause (ctx ended)
// ends the retries.
func New(state, errorsColl *mongo.Collection, pause func(ctx context.Context, attempt int) error) *Store {
	return &Store{state: state, errColl: errorsColl, pause: pause}
}

// Position is a job's recorded resume point.
type Position struct {
	Token    bson.Raw  `bson:"token"`
	WallTime time.Time `bson:"wallTime"`
	Hash     string    `bson:"hash"`
	// PreviousHash is the hash recorded before Hash, and HashSince the
	// server time Hash was first recorded: during a rollout, a pod still
	// running the previous transform must not reindex back to it while a
	// live pod runs Hash (engine.ErrTransformOlder).
	PreviousHash string    `bson:"previousHash"`
	HashSince    time.Time `bson:"hashSince"`
	// Destination is the index uid (search) or replica collection (mirror)
	// the position was recorded for; Definition the job's options then
	// (definition), to say why a changed hash reindexes.
	Destination string            `bson:"destination"`
	Definition  map[string]string `bson:"definition"`
	// StaleJoins are the dependency fields whose dependents may hold an
	// old join (RecordStaleJoins).
	StaleJoins []string  `bson:"staleJoins,omitempty"`
	Epoch      int64     `bson:"leaseEpoch"`
	Updated    time.Time `bson:"updatedAt"`
	// ReindexedAt is the server time the last reindex was recorded
	// (RecordNewPosition): `meilistream reindex --wait` through a holder
	// waits for it to pass the time the holder took its request.
	ReindexedAt time.Time `bson:"reindexedAt"`
}

// Checkpoint is a reindex's progress after its last durable chunk.
type Checkpoint struct {
	StartedAt time.Time `bson:"startedAt"`
	Hash      string    `bson:"hash"`
	InPlace   bool      `bson:"inPlace"`
	// Asked says that InPlace is the mode `meilistream reindex --inplace`
	// or `--swap` asked, not the job's: whoever goes on with the reindex
	// (a restart, the standby taking the job over) goes on in that mode,
	// since starting over in the job's would stage an index the operator
	// chose not to hold twice, or read everything again.
	Asked bool `bson:"asked,omitempty"`
	// Destination is the index uid (or replica collection) the reindex
	// rebuilds: a swap reindex stages next to it (the Meilisearch sink's
	// <uid>__reindex), so a reindex that starts over for another
	// destination, or in place, knows which staged target it abandons.
	// Empty in checkpoints of earlier releases.
	Destination string        `bson:"destination,omitempty"`
	LastID      bson.RawValue `bson:"lastId,omitempty"`
	Count       int64         `bson:"count"`
	// Swapping is set just before the staged index is swapped in: from
	// then on the staged index may already be the old live one (the swap
	// task can succeed after this process died or gave up waiting), so a
	// resume into it would put a partial index live. Such a checkpoint is
	// never resumed: the reindex starts over, which is safe because
	// Meilisearch runs tasks in enqueue order, so a pending swap is applied
	// before the fresh staged index is created.
	Swapping bool `bson:"swapping,omitempty"`
	// Throttled says what slowed the reindex's chunks when the checkpoint
	// was written ("mongodb latency 850ms > 500ms"), "" if nothing: for
	// `meilistream status`, which reads MongoDB only.
	Throttled string    `bson:"throttled,omitempty"`
	Epoch     int64     `bson:"leaseEpoch"`
	Updated   time.Time `bson:"updatedAt"`
}

func posKey(job string) bson.D { return bson.D{{Key: "position", Value: job}} }
func cpKey(job string) bson.D  { return bson.D{{Key: "reindex", Value: job}} }

func (s *Store) ReadPosition(ctx context.Context, job string) (*Position, error) {
	var p Position
	err := s.state.FindOne(ctx, bson.D{{Key: "_id", Value: posKey(job)}}).Decode(&p)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(p.Token) == 0 {
		return nil, nil // cleared or only stamped: no position
	}
	return &p, nil
}

func (s *Store) ReadCheckpoint(ctx context.Context, job string) (*Checkpoint, error) {
	var c Checkpoint
	err := s.state.FindOne(ctx, bson.D{{Key: "_id", Value: cpKey(job)}}).Decode(&c)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if c.Hash == "" {
		return nil, nil // cleared: only the epoch stamp is left
	}
	return &c, nil
}

// fencedSet upserts fields into the state document id, fenced by l's epoch.
func (s *Store) fencedSet(ctx context.Context, job string, l Fence, id bson.D, set bson.D) error {
	return s.fencedUpdate(ctx, job, l, id, set, nil, nil)
}

// fencedUpdate upserts the state document id, fenced by l's epoch: it sets
// set, removes unset and sets now to the server's time (field names), and
// stamps l's epoch.
func (s *Store) fencedUpdate(ctx context.Context, job string, l Fence, id bson.D, set bson.D, unset, now []string) error {
	if err := l.Err(); err != nil {
		return err
	}
	filter := bson.D{{Key: "_id", Value: id}, {Key: fenceField, Value: bson.D{{Key: "$lte", Value: l.Epoch()}}}}
	set = append(set[:len(set):len(set)], bson.E{Key: fenceField, Value: l.Epoch()})
	cd := bson.D{{Key: "updatedAt", Value: true}}
	for _, f := range now {
		cd = append(cd, bson.E{Key: f, Value: true})
	}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: cd}}
	if len(unset) > 0 {
		u := make(bson.D, len(unset))
		for i, f := range unset {
			u[i] = bson.E{Key: f, Value: ""}
		}
		update = append(update, bson.E{Key: "$unset", Value: u})
	}
	// A transient error (a step-down, a dropped connection) is retried a
	// few times: the write is idempotent.
	for attempt := 0; ; attempt++ {
		_, err := s.state.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
		if mongo.IsDuplicateKeyError(err) {
			return errs.New(errs.LeaseLost, job, "a holder with a later lease epoch wrote the job's state; stopping")
		}
		if err == nil || attempt >= 4 || ctx.Err() != nil {
			return err
		}
		if err := s.pause(ctx, attempt); err != nil {
			return err
		}
	}
}

// The payload fields of the state documents: clearing one removes these and
// keeps (restamps) leaseEpoch. A position keeps its hash history (hash,
// previousHash, hashSince, destination) for the rollout rule. A fenced document is never deleted: its stamp
// would go with it, and a deposed holder's next fenced upsert would create
// it again (lease package doc, "Epoch and fencing").
var (
	positionFields = []string{"token", "wallTime"}
	// startToken is cleared too: checkpoints of earlier versions had it.
	checkpointFields = []string{"startToken", "startedAt", "hash", "inPlace", "asked", "destination", "lastId", "count", "swapping", "throttled"}
)

// Stamp writes l's epoch into the job's state documents (creating them
// empty when missing) before it works, so that from now on every write of
// an earlier holder fails (LEASE_LOST for this one when a later holder
// stamped them already).
func (s *Store) Stamp(ctx context.Context, job string, l Fence) error {
	for _, id := range []bson.D{posKey(job), cpKey(job)} {
		if err := s.fencedSet(ctx, job, l, id, nil); err != nil {
			if errors.Is(err, errs.ErrLeaseLost) {
				return err
			}
			return errs.Wrap(errs.Failed, job, err, "stamp the job's state with the lease epoch")
		}
	}
	return nil
}

// RecordPosition records token (and the wall time of the change it stands
// after) as the job's position, with durable, the cluster time up to which
// every change is durable in the destination (wait.go; zero: left as it
// is). The transform hash beside it changes only when a reindex is done
// (RecordNewPosition): while one runs, the destination is not yet the new
// transform's.
func (s *Store) RecordPosition(ctx context.Context, job string, l Fence, token bson.Raw, wall time.Time, durable bson.Timestamp) error {
	set := bson.D{
		{Key: "token", Value: token},
		{Key: "wallTime", Value: wall},
	}
	if !durable.IsZero() {
		set = append(set, bson.E{Key: DurableField, Value: durable})
	}
	err := s.fencedSet(ctx, job, l, posKey(job), set)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "record position")
	}
	return err
}

// RecordStaleJoins records fields (nil: none) as the job's dependency
// fields whose dependents may hold an old join: a related change came
// without the related document's pre-image, so the documents that matched
// its old value were not sent again. Beside the position, so that a
// restart or another holder knows it too.
func (s *Store) RecordStaleJoins(ctx context.Context, job string, l Fence, fields []string) error {
	var set bson.D
	var unset []string
	if len(fields) > 0 {
		set = bson.D{{Key: "staleJoins", Value: fields}}
	} else {
		unset = []string{"staleJoins"}
	}
	err := s.fencedUpdate(ctx, job, l, posKey(job), set, unset, nil)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "record the lookups whose joins may be old")
	}
	return err
}

// RecordNewPosition records the position a reindex took, with job's hash
// and destination. When the hash differs from the recorded one, that one
// becomes previousHash and hashSince the server time of this write (the
// rollout rule of Run). The caller holds the lease and stamped the state, so
// nothing else writes between the read and the write.
func (s *Store) RecordNewPosition(ctx context.Context, job *jobdef.Job, l Fence, token bson.Raw, wall time.Time) error {
	var cur struct {
		Hash string `bson:"hash"`
	}
	err := s.state.FindOne(ctx, bson.D{{Key: "_id", Value: posKey(job.Name)}}).Decode(&cur)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return errs.Wrap(errs.Failed, job.Name, err, "read position")
	}
	set := bson.D{
		{Key: "token", Value: token},
		{Key: "wallTime", Value: wall},
		{Key: "hash", Value: job.Hash},
		{Key: "destination", Value: Destination(job)},
		{Key: "definition", Value: Definition(job)},
	}
	var unset []string
	now := []string{"reindexedAt"}
	if cur.Hash != job.Hash {
		if cur.Hash != "" {
			set = append(set, bson.E{Key: "previousHash", Value: cur.Hash})
		} else {
			unset = append(unset, "previousHash")
		}
		now = append(now, "hashSince")
	}
	err = s.fencedUpdate(ctx, job.Name, l, posKey(job.Name), set, unset, now)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job.Name, err, "record position")
	}
	return err
}

// RecordHash records job's hash in place of the one the position was
// recorded with, leaving the token, the hash history (previousHash,
// hashSince) and everything else as they are: for a hash computed another
// way of the very same transform (a position recorded by an earlier
// release, jobdef.Job.LegacyHash), which must not reindex.
func (s *Store) RecordHash(ctx context.Context, job *jobdef.Job, l Fence) error {
	err := s.fencedSet(ctx, job.Name, l, posKey(job.Name), bson.D{
		{Key: "hash", Value: job.Hash},
		{Key: "destination", Value: Destination(job)},
		{Key: "definition", Value: Definition(job)},
	})
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job.Name, err, "record the transform hash")
	}
	return err
}

// StagingInto returns the jobs other than job whose unfinished swap
// reindex stages next to destination dest: a staged target another job
// still builds is not abandoned.
func (s *Store) StagingInto(ctx context.Context, job, dest string) ([]string, error) {
	filter := bson.D{
		{Key: "_id.reindex", Value: bson.D{{Key: "$exists", Value: true}, {Key: "$ne", Value: job}}},
		{Key: "destination", Value: dest},
		{Key: "inPlace", Value: bson.D{{Key: "$ne", Value: true}}},
		{Key: "hash", Value: bson.D{{Key: "$exists", Value: true}}},
	}
	cur, err := s.state.Find(ctx, filter)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the other jobs' reindex checkpoints")
	}
	defer cur.Close(ctx)
	var out []string
	for cur.Next(ctx) {
		name, _ := cur.Current.Lookup("_id", "reindex").StringValueOK()
		out = append(out, name)
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, job, err, "read the other jobs' reindex checkpoints")
	}
	return out, nil
}

// destination is where job writes: its index uid, or its replica
// collection.
func Destination(job *jobdef.Job) string {
	if job.Kind == jobdef.Mirror {
		return job.Mirror
	}
	return job.Index
}

// definition is what of job, besides its transform code, decides its
// output: recorded with the position, compared on a hash change to tell a
// changed definition (index uid, primary key... from the file, environment
// overrides or the index prefix) from a changed transform.
func Definition(job *jobdef.Job) map[string]string {
	// Only what changes the output: a changed batchSize (which the
	// hash does not cover) must not be named as the cause of a reindex.
	d := map[string]string{
		"kind":       job.Kind.String(),
		"database":   job.Database,
		"collection": job.Collection,
		"fields":     fieldsText(job.Fields),
	}
	if job.Kind == jobdef.Mirror {
		d["mirror"] = job.Mirror
	} else {
		d["index"] = job.Index
		d["primaryKey"] = job.PrimaryKey
		d["dates"] = job.Dates
	}
	return d
}

// fieldsText is what a job's transform sees: its fields, "_id" alone, or
// "" for every field.
func fieldsText(fields []string) string {
	if fields != nil && len(fields) == 0 {
		return "_id"
	}
	return strings.Join(fields, ",")
}

// definitionChanges lists what differs between a recorded definition and
// job's ("index qa_products, was products"); nil when none or when none was
// recorded.
func DefinitionChanges(was map[string]string, job *jobdef.Job) []string {
	if len(was) == 0 {
		return nil
	}
	now := Definition(job)
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		if old, ok := was[k]; ok && old != now[k] {
			out = append(out, fmt.Sprintf("%s %q, was %q", k, now[k], old))
		}
	}
	return out
}

// ClearPosition removes the job's position (the next run reindexes); the
// document and its epoch stay.
func (s *Store) ClearPosition(ctx context.Context, job string, l Fence) error {
	if err := s.fencedUpdate(ctx, job, l, posKey(job), nil, positionFields, nil); err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "clear position")
	} else if err != nil {
		return err
	}
	return nil
}

func (s *Store) WriteCheckpoint(ctx context.Context, job string, l Fence, c *Checkpoint) error {
	set := bson.D{
		{Key: "startedAt", Value: c.StartedAt},
		{Key: "hash", Value: c.Hash},
		{Key: "inPlace", Value: c.InPlace},
		{Key: "asked", Value: c.Asked},
		{Key: "destination", Value: c.Destination},
		{Key: "count", Value: c.Count},
		{Key: "swapping", Value: c.Swapping},
		{Key: "throttled", Value: c.Throttled},
	}
	if c.LastID.Type != 0 {
		set = append(set, bson.E{Key: "lastId", Value: c.LastID})
	}
	err := s.fencedSet(ctx, job, l, cpKey(job), set)
	if err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "record reindex checkpoint")
	}
	return err
}

// DeleteCheckpoint clears the job's reindex checkpoint (the document and
// its epoch stay).
func (s *Store) DeleteCheckpoint(ctx context.Context, job string, l Fence) error {
	if err := s.fencedUpdate(ctx, job, l, cpKey(job), nil, checkpointFields, nil); err != nil && !errors.Is(err, errs.ErrLeaseLost) {
		return errs.Wrap(errs.Failed, job, err, "delete reindex checkpoint")
	} else if err != nil {
		return err
	}
	return nil
}

// JobState is what MongoDB holds about one job, for `meilistream status`.
type JobState struct {
	Name string
	// Position is nil when the job has none (never run, invalidated, or a
	// reindex not finished yet).
	Position *PositionState
	// Reindex is the checkpoint of an unfinished reindex, or nil.
	Reindex *ReindexState
	// Errors counts the job's documents in the errors collection.
	Errors int64
}

// PositionState describes a recorded position.
type PositionState struct {
	WallTime  time.Time // wall time of the change it stands after
	Hash      string    // transform hash it was recorded with
	Previous  string    // the hash recorded before Hash ("" if none)
	HashSince time.Time // server time Hash was first recorded
	Epoch     int64     // lease epoch of the writer
	UpdatedAt time.Time // server time of the write
	// Token is the resume token: `meilistream status` reads the stream
	// after it to tell how far behind the job is.
	Token bson.Raw
	// Database and Collection are the source the position was recorded
	// for (from the recorded definition; "" when none was recorded): what
	// `meilistream status` reads for a job whose file is gone.
	Database   string
	Collection string
}

// ReindexState describes an unfinished reindex's checkpoint.
type ReindexState struct {
	StartedAt time.Time
	Hash      string
	InPlace   bool
	LastID    string // the last _id of the last durable page, rendered
	Count     int64  // documents read up to it
	Epoch     int64
	UpdatedAt time.Time
	// Throttled is what slowed the chunks when the checkpoint was
	// written, "" if nothing (Checkpoint.Throttled).
	Throttled string
}

// ReadState returns every job that has a position, a checkpoint or error
// records, sorted by name. errorsColl may be nil.
func ReadState(ctx context.Context, state, errorsColl *mongo.Collection) ([]JobState, error) {
	jobs := map[string]*JobState{}
	get := func(name string) *JobState {
		j := jobs[name]
		if j == nil {
			j = &JobState{Name: name}
			jobs[name] = j
		}
		return j
	}
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "_id.position", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "_id.reindex", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}}
	cur, err := state.Find(ctx, filter)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "read job state")
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var d struct {
			ID struct {
				Position string `bson:"position"`
				Reindex  string `bson:"reindex"`
			} `bson:"_id"`
			Token      bson.Raw      `bson:"token"`
			WallTime   time.Time     `bson:"wallTime"`
			StartedAt  time.Time     `bson:"startedAt"`
			Hash       string        `bson:"hash"`
			Previous   string        `bson:"previousHash"`
			HashSince  time.Time     `bson:"hashSince"`
			InPlace    bool          `bson:"inPlace"`
			LastID     bson.RawValue `bson:"lastId"`
			Count      int64         `bson:"count"`
			Throttled  string        `bson:"throttled"`
			Epoch      int64         `bson:"leaseEpoch"`
			Updated    time.Time     `bson:"updatedAt"`
			Definition struct {
				Database   string `bson:"database"`
				Collection string `bson:"collection"`
			} `bson:"definition"`
		}
		if err := cur.Decode(&d); err != nil {
			return nil, errs.Wrap(errs.Failed, "", err, "decode job state")
		}
		// A document without its token is a cleared (or only stamped)
		// one: no position, no checkpoint.
		switch {
		case d.ID.Position != "" && len(d.Token) > 0:
			get(d.ID.Position).Position = &PositionState{WallTime: d.WallTime, Hash: d.Hash, Previous: d.Previous, HashSince: d.HashSince,
				Epoch: d.Epoch, UpdatedAt: d.Updated, Token: append(bson.Raw(nil), d.Token...), Database: d.Definition.Database, Collection: d.Definition.Collection}
		case d.ID.Reindex != "" && d.Hash != "":
			r := &ReindexState{StartedAt: d.StartedAt, Hash: d.Hash, InPlace: d.InPlace, Count: d.Count, Epoch: d.Epoch, UpdatedAt: d.Updated, Throttled: d.Throttled}
			if d.LastID.Type != 0 {
				r.LastID = d.LastID.String()
			}
			get(d.ID.Reindex).Reindex = r
		}
	}
	if err := cur.Err(); err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "read job state")
	}
	if errorsColl != nil {
		counts, err := countErrors(ctx, errorsColl)
		if err != nil {
			return nil, err
		}
		for name, n := range counts {
			get(name).Errors = n
		}
	}
	out := make([]JobState, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, *j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}
