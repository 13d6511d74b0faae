package scripttest

// Custom testscript commands of the operator's-loop scenarios (retry while
// running, rollouts, abandoned reindexes, upgrades). They use the real
// clients against whatever servers the script has, real ones included.

import (
	"errors"
	"flag"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

func init() {
	Cmds["index-exists"] = cmdIndexExists
	Cmds["position-legacy-hash"] = cmdPositionLegacyHash
}

// cmdIndexExists: index-exists [-timeout D] INDEX polls until index
// ($MEILISTREAM_INDEX_PREFIX+INDEX) exists (with !, until it does not).
func cmdIndexExists(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("index-exists", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: index-exists [-timeout D] INDEX")
	}
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + fs.Arg(0)
	ms := scriptMeili(ts)
	deadline := time.Now().Add(*timeout)
	for {
		ctx, cancel := cmdCtx()
		_, err := ms.GetIndex(ctx, uid)
		cancel()
		var me *meilisearch.Error
		missing := errors.As(err, &me) && me.APIError.Code == "index_not_found"
		switch {
		case err == nil && !neg, missing && neg:
			return
		case err != nil && !missing:
			ts.Logf("index %s: %v", uid, err)
		}
		if time.Now().After(deadline) {
			if neg {
				ts.Fatalf("index %s still exists after %s", uid, *timeout)
			}
			ts.Fatalf("index %s does not exist after %s", uid, *timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdPositionLegacyHash: position-legacy-hash JOB rewrites the job's
// recorded position as a release before the token hash recorded it: with
// transform.Job.LegacyHash, the hash of the transform file's bytes (the
// script's MEILISTREAM_INDEX_PREFIX in it, as the sidecar has it).
func cmdPositionLegacyHash(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: position-legacy-hash JOB")
	}
	dir := ts.Getenv("MEILISTREAM_TRANSFORMS")
	set, err := transform.Load(ts.MkAbs(dir), transform.Options{Pool: 1, IndexPrefix: ts.Getenv("MEILISTREAM_INDEX_PREFIX")})
	if set == nil || set.Job(args[0]) == nil {
		ts.Fatalf("load job %s from %s: %v", args[0], dir, err)
	}
	job := set.Job(args[0])
	state := stateCollection(ts)
	ctx, cancel := cmdCtx()
	defer cancel()
	res, err := scriptMongo(ts).Collection(state).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: job.Name}}}, {Key: "hash", Value: job.Hash}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "hash", Value: job.LegacyHash}}}})
	ts.Check(err)
	if res.ModifiedCount != 1 {
		ts.Fatalf("no position of job %s recorded with its hash %s", job.Name, job.Hash)
	}
}
