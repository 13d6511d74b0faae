package capability_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

func TestProbeSaysWhatTheSourceCanDo(t *testing.T) {
	for _, tc := range []struct {
		what                      string
		opts                      mongotest.Options
		streams, pipelines, exprs bool
		refusals                  []string // capability: code
	}{
		{"a replica set has everything", mongotest.Options{}, true, true, true, nil},
		{"a standalone mongod has no change streams", mongotest.Options{Standalone: true}, false, true, true,
			[]string{"change streams: 40573"}},
		{"a server like FerretDB has neither change streams nor pipelines nor $$NOW expressions",
			mongotest.Options{Standalone: true, NoExpressions: true}, false, false, false,
			[]string{"change streams: 40573", "update pipelines: 238", "$$NOW in $expr: 238"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, client := testutil.StartMongo(t, tc.opts)
			state := client.Database("probe").Collection("meilistream")
			ctx := testutil.Context(t, 30*time.Second)
			p := capability.NewProber(state)
			s, err := p.Source(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.ChangeStreams != tc.streams || s.UpdatePipelines != tc.pipelines || s.ExprNow != tc.exprs {
				t.Errorf("got streams %v pipelines %v $$NOW %v, want %v %v %v", s.ChangeStreams, s.UpdatePipelines, s.ExprNow, tc.streams, tc.pipelines, tc.exprs)
			}
			var got []string
			for _, r := range s.Refusals {
				got = append(got, r.Capability+": "+itoa(r.Code))
			}
			if strings.Join(got, "; ") != strings.Join(tc.refusals, "; ") {
				t.Errorf("refusals %q, want %q", got, tc.refusals)
			}
			if pl, err := p.Pipelines(ctx); err != nil || pl != (tc.pipelines && tc.exprs) {
				t.Errorf("Pipelines = %v, %v", pl, err)
			}
			err = s.Check([]string{"books", "films"}, "MEILISTREAM_MONGODB_URI")
			if tc.streams {
				if err != nil {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			for _, want := range []string{"MEILISTREAM_MONGODB_URI", "no change streams", "books, films", "code 40573", `mode: "scan"`, "replica set", "no replica set (hello has no setName)"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Check = %v, want it to say %q", err, want)
				}
			}
			if err := s.Check(nil, "MEILISTREAM_MONGODB_URI"); err != nil {
				t.Errorf("Check with no stream jobs = %v", err)
			}
		})
	}
}

func TestProbeOfAnUnreachableServerIsAnErrorAskedAgain(t *testing.T) {
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	state := client.Database("probe").Collection("meilistream")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := capability.NewProber(state).Source(ctx); err == nil {
		t.Fatal("a probe of a closed server answered")
	}
}

func TestNowReadsTheServersClock(t *testing.T) {
	srv, client := testutil.StartMongo(t, mongotest.Options{})
	srv.AdvanceClock(time.Hour)
	now, err := capability.Now(testutil.Context(t, 30*time.Second), client.Database("x"))
	if err != nil {
		t.Fatal(err)
	}
	if d := now.Sub(time.Now()); d < 59*time.Minute {
		t.Errorf("Now is %s ahead of the process clock, want the server's clock an hour ahead", d)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// A user that may not write (status with a read-only user) still gets an
// answer: change streams probed, pipelines assumed as before the probe.
func TestProbeWithoutWriteAccessAssumesPipelines(t *testing.T) {
	_, client := testutil.StartMongo(t, mongotest.Options{Standalone: true})
	ctx := testutil.Context(t, 30*time.Second)
	err := client.Database("admin").RunCommand(ctx, bson.D{
		{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{{Key: "failCommands", Value: bson.A{"update"}}, {Key: "errorCode", Value: 13}}},
	}).Err()
	if err != nil {
		t.Fatal(err)
	}
	s, err := capability.Probe(ctx, client.Database("probe").Collection("meilistream"))
	if err != nil {
		t.Fatal(err)
	}
	if s.ChangeStreams || !s.Pipelines() || s.Unprobed == "" || !strings.Contains(s.Unprobed, "code 13") {
		t.Errorf("got %+v, want no change streams, pipelines assumed, the refused write named", s)
	}
}
