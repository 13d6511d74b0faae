package mongotest_test

import (
	"context"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/mongotest"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// start runs a server and a connected driver client for one test.
// Each test has its own server, so tests run in parallel.
func start(t *testing.T, opts ...mongotest.Options) (*mongotest.Server, *mongo.Client) {
	t.Helper()
	t.Parallel()
	return another(t, opts...)
}

// another starts one more server (and client) in a test that has one.
func another(t *testing.T, opts ...mongotest.Options) (*mongotest.Server, *mongo.Client) {
	t.Helper()
	var o mongotest.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	srv, err := mongotest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	client := connect(t, srv)
	return srv, client
}

func connect(t *testing.T, srv *mongotest.Server) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.Disconnect(ctx)
	})
	return client
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// largeCtx is ctx for the tests that move 16 MB events: under the race
// detector on a loaded machine they take far longer than ctx allows.
func largeCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

func startB(b *testing.B) (*mongotest.Server, *mongo.Client) {
	b.Helper()
	srv, err := mongotest.Start(mongotest.Options{HistorySize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Disconnect(context.Background()) })
	return srv, client
}
