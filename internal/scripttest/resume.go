package scripttest

// Custom testscript commands that count what a reindex or backfill killed
// midway does twice (sync_resume_killed_reindex, mirror_resume_killed_backfill).

import (
	"flag"
	"fmt"
	"strings"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func init() {
	Cmds["meili-received"] = cmdMeiliReceived
	Cmds["replica-past-checkpoint"] = cmdReplicaPastCheckpoint
}

// cmdMeiliReceived: meili-received [-min N] [-max N] prints how many
// documents Meilisearch received in document additions to the script's
// indexes (staged ones included): the sum of the receivedDocuments of
// their documentAdditionOrUpdate tasks, whatever became of them. A
// reindex sends each document once, so after a reindex of N documents the
// count less N is what was sent twice.
func cmdMeiliReceived(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("meili-received", flag.ContinueOnError)
	lo := fs.Int64("min", -1, "")
	hi := fs.Int64("max", -1, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 0 {
		ts.Fatalf("usage: meili-received [-min N] [-max N]")
	}
	prefix := ts.Getenv("MEILISTREAM_INDEX_PREFIX")
	ms := scriptMeili(ts)
	ctx, cancel := cmdCtx()
	defer cancel()
	var n int64
	q := &meilisearch.TasksQuery{Types: []meilisearch.TaskType{meilisearch.TaskTypeDocumentAdditionOrUpdate}, Limit: 1000}
	for {
		res, err := ms.GetTasks(ctx, q)
		ts.Check(err)
		for _, t := range res.Results {
			if t.Type == meilisearch.TaskTypeDocumentAdditionOrUpdate && strings.HasPrefix(t.IndexUID, prefix) {
				n += t.Details.ReceivedDocuments
			}
		}
		// Tasks are listed newest first; next is the uid to go on from
		// (none: 0, and task 0 is the index's creation here).
		if res.Next <= 0 || len(res.Results) == 0 {
			break
		}
		q.From = res.Next
	}
	fmt.Fprintf(ts.Stdout(), "%d\n", n)
	if *lo >= 0 && n < *lo {
		ts.Fatalf("Meilisearch received %d documents, want at least %d", n, *lo)
	}
	if *hi >= 0 && n > *hi {
		ts.Fatalf("Meilisearch received %d documents, want at most %d", n, *hi)
	}
}

// cmdReplicaPastCheckpoint: replica-past-checkpoint [-max N] JOB prints how
// many documents the mirror job's replica collection holds past the _id of
// the job's reindex checkpoint: what a process killed in a backfill wrote
// that its successor, resuming after that _id, writes again. Run it once
// the killed process is gone (its blocked writes are dropped with its
// connections). The _ids must be of one type (it compares with $gt).
func cmdReplicaPastCheckpoint(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("replica-past-checkpoint", flag.ContinueOnError)
	hi := fs.Int64("max", -1, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: replica-past-checkpoint [-max N] JOB")
	}
	job := loadScriptJob(ts, fs.Arg(0))
	state := stateCollection(ts)
	ctx, cancel := cmdCtx()
	defer cancel()
	var cp struct {
		LastID bson.RawValue `bson:"lastId"`
		Count  int64         `bson:"count"`
	}
	err := scriptMongo(ts).Collection(state).FindOne(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "reindex", Value: job.Name}}}}).Decode(&cp)
	if err != nil {
		ts.Fatalf("read %s's reindex checkpoint: %v", job.Name, err)
	}
	filter := bson.D{}
	if cp.LastID.Type != 0 {
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: cp.LastID}}}}
	}
	n, err := scriptReplica(ts).Collection(job.Mirror).CountDocuments(ctx, filter)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "checkpoint at %d documents (last _id %s); %d past it in the replica\n", cp.Count, cp.LastID, n)
	if *hi >= 0 && n > *hi {
		ts.Fatalf("the replica holds %d documents past the checkpoint, want at most %d", n, *hi)
	}
}
