package transform_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/transform"
)

// A call out of time on every try says so by its cause (the engine tries
// such a document again later), and a longer limit given through the
// context lets the same call finish.
func TestACallOutOfTimeIsErrTimeoutAndALongerLimitLetsItFinish(t *testing.T) {
	// The call takes a second of wall time, whatever the machine's speed:
	// twenty times its limit, so an interrupt delayed by a loaded machine
	// still lands before it ends.
	j := loadJob(t, `module.exports = { transform(doc) {
		const t0 = Date.now();
		while (Date.now() - t0 < 1000) {}
		return {done: true};
	} };`, transform.Options{Pool: 1, Timeout: 50 * time.Millisecond})
	doc := marshal(t, bson.D{{Key: "_id", Value: 1}})
	_, err := j.Apply(context.Background(), doc, transform.OpInsert, nil)
	if !errors.Is(err, transform.ErrTimeout) {
		t.Fatalf("a call over its limit: %v; want ErrTimeout", err)
	}
	res, err := j.Apply(transform.WithTimeout(context.Background(), time.Minute), doc, transform.OpInsert, nil)
	if err != nil || res.Doc["done"] != true {
		t.Fatalf("under a one-minute limit: %v, %v", res.Doc, err)
	}
}
