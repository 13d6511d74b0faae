package replicate

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongoerr"
)

// Check is the capability check of a mirror job, run at its start (Prepare):
//   - the source must be a replica set or a sharded cluster, since only they
//     have change streams (a standalone mongod answers hello without setName
//     and is not a mongos, msg "isdbgrid");
//   - the replica must accept majority writes into the destination
//     collection: a no-op deleteOne on it (an _id no document has) with
//     majority write concern proves the user may write there and the server
//     is a primary with a majority, without creating the collection or
//     writing an oplog entry;
//   - the replica collection must not be the source collection itself.
//
// What only the configuration can fix is CONFIG_INVALID, saying what to do;
// a server that cannot be reached is FAILED (the supervisor retries).
func Check(ctx context.Context, job string, source, replica *mongo.Collection) error {
	return check(ctx, job, source, replica, false)
}

// check is Check; with scans (a job of mode scan or auto, which reads a
// standalone source by its key) the source need not have change streams.
func check(ctx context.Context, job string, source, replica *mongo.Collection, scans bool) error {
	src, err := hello(ctx, source.Database().Client())
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "reach the source MongoDB")
	}
	if !src.replicated() && !scans {
		return errs.New(errs.ConfigInvalid, job,
			"the source MongoDB is a standalone server: mirror jobs follow its change stream, which only a replica set or a sharded cluster has; "+
				"convert it to a one-node replica set (start mongod with --replSet rs0 and run rs.initiate() once; see docs/mirror-jobs.md), or give the job mode: \"scan\" (docs/scan-mode.md)")
	}
	rep, err := hello(ctx, replica.Database().Client())
	if err != nil && mongoerr.AuthFailed(err) {
		// Waiting will not fix refused credentials, as for the source.
		return &errs.Error{Code: errs.ConfigInvalid, Job: job, Err: redacted(err), Setting: replicaURI,
			Msg: "the replica MongoDB refused the credentials of MEILISTREAM_REPLICA_URI (or MEILISTREAM_REPLICA_URI_FILE): fix them and restart meilistream"}
	}
	if err != nil {
		return errs.Wrap(errs.Failed, job, err, "reach the replica MongoDB (MEILISTREAM_REPLICA_URI)")
	}
	if !rep.writable() {
		return &errs.Error{Code: errs.ConfigInvalid, Job: job, Setting: replicaURI,
			Msg: "the replica MongoDB (MEILISTREAM_REPLICA_URI) is not a writable primary (secondary or read-only); point it at the replica set, not one member"}
	}
	if src.sameDeployment(rep) && source.Database().Name() == replica.Database().Name() && source.Name() == replica.Name() {
		return errs.New(errs.ConfigInvalid, job,
			"the mirror's destination %s.%s is its own source collection; set the job's mirror option or MEILISTREAM_REPLICA_DATABASE to another collection",
			replica.Database().Name(), replica.Name())
	}
	probe := replica.Database().Collection(replica.Name(), options.Collection().SetWriteConcern(writeconcern.Majority()))
	_, err = probe.DeleteOne(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "meilistream-write-check", Value: bson.NewObjectID()}}}})
	if err != nil {
		var se mongo.ServerError
		if errors.As(err, &se) && !isTransient(se) && !mongo.IsTimeout(err) {
			return &errs.Error{Code: errs.ConfigInvalid, Job: job, Err: redacted(err), Setting: replicaURI,
				Msg: fmt.Sprintf("the replica MongoDB refuses writes to %s.%s; give MEILISTREAM_REPLICA_URI's user readWrite there",
					replica.Database().Name(), replica.Name())}
		}
		return errs.Wrap(errs.Failed, job, redacted(err), "write to the replica MongoDB")
	}
	return nil
}

// helloReply is what Check reads of a hello reply.
type helloReply struct {
	SetName           string   `bson:"setName"`
	Msg               string   `bson:"msg"`
	IsWritablePrimary bool     `bson:"isWritablePrimary"`
	Secondary         bool     `bson:"secondary"`
	ReadOnly          bool     `bson:"readOnly"`
	Hosts             []string `bson:"hosts"`
	Me                string   `bson:"me"`
}

func hello(ctx context.Context, c *mongo.Client) (helloReply, error) {
	var h helloReply
	err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&h)
	if err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

func (h helloReply) mongos() bool { return h.Msg == "isdbgrid" }

// replicated: a replica set member or a mongos; both serve change streams.
func (h helloReply) replicated() bool { return h.SetName != "" || h.mongos() }

// writable: hello's own word on whether writes are accepted here. A
// standalone (no setName) is a writable primary too; majority write concern
// then means the one node.
func (h helloReply) writable() bool {
	return (h.IsWritablePrimary || h.mongos()) && !h.ReadOnly
}

// sameDeployment is a best effort: the same replica set name with a member in
// common. Two mongos of one cluster are not told apart from two clusters.
func (h helloReply) sameDeployment(o helloReply) bool {
	if h.SetName == "" || h.SetName != o.SetName {
		return false
	}
	for _, a := range append(h.Hosts, h.Me) {
		for _, b := range append(o.Hosts, o.Me) {
			if a != "" && a == b {
				return true
			}
		}
	}
	return false
}

// replicaURI is the setting the replica's configuration errors name
// (errs.Error.Setting): read once at start, so fixing it needs a restart.
const replicaURI = "MEILISTREAM_REPLICA_URI"
