package jobstate

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/capability"
	"github.com/meilistream/meilistream/internal/mongotest"
	"github.com/meilistream/meilistream/internal/testutil"
)

// forEachForm runs test in both forms of the server-time records: with
// update pipelines and $$NOW (a nil Form), and on a server refusing them
// as FerretDB does, in the form the capability probe then chooses.
func forEachForm(t *testing.T, test func(t *testing.T, srv *mongotest.Server, client *mongo.Client, form capability.Form)) {
	t.Run("with update pipelines", func(t *testing.T) {
		srv, client := testutil.StartMongo(t, mongotest.Options{})
		test(t, srv, client, nil)
	})
	t.Run("without update pipelines", func(t *testing.T) {
		srv, client := testutil.StartMongo(t, mongotest.Options{NoExpressions: true})
		form := capability.NewProber(client.Database("app").Collection("meilistream")).Pipelines
		if ok, err := form(testutil.Context(t, 30*time.Second)); err != nil || ok {
			t.Fatalf("the probe says pipelines %v (%v) of a server refusing them", ok, err)
		}
		test(t, srv, client, form)
	})
}

func TestPresenceCountsOnlyOtherLiveProcessesWithTheHash(t *testing.T) {
	forEachForm(t, testPresenceCountsOnlyOtherLiveProcessesWithTheHash)
}

func testPresenceCountsOnlyOtherLiveProcessesWithTheHash(t *testing.T, srv *mongotest.Server, client *mongo.Client, form capability.Form) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := client.Database("app")
	s := New(db.Collection("meilistream"), nil, func(context.Context, int) error { return nil })
	s.SetForm(form)

	for _, p := range []struct{ process, hash string }{{"pod-a", "new"}, {"pod-b", "old"}, {"pod-c", "new"}} {
		if err := s.MarkPresent(ctx, "books", p.process, p.hash, "", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkPresent(ctx, "authors", "pod-d", "new", "", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	names := func(ps []Presence) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Job+"/"+p.Process)
		}
		return out
	}
	live, err := s.LiveWithHash(ctx, "books", "new", "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(live); len(got) != 1 || got[0] != "books/pod-c" {
		t.Fatalf("live with hash new but pod-a's own: %v, want books/pod-c", got)
	}

	t.Run("a record not refreshed stops counting by the server's clock", func(t *testing.T) {
		if err := s.MarkPresent(ctx, "books", "pod-c", "new", "", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		srv.AdvanceClock(3 * time.Second)
		live, err := s.LiveWithHash(ctx, "books", "new", "pod-a")
		if err != nil || len(live) != 0 {
			t.Fatalf("after its time: %v %v, want none", names(live), err)
		}
	})

	t.Run("a removed record is gone, a waiting one says why", func(t *testing.T) {
		if err := s.MarkPresent(ctx, "books", "pod-b", "old", "this process's transform is older", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.RemovePresence(ctx, "books", "pod-a"); err != nil {
			t.Fatal(err)
		}
		all, err := ReadPresence(ctx, db.Collection("meilistream"), form)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(all); len(got) != 2 || got[0] != "authors/pod-d" || got[1] != "books/pod-b" ||
			all[1].Waiting != "this process's transform is older" || all[1].Hash != "old" || all[0].Waiting != "" {
			t.Fatalf("live records %+v, want pod-d's (authors) and pod-b's (books, waiting)", all)
		}
	})
}
