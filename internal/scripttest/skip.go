package scripttest

// Custom testscript commands for what a job spares downstream
// (sync_skip_*, sync_fields_*).

import (
	"encoding/hex"
	"flag"
	"fmt"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func init() {
	Cmds["position-past"] = cmdPositionPast
}

// cmdPositionPast: position-past [-timeout D] JOB reads the server's
// operation time now (after every write the script made) and polls until
// the job's recorded position is at it or past it: the resume token's
// cluster time (its _data starts with 0x82 and the timestamp, 8 bytes big
// endian, as mongod's resume tokens do: resume_token.cpp) is not before
// it.
func cmdPositionPast(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("position-past", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: position-past [-timeout D] JOB")
	}
	job := fs.Arg(0)
	state := stateCollection(ts)
	db := scriptMongo(ts)
	ctx, cancel := cmdCtx()
	defer cancel()
	reply, err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	ts.Check(err)
	t, i, ok := reply.Lookup("operationTime").TimestampOK()
	if !ok {
		ts.Fatalf("position-past: the hello reply has no operationTime: %s", reply)
	}
	want := uint64(t)<<32 | uint64(i)
	deadline := time.Now().Add(*timeout)
	var last string
	for {
		var pos struct {
			Token bson.Raw `bson:"token"`
		}
		err := db.Collection(state).FindOne(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: job}}}}).Decode(&pos)
		if err == nil && len(pos.Token) > 0 {
			data, _ := pos.Token.Lookup("_data").StringValueOK()
			last = data
			if b, err := hex.DecodeString(data); err == nil && len(b) >= 9 && b[0] == 0x82 {
				var at uint64
				for _, x := range b[1:9] {
					at = at<<8 | uint64(x)
				}
				if at >= want {
					fmt.Fprintf(ts.Stdout(), "position at %d.%d, operation time %d.%d\n", at>>32, uint32(at), t, i)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("position-past: %s's position (%q) is not past the operation time %d.%d after %s", job, last, t, i, *timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
