package supervisor_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/testutil"
	"github.com/meilistream/meilistream/sidecar/supervisor"
)

// silentTimeout is what the driver returns for a server that accepts a
// connection and never answers: the lease acquire of a standby on a
// loaded cluster, as the job's error wraps it.
func silentTimeout(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + ln.Addr().String() + "/?directConnection=true&connectTimeoutMS=300&serverSelectionTimeoutMS=600&timeoutMS=600"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	err = c.Database("app").RunCommand(context.Background(), bson.D{{Key: "ping", Value: 1}}).Err()
	if err == nil {
		t.Fatal("a server that never answers answered")
	}
	return errs.Wrap(errs.Failed, "books", err, "acquire lease")
}

// A job whose first attempt times out against a server is logged at warn,
// not as a failure: one slow answer on a busy cluster pages nobody. Its
// second failure in a row is an error, as is any other failure.
func TestAFirstTimeoutIsAWarningAndASecondAnError(t *testing.T) {
	timeout := silentTimeout(t)
	for _, c := range []struct {
		name   string
		errs   []error
		levels []string // the level of each failure's line
	}{
		{"one timeout", []error{timeout}, []string{"warn"}},
		{"two timeouts in a row", []error{timeout, timeout}, []string{"warn", "error"}},
		{"another failure", []error{errs.New(errs.Failed, "books", "boom")}, []string{"error"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newFakeDriver(func(ctx context.Context, def supervisor.JobDef, call int) error {
				if call <= len(c.errs) {
					return c.errs[call-1]
				}
				<-ctx.Done()
				return nil
			})
			logs := &testutil.SyncBuffer{}
			s := supervisor.New(supervisor.Config{
				Driver: d, RestartMin: 5 * time.Millisecond, RestartMax: 40 * time.Millisecond,
				Logger: hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true}),
			})
			s.Apply([]supervisor.JobDef{{Name: "books", Hash: "1"}})
			eventually(t, "the job runs after its failures", func() bool {
				return d.callsOf("books") == len(c.errs)+1 && jobState(s, "books").State == supervisor.StateRunning
			}, func() string { return fmt.Sprintf("%+v", jobState(s, "books")) })
			closeSupervisor(t, s)
			var got []string
			for _, l := range strings.Split(logs.String(), "\n") {
				switch {
				case strings.Contains(l, "could not reach a server"):
					got = append(got, "warn")
					if !strings.Contains(l, `"@level":"warn"`) {
						t.Errorf("not at warn: %s", l)
					}
				case strings.Contains(l, "job failed, restarting"):
					got = append(got, "error")
					if !strings.Contains(l, `"@level":"error"`) {
						t.Errorf("not at error: %s", l)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.levels) {
				t.Errorf("failures logged as %v, want %v:\n%s", got, c.levels, logs.String())
			}
		})
	}
}
