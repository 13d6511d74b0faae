package mongoerr_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/mongoerr"
	"github.com/meilistream/meilistream/internal/mongotest"
)

// A server refusing the URI's credentials is told apart from one that
// cannot be reached, from the driver's error values (not their text): the
// first needs a fixed configuration, the second waiting.
func TestAuthFailed(t *testing.T) {
	ms, err := mongotest.Start(mongotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ping := func(uri string) error {
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(context.Background())
		return c.Ping(ctx, nil)
	}
	// mongotest refuses every authentication (it has no users).
	withUser := strings.Replace(ms.URI(), "mongodb://", "mongodb://someone:wrong@", 1)
	if err := ping(withUser); err == nil || !mongoerr.AuthFailed(err) {
		t.Errorf("refused credentials: AuthFailed(%v) = false", err)
	}
	if err := ping("mongodb://127.0.0.1:1/?directConnection=true&connectTimeoutMS=200"); err == nil || mongoerr.AuthFailed(err) {
		t.Errorf("unreachable server: AuthFailed(%v) = true", err)
	}
	if mongoerr.AuthFailed(errors.New("auth error: (AuthenticationFailed) in a message")) {
		t.Error("a message's text made AuthFailed true")
	}
}
