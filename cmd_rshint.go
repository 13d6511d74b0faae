package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// replicaSetHint explains a MongoDB that cannot be reached through uri
// when the cause is the URI's replicaSet name: the driver then discards
// every member it reaches (their set has another name) and reports only
// "ReplicaSetNoPrimary" with no server, which says nothing of the typo.
// It asks each seed host directly (directConnection, no set name) which
// set it belongs to, within timeout, and returns a hint naming both names,
// or "" when the seeds agree with the URI, do not answer, or the URI names
// no set. The hint holds hosts and set names only, never credentials.
func replicaSetHint(ctx context.Context, uri string, timeout time.Duration) string {
	cs, err := connstring.ParseAndValidate(uri)
	if err != nil || cs.ReplicaSet == "" || cs.Scheme == connstring.SchemeMongoDBSRV {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, host := range cs.Hosts {
		opts := options.Client().ApplyURI(uri).SetHosts([]string{host}).SetDirect(true).SetReplicaSet("").
			SetServerSelectionTimeout(timeout).SetAppName("meilistream")
		c, err := mongo.Connect(opts)
		if err != nil {
			continue
		}
		var hello struct {
			SetName string `bson:"setName"`
		}
		err = c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
		_ = c.Disconnect(context.WithoutCancel(ctx))
		if err != nil {
			continue
		}
		switch {
		case hello.SetName == "":
			return fmt.Sprintf("%s is not a replica set member (a standalone mongod), but MEILISTREAM_MONGODB_URI asks for replicaSet=%s: change streams need a replica set (start mongod with --replSet and rs.initiate())", host, cs.ReplicaSet)
		case hello.SetName != cs.ReplicaSet:
			return fmt.Sprintf("%s belongs to replica set %q, but MEILISTREAM_MONGODB_URI asks for replicaSet=%s: fix the URI's replicaSet (names are case-sensitive)", host, hello.SetName, cs.ReplicaSet)
		}
	}
	return ""
}

// withReplicaSetHint appends replicaSetHint's explanation to msg when
// there is one.
func withReplicaSetHint(ctx context.Context, msg, uri string, timeout time.Duration) string {
	if h := replicaSetHint(ctx, uri, timeout); h != "" {
		return strings.TrimRight(msg, ". ") + " (" + h + ")"
	}
	return msg
}
