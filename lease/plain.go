package lease

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/errs"
)

// The form without update pipelines (package doc, "Without update
// pipelines"): each write is preceded by a read of the server's clock, and
// its filter and values are plain operators over that reading.

func (m *Manager) acquirePlain(ctx context.Context, name, nonce string) (*Lease, *heldError, error) {
	opts := options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		sent := m.now()
		var now time.Time
		if now, err = capability.Now(ctx, m.coll.Database()); err != nil {
			return nil, nil, errs.Wrap(errs.Failed, name, err, "acquire lease")
		}
		// Free: never written, released, or expired by the reading.
		filter := append(key(name), bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lte", Value: now}}}},
		}})
		update := bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "holder", Value: m.holder},
				{Key: "nonce", Value: nonce},
				// The reading, not $currentDate: the lease lasts exactly
				// the TTL from its acquisition, as in the pipeline form.
				{Key: "acquiredAt", Value: now},
				{Key: "expiresAt", Value: now.Add(m.ttl)},
				{Key: "ttlMs", Value: m.ttl.Milliseconds()},
			}},
			{Key: "$inc", Value: bson.D{{Key: "epoch", Value: int64(1)}}},
		}
		var d leaseDoc
		err = m.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&d)
		if err == nil {
			return newLease(m, name, nonce, d, sent), nil, nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return nil, nil, errs.Wrap(errs.Failed, name, err, "acquire lease")
		}
		// The filter is not a pure equality, so a lease that is not free
		// answers with a duplicate key: the upsert tried to insert its _id.
		var held leaseDoc
		if rerr := m.coll.FindOne(ctx, key(name)).Decode(&held); rerr == nil && held.Holder != "" && held.ExpiresAt.After(now) {
			h := &heldError{holder: held.Holder, until: held.ExpiresAt, epoch: held.Epoch}
			return nil, h, &errs.Error{Code: errs.Running, Job: name, Msg: "lease " + h.Error()}
		}
		// Released or expired since the reading: read the clock again.
	}
	h := &heldError{unknown: true}
	return nil, h, &errs.Error{Code: errs.Running, Job: name, Msg: "lease " + h.Error(), Err: err}
}

func (l *Lease) renewPlain(ctx context.Context) (bool, error) {
	sent := l.m.now()
	now, err := capability.Now(ctx, l.m.coll.Database())
	if err != nil {
		return false, err
	}
	filter := append(l.filter(), bson.E{Key: "expiresAt", Value: bson.D{{Key: "$gt", Value: now}}})
	update := bson.D{
		// $max: a renewal never moves the expiry back, whatever reading it
		// was computed from.
		{Key: "$max", Value: bson.D{{Key: "expiresAt", Value: now.Add(l.m.ttl)}}},
		{Key: "$set", Value: bson.D{{Key: "ttlMs", Value: l.m.ttl.Milliseconds()}}},
	}
	// No projection: FerretDB's findAndModify refuses "fields"
	// (NotImplemented); the whole lease document is small.
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	var d leaseDoc
	err = l.m.coll.FindOneAndUpdate(ctx, filter, update, opts).Decode(&d)
	return l.renewed(sent, d, err)
}

// releasePlain frees the lease at the server's clock, keeping its epoch.
var releasePlain = bson.D{
	{Key: "$currentDate", Value: bson.D{{Key: "expiresAt", Value: true}}},
	{Key: "$unset", Value: bson.D{{Key: "holder", Value: ""}, {Key: "nonce", Value: ""}}},
}

// List is the package's List in the form the source takes.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	pipelines, err := m.form.Pipelines(ctx)
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	if pipelines {
		return List(ctx, m.coll)
	}
	// The clock is read before the documents: a lease that expires in
	// between is shown live, never the other way round.
	now, err := capability.Now(ctx, m.coll.Database())
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	cur, err := m.coll.Find(ctx, bson.D{{Key: "_id.lease", Value: bson.D{{Key: "$exists", Value: true}}}},
		options.Find().SetProjection(bson.D{{Key: "nonce", Value: 0}}))
	if err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	var rows []leaseRow
	if err := cur.All(ctx, &rows); err != nil {
		return nil, errs.Wrap(errs.Failed, "", err, "list leases")
	}
	return infos(rows, func(r leaseRow) bool { return !r.ExpiresAt.After(now) }), nil
}

// HeldBy is the package's HeldBy in the form the source takes.
func (m *Manager) HeldBy(ctx context.Context, name string) (string, error) {
	pipelines, err := m.form.Pipelines(ctx)
	if err != nil {
		return "", err
	}
	if pipelines {
		return HeldBy(ctx, m.coll, name)
	}
	now, err := capability.Now(ctx, m.coll.Database())
	if err != nil {
		return "", err
	}
	var d leaseDoc
	err = m.coll.FindOne(ctx, key(name), options.FindOne().SetProjection(bson.D{{Key: "holder", Value: 1}, {Key: "expiresAt", Value: 1}})).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) || err == nil && !d.ExpiresAt.After(now) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return d.Holder, nil
}
