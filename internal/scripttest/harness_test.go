package scripttest

import (
	"context"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// TestScriptServers checks the servers the scripts get answer the real
// clients, so a script failure is not a harness failure in disguise.
func TestScriptServers(t *testing.T) {
	srv := &servers{} // its own: the suite's are closed when TestScripts ends
	t.Cleanup(srv.close)
	if err := srv.start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	if err := client.Ping(ctx, nil); err != nil {
		t.Errorf("MongoDB at %s: %v", srv.mongoURI, err)
	}
	meili := meilisearch.New(srv.meiliURL, meilisearch.WithAPIKey(srv.meiliKey))
	if _, err := meili.ListIndexes(ctx, &meilisearch.IndexesQuery{Limit: 1}); err != nil {
		t.Errorf("Meilisearch at %s: %v", srv.meiliURL, err)
	}
}

// TestProxyTarget checks how proxy start rewrites a server address: a
// mongodb:// URI keeps its user, database and options and gets
// directConnection=true; what a TCP proxy cannot stand in front of is
// refused.
func TestProxyTarget(t *testing.T) {
	for _, c := range []struct{ in, dial, out string }{
		{"mongodb://127.0.0.1:4000/?replicaSet=rs0", "127.0.0.1:4000", "mongodb://127.0.0.1:9/?replicaSet=rs0&directConnection=true"},
		{"mongodb://u:p%40ss@db:27017/admin?directConnection=false&authSource=admin", "db:27017", "mongodb://u:p%40ss@127.0.0.1:9/admin?authSource=admin&directConnection=true"},
		{"mongodb://localhost?replicaSet=rs0", "localhost:27017", "mongodb://127.0.0.1:9/?replicaSet=rs0&directConnection=true"},
		{"http://127.0.0.1:7700", "127.0.0.1:7700", "http://127.0.0.1:9"},
		{"http://meili/prefix", "meili:80", "http://127.0.0.1:9/prefix"},
		{"mongodb://a:1,b:2/?replicaSet=rs0", "", ""},
		{"mongodb://h/?tls=true", "", ""},
		{"mongodb+srv://cluster.example/", "", ""},
		{"https://meili", "", ""},
	} {
		dial, rewrite, err := proxyTarget(c.in)
		if c.dial == "" {
			if err == nil {
				t.Errorf("proxyTarget(%q): no error, want one", c.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("proxyTarget(%q): %v", c.in, err)
			continue
		}
		if out := rewrite("127.0.0.1:9"); dial != c.dial || out != c.out {
			t.Errorf("proxyTarget(%q) = %q, %q; want %q, %q", c.in, dial, out, c.dial, c.out)
		}
	}
}
