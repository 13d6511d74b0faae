package stream

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/budget"
)

// Feed is what a Reader started by StartFeed reads instead of a change
// stream: a goroutine's own series of events (a scan-mode job's reads of
// its collection, made to look like change events). Send hands one batch
// of events over, in order, or with no events an idle report of token;
// it blocks while readAhead bytes are handed over and not yet Taken, and
// returns the context's error once the reader is closed.
type Feed func(ctx context.Context, send func(events []bson.Raw, token bson.Raw) error) error

// StartFeed starts a Reader over feed: the follow loop takes its items as
// it takes a change stream's, and an error feed returns (not the reader's
// own close) reaches it as an Item's Err.
func StartFeed(ctx context.Context, feed Feed, readAhead int) *Reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &Reader{items: make(chan Item, 1), cancel: cancel, done: make(chan struct{}), budget: budget.New(readAhead)}
	send := func(evs []bson.Raw, tok bson.Raw) error {
		size := 0
		for _, ev := range evs {
			size += len(ev)
		}
		if err := r.budget.Acquire(rctx, size); err != nil {
			return err
		}
		it := Item{Events: evs, Token: tok, bytes: size}
		if len(evs) == 0 {
			it.Events = nil
		}
		select {
		case r.items <- it:
			return nil
		case <-rctx.Done():
			r.budget.Release(size)
			return rctx.Err()
		}
	}
	go func() {
		defer close(r.done)
		err := feed(rctx, send)
		if err != nil && rctx.Err() == nil {
			select {
			case r.items <- Item{Err: err}:
			case <-rctx.Done():
			}
		}
	}()
	return r
}
