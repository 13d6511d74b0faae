package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/lease"
)

func TestOptionsAreValidated(t *testing.T) {
	// Connect does not dial, so a collection on a closed port is enough here.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?directConnection=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	coll := client.Database("d").Collection("c")
	for _, tc := range []struct {
		name   string
		opts   lease.Options
		holder string
		want   string // substring of the error; "" means valid
	}{
		{"zero options take the defaults", lease.Options{}, "h", ""},
		{"a short TTL with its own cap is valid", lease.Options{TTL: 3 * time.Second, WaitBase: 10 * time.Millisecond, WaitCap: time.Second}, "h", ""},
		{"a negative TTL is refused", lease.Options{TTL: -time.Second}, "h", "TTL -1s"},
		{"a TTL under a second is refused", lease.Options{TTL: time.Millisecond}, "h", "TTL 1ms"},
		{"a TTL over an hour is refused", lease.Options{TTL: 2 * time.Hour}, "h", "TTL 2h0m0s"},
		{"a cap above TTL/3 is refused", lease.Options{TTL: 30 * time.Second, WaitCap: 11 * time.Second}, "h", "WaitCap 11s"},
		{"a negative cap is refused", lease.Options{WaitCap: -time.Second}, "h", "WaitCap -1s"},
		{"a base above the cap is refused", lease.Options{WaitBase: 2 * time.Second, WaitCap: time.Second}, "h", "WaitBase 2s"},
		{"a negative base is refused", lease.Options{WaitBase: -time.Millisecond}, "h", "WaitBase -1ms"},
		{"an empty holder is refused", lease.Options{}, " ", "empty holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := lease.New(coll, tc.holder, tc.opts)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if m.TTL() <= 0 {
					t.Fatalf("TTL() = %s", m.TTL())
				}
				return
			}
			if !errors.Is(err, errs.ErrConfigInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: got %v, want CONFIG_INVALID mentioning %q", err, tc.want)
			}
		})
	}
	t.Run("every problem is named at once", func(t *testing.T) {
		_, err := lease.New(nil, "", lease.Options{TTL: -1, WaitBase: -1})
		for _, want := range []string{"no state collection", "empty holder", "TTL", "WaitBase"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("New: got %v, want it to mention %q", err, want)
			}
		}
	})
	t.Run("defaults are 30s with a cap of TTL/3", func(t *testing.T) {
		m, err := lease.New(coll, "h", lease.Options{})
		if err != nil || m.TTL() != 30*time.Second {
			t.Fatalf("New: %v, TTL %v", err, m.TTL())
		}
	})
}

func TestHolderIsHostPidRandomAndStable(t *testing.T) {
	h := lease.Holder()
	parts := strings.Split(h, ":")
	if len(parts) != 3 || parts[1] != strconv.Itoa(os.Getpid()) || len(parts[2]) < 8 {
		t.Fatalf("Holder() = %q, want host:pid:random", h)
	}
	if host, _ := os.Hostname(); host != "" && parts[0] != host {
		t.Fatalf("Holder() = %q, want host %q", h, host)
	}
	if h2 := lease.Holder(); h2 != h {
		t.Fatalf("Holder() changed within one process: %q then %q", h, h2)
	}
}

func TestAcquireByConcurrentContendersHasExactlyOneWinner(t *testing.T) {
	forEachForm(t, testAcquireByConcurrentContendersHasExactlyOneWinner)
}

func testAcquireByConcurrentContendersHasExactlyOneWinner(t *testing.T, e *env) {
	const contenders, rounds = 20, 25
	for _, sameHolder := range []bool{false, true} {
		t.Run(fmt.Sprintf("same holder %v", sameHolder), func(t *testing.T) {
			ms := make([]*lease.Manager, contenders)
			for i := range ms {
				h := fmt.Sprintf("pod-%d:1:r", i)
				if sameHolder {
					h = "one-process:1:r"
				}
				ms[i] = e.manager(h, lease.Options{})
			}
			var prevEpoch int64
			for round := range rounds {
				name := "job"
				if round%2 == 1 {
					name = fmt.Sprintf("fresh-%v-%d", sameHolder, round) // a missing document: the upsert race
				}
				var (
					wg       sync.WaitGroup
					mu       sync.Mutex
					winners  []*lease.Lease
					held     []error
					failures []error
				)
				start := make(chan struct{})
				for _, m := range ms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						l, err := m.Acquire(ctxT(t), name)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							winners = append(winners, l)
						case errors.Is(err, errs.ErrRunning):
							held = append(held, err)
						default:
							failures = append(failures, err)
						}
					}()
				}
				close(start)
				wg.Wait()
				if len(failures) > 0 || len(winners) != 1 || len(held) != contenders-1 {
					t.Fatalf("round %d: %d winners, %d RUNNING, failures %v", round, len(winners), len(held), failures)
				}
				w := winners[0]
				for _, err := range held {
					if !strings.Contains(err.Error(), w.Holder()) || !strings.Contains(err.Error(), "server time") {
						t.Fatalf("round %d: RUNNING error %q does not name holder %s and until when", round, err, w.Holder())
					}
					if strings.Contains(err.Error(), lease.Nonce(w)) {
						t.Fatalf("RUNNING error reveals the nonce: %q", err)
					}
				}
				if name == "job" {
					if w.Epoch() <= prevEpoch {
						t.Fatalf("round %d: epoch %d after %d", round, w.Epoch(), prevEpoch)
					}
					prevEpoch = w.Epoch()
				}
				if err := w.Release(ctxT(t)); err != nil {
					t.Fatalf("Release: %v", err)
				}
			}
		})
	}
}

func TestCrashedHolderKeepsNameUntilServerExpiry(t *testing.T) {
	forEachForm(t, testCrashedHolderKeepsNameUntilServerExpiry)
}

func testCrashedHolderKeepsNameUntilServerExpiry(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	b := e.manager("b:2:y", lease.Options{})
	la := e.acquire(a, "job") // a then "crashes": no Keep, no Release

	d := e.doc("job")
	for _, f := range []string{"holder", "nonce", "epoch", "acquiredAt", "expiresAt", "ttlMs"} {
		if _, ok := d[f]; !ok {
			t.Errorf("lease document lacks %s: %v", f, d)
		}
	}
	if d["holder"] != "a:1:x" || d["ttlMs"] != int64(30000) {
		t.Errorf("lease document = %v", d)
	}
	if got := la.ExpiresAt().Sub(la.AcquiredAt()); got != 30*time.Second {
		t.Errorf("expiresAt - acquiredAt = %s, want the TTL", got)
	}

	// Just before expiry by the server clock the name is still a's.
	if gap := la.ExpiresAt().Sub(e.srv.Now()); gap > time.Second {
		e.srv.AdvanceClock(gap - time.Second)
	}
	_, err := b.Acquire(ctxT(t), "job")
	if !errors.Is(err, errs.ErrRunning) || !strings.Contains(err.Error(), "a:1:x") ||
		!strings.Contains(err.Error(), la.ExpiresAt().UTC().Format(time.RFC3339Nano)) {
		t.Fatalf("Acquire before expiry: %v, want RUNNING naming a:1:x until %s", err, la.ExpiresAt())
	}
	var e2 *errs.Error
	if !errors.As(err, &e2) || e2.Job != "job" {
		t.Fatalf("RUNNING error %#v does not carry the job", err)
	}

	// Right after it, b takes it over with the next epoch.
	e.advancePast(la.ExpiresAt())
	lb := e.acquire(b, "job")
	if lb.Epoch() != la.Epoch()+1 {
		t.Fatalf("epoch after takeover = %d, want %d", lb.Epoch(), la.Epoch()+1)
	}
	if !lb.AcquiredAt().After(la.ExpiresAt()) && !lb.AcquiredAt().Equal(la.ExpiresAt()) {
		t.Fatalf("taken at %s, before the old expiry %s", lb.AcquiredAt(), la.ExpiresAt())
	}
}

func TestTakenOverHolderLearnsAtNextRenewal(t *testing.T) {
	forEachForm(t, testTakenOverHolderLearnsAtNextRenewal)
}

func testTakenOverHolderLearnsAtNextRenewal(t *testing.T, e *env) {
	opts := lease.Options{TTL: time.Second} // renew every 333ms of real time
	a := e.manager("a:1:x", opts)
	b := e.manager("b:2:y", lease.Options{}) // a long lease: the test must not outlive it
	la := e.acquire(a, "job")
	work, stop := la.Keep(context.Background())
	defer stop()

	// A pause longer than the lease (as the server sees it): b takes over.
	e.advancePast(la.ExpiresAt().Add(time.Second))
	lb := e.acquire(b, "job")

	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the work context was not cancelled after a takeover")
	}
	cause := context.Cause(work)
	if !errors.Is(cause, errs.ErrLeaseLost) {
		t.Fatalf("cause = %v, want LEASE_LOST", cause)
	}
	if strings.Contains(cause.Error(), lease.Nonce(la)) || strings.Contains(cause.Error(), lease.Nonce(lb)) {
		t.Fatalf("cause reveals a nonce: %v", cause)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("Lost() not closed")
	}
	if c := context.Cause(la.Context()); c != la.Err() || !errors.Is(c, errs.ErrLeaseLost) {
		t.Fatalf("the lease's context ended with %v, want its Err %v", c, la.Err())
	}
	if err := la.Confirm(ctxT(t)); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("Confirm of a lost lease: %v", err)
	}

	// Its release does not touch the new holder's lease.
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("Release after loss: %v", err)
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if d := e.doc("job"); d["holder"] != "b:2:y" || d["epoch"] != lb.Epoch() {
		t.Fatalf("after the old holder's release the document is %v", d)
	}
	if err := lb.Confirm(ctxT(t)); err != nil {
		t.Fatalf("new holder's Confirm: %v", err)
	}
}

func TestEpochsStrictlyIncreaseAcrossTakeoversAndReleases(t *testing.T) {
	forEachForm(t, testEpochsStrictlyIncreaseAcrossTakeoversAndReleases)
}

func testEpochsStrictlyIncreaseAcrossTakeoversAndReleases(t *testing.T, e *env) {
	ms := []*lease.Manager{e.manager("a:1:x", lease.Options{}), e.manager("b:2:y", lease.Options{}), e.manager("c:3:z", lease.Options{})}
	var last int64
	for i := range 12 {
		l := e.acquire(ms[i%3], "job")
		if l.Epoch() <= last {
			t.Fatalf("acquisition %d: epoch %d after %d", i, l.Epoch(), last)
		}
		last = l.Epoch()
		if i%2 == 0 {
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		} else {
			e.advancePast(l.ExpiresAt()) // crash and expire
		}
	}
}

func TestReleaseFreesOnlyItsOwnLeaseAndAtOnce(t *testing.T) {
	forEachForm(t, testReleaseFreesOnlyItsOwnLeaseAndAtOnce)
}

func testReleaseFreesOnlyItsOwnLeaseAndAtOnce(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	b := e.manager("b:2:y", lease.Options{})
	var never *lease.Lease
	if err := never.Release(ctxT(t)); err != nil {
		t.Fatalf("Release of a never-acquired lease: %v", err)
	}

	la := e.acquire(a, "job")
	if la.Context().Err() != nil {
		t.Fatal("the context of a held lease is cancelled")
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("Lost() not closed by Release")
	}
	if c := context.Cause(la.Context()); !errors.Is(c, errs.ErrLeaseLost) {
		t.Fatalf("the released lease's context ended with %v, want LEASE_LOST", c)
	}
	// Released means free now, not at the old expiry.
	lb := e.acquire(b, "job")
	if lb.Epoch() != la.Epoch()+1 {
		t.Fatalf("epoch %d after release of %d", lb.Epoch(), la.Epoch())
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("Release twice: %v", err)
	}
	if err := la.Confirm(ctxT(t)); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("Confirm after Release: %v, want LEASE_LOST", err)
	}
	if d := e.doc("job"); d["holder"] != "b:2:y" {
		t.Fatalf("document after the old holder's second release: %v", d)
	}
	// The same process acquiring again while it holds is RUNNING too.
	if _, err := b.Acquire(ctxT(t), "job"); !errors.Is(err, errs.ErrRunning) {
		t.Fatalf("re-acquire by the holder itself: %v", err)
	}
}

func TestConfirmRenewsByServerClock(t *testing.T) { forEachForm(t, testConfirmRenewsByServerClock) }

func testConfirmRenewsByServerClock(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	la := e.acquire(a, "job")
	first := la.ExpiresAt()
	e.srv.AdvanceClock(20 * time.Second)
	if err := la.Confirm(ctxT(t)); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if got := la.ExpiresAt().Sub(first); got < 20*time.Second {
		t.Fatalf("Confirm moved expiry by %s, want at least the clock advance", got)
	}
	// 25s later by the server clock it would have lapsed without that renewal.
	e.srv.AdvanceClock(25 * time.Second)
	if err := la.Confirm(ctxT(t)); err != nil {
		t.Fatalf("Confirm within the renewed lease: %v", err)
	}
	// A lease that lapsed is not renewed even when nobody took it.
	e.advancePast(la.ExpiresAt())
	err := la.Confirm(ctxT(t))
	if !errors.Is(err, errs.ErrLeaseLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Confirm after expiry: %v, want LEASE_LOST saying it expired", err)
	}
}

func TestKeepRenewsAndStops(t *testing.T) { forEachForm(t, testKeepRenewsAndStops) }

func testKeepRenewsAndStops(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{TTL: time.Second})
	la := e.acquire(a, "job")
	work, stop := la.Keep(context.Background())
	first := la.ExpiresAt()
	waitFor(t, 3*time.Second, "two renewals", func() (bool, string) {
		return la.ExpiresAt().Sub(first) >= 600*time.Millisecond, la.ExpiresAt().String()
	})
	stop()
	stop() // idempotent
	if !errors.Is(context.Cause(work), context.Canceled) {
		t.Fatalf("cause after stop = %v, want context.Canceled", context.Cause(work))
	}
	select {
	case <-la.Lost():
		t.Fatal("stop lost the lease")
	default:
	}
	if err := la.Confirm(ctxT(t)); err != nil {
		t.Fatalf("Confirm after stop: %v", err)
	}

	// Release cancels a running Keep with LEASE_LOST.
	work2, stop2 := la.Keep(context.Background())
	defer stop2()
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	<-work2.Done()
	if !errors.Is(context.Cause(work2), errs.ErrLeaseLost) {
		t.Fatalf("cause after Release = %v", context.Cause(work2))
	}
	// Keep on an ended lease returns a cancelled context at once.
	work3, stop3 := la.Keep(context.Background())
	defer stop3()
	select {
	case <-work3.Done():
	case <-time.After(time.Second):
		t.Fatal("Keep of a released lease is not cancelled")
	}
}

func TestKeepSurvivesTransientFailures(t *testing.T) {
	forEachForm(t, testKeepSurvivesTransientFailures)
}

func testKeepSurvivesTransientFailures(t *testing.T, e *env) {
	// 3s: after dropped connections the driver needs about a second to
	// find the server again (its monitor's next check), and the holder
	// gives up after 3/4 of the TTL.
	a := e.manager("a:1:x", lease.Options{TTL: 3 * time.Second})
	la := e.acquire(a, "job")
	work, stop := la.Keep(context.Background())
	defer stop()

	// Two failed renewals in a row: retried before the give-up deadline.
	e.srv.FailCommand(bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: bson.D{{Key: "times", Value: int32(2)}}},
		{Key: "data", Value: bson.D{
			{Key: "failCommands", Value: bson.A{"findAndModify"}},
			{Key: "errorCode", Value: int32(2)},
		}},
	})
	before := la.ExpiresAt()
	waitFor(t, 6*time.Second, "a renewal after two failures", func() (bool, string) {
		return la.ExpiresAt().After(before.Add(500 * time.Millisecond)), la.ExpiresAt().String()
	})
	// Dropped connections: the driver retries the write, or we do.
	e.srv.DropConnections()
	before = la.ExpiresAt()
	waitFor(t, 6*time.Second, "a renewal after dropped connections", func() (bool, string) {
		return la.ExpiresAt().After(before.Add(500 * time.Millisecond)), la.ExpiresAt().String()
	})
	if work.Err() != nil {
		t.Fatalf("work cancelled by transient failures: %v", context.Cause(work))
	}
}

func TestHolderThatCannotRenewGivesUpBeforeServerExpiry(t *testing.T) {
	forEachForm(t, testHolderThatCannotRenewGivesUpBeforeServerExpiry)
}

func testHolderThatCannotRenewGivesUpBeforeServerExpiry(t *testing.T, e *env) {
	// The server clock at the moment the holder gives up, taken as it logs
	// the loss (checking after the fact would add the test's own latency).
	var (
		mu       sync.Mutex
		gaveUpAt time.Time
	)
	logger := hclog.New(&hclog.LoggerOptions{Output: writerFunc(func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		if gaveUpAt.IsZero() && strings.Contains(string(p), "lease lost") {
			gaveUpAt = e.srv.Now()
		}
	})})
	// 3s: the 750ms margin absorbs a loaded machine's late timers.
	a := e.manager("a:1:x", lease.Options{TTL: 3 * time.Second, Logger: logger})
	la := e.acquire(a, "job")
	e.srv.FailCommand(bson.D{
		{Key: "configureFailPoint", Value: "failCommand"},
		{Key: "mode", Value: "alwaysOn"},
		{Key: "data", Value: bson.D{
			{Key: "failCommands", Value: bson.A{"findAndModify"}},
			{Key: "errorCode", Value: int32(2)},
		}},
	})
	defer e.srv.FailCommand(bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: "off"}})
	work, stop := la.Keep(context.Background())
	defer stop()
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a holder that cannot renew kept running")
	}
	// The server would still call it held: the holder stopped first. (The
	// loss is logged just after the context is cancelled.)
	waitFor(t, time.Second, "the loss is logged", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return !gaveUpAt.IsZero(), "nothing"
	})
	mu.Lock()
	defer mu.Unlock()
	if !gaveUpAt.Before(la.ExpiresAt()) {
		t.Fatalf("gave up at server time %s, not before the expiry %s", gaveUpAt, la.ExpiresAt())
	}
	if cause := context.Cause(work); !errors.Is(cause, errs.ErrLeaseLost) || !strings.Contains(cause.Error(), "no renewal succeeded") {
		t.Fatalf("cause = %v", cause)
	}
}

func TestStandbyTakesOverWithinOneRenewalPeriod(t *testing.T) {
	forEachForm(t, testStandbyTakesOverWithinOneRenewalPeriod)
}

func testStandbyTakesOverWithinOneRenewalPeriod(t *testing.T, e *env) {
	var logs logBuf
	// The standby polls every 0.75-1s (cap = TTL/3), so right after it
	// logged it is asleep long enough for a holder change to happen in
	// between two of its polls.
	opts := lease.Options{TTL: 3 * time.Second, WaitBase: time.Second}
	a := e.manager("a:1:x", opts)
	c := e.manager("c:3:z", opts)
	bOpts := opts
	bOpts.Logger = logs.logger()
	b := e.manager("b:2:y", bOpts)
	la := e.acquire(a, "job")
	const standing = "lease held by another process; standing by"

	type result struct {
		l   *lease.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Wait(ctxT(t), "job")
		got <- result{l, err}
	}()
	waitFor(t, 5*time.Second, "standby logs the holder", func() (bool, string) {
		return len(logs.messages(standing)) == 1, logs.String()
	})

	// a crashes; its lease lapses by the server clock; c takes it at once.
	e.advancePast(la.ExpiresAt())
	lc := e.acquire(c, "job")
	waitFor(t, 3*time.Second, "standby logs the new holder", func() (bool, string) {
		return len(logs.messages(standing)) == 2, logs.String()
	})
	// Some more polls of an unchanged holder log nothing more.
	time.Sleep(2200 * time.Millisecond)
	held := logs.messages(standing)
	if len(held) != 2 || held[0]["holder"] != "a:1:x" || held[1]["holder"] != "c:3:z" {
		t.Fatalf("standby logged %d times, want once for a:1:x then once for c:3:z:\n%s", len(held), logs.String())
	}
	if strings.Contains(logs.String(), lease.Nonce(la)) || strings.Contains(logs.String(), lease.Nonce(lc)) {
		t.Fatal("the log reveals a nonce")
	}

	// c crashes too; from its expiry the standby needs at most one renewal period.
	e.advancePast(lc.ExpiresAt())
	expired := time.Now()
	var r result
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("standby did not take over")
	}
	if r.err != nil {
		t.Fatalf("Wait: %v", r.err)
	}
	// It polls at most every TTL/3 (TestAStandbyPollsAtMostEveryThirdOfTheTTL
	// pins that without a clock): here it is enough that it took over at
	// a poll, before a whole TTL passed, however slow the machine.
	if took := time.Since(expired); took >= 3*time.Second {
		t.Fatalf("standby took %s after expiry, want less than the TTL (3s): at its next poll", took)
	}
	if r.l.Epoch() != lc.Epoch()+1 {
		t.Fatalf("standby epoch %d, want %d", r.l.Epoch(), lc.Epoch()+1)
	}
	if len(logs.messages("lease acquired after standby")) != 1 {
		t.Fatalf("no acquisition logged:\n%s", logs.String())
	}
}

func TestWaitEndsWithItsContext(t *testing.T) { forEachForm(t, testWaitEndsWithItsContext) }

func testWaitEndsWithItsContext(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	b := e.manager("b:2:y", lease.Options{WaitBase: 10 * time.Millisecond})
	e.acquire(a, "job")
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("shutting down")
	time.AfterFunc(100*time.Millisecond, func() { cancel(why) })
	l, err := b.Wait(ctx, "job")
	if l != nil || !errors.Is(err, why) {
		t.Fatalf("Wait = %v, %v; want the context's cause", l, err)
	}
}

func TestProcessClockSkewChangesNothing(t *testing.T) {
	forEachForm(t, testProcessClockSkewChangesNothing)
}

func testProcessClockSkewChangesNothing(t *testing.T, e *env) {
	opts := lease.Options{TTL: time.Second}
	a := e.manager("a:1:x", opts)
	b := e.manager("b:2:y", lease.Options{})                                       // no Keep: a long lease so a slow test cannot outlive it
	lease.SetClock(a, func() time.Time { return time.Now().Add(time.Hour) })       // an hour ahead
	lease.SetClock(b, func() time.Time { return time.Now().Add(-26 * time.Hour) }) // a day behind

	la := e.acquire(a, "job")
	work, stop := la.Keep(context.Background())
	defer stop()
	if _, err := b.Acquire(ctxT(t), "job"); !errors.Is(err, errs.ErrRunning) {
		t.Fatalf("b (clock behind) while a holds: %v", err)
	}
	first := la.ExpiresAt()
	waitFor(t, 3*time.Second, "a renews with its clock an hour ahead", func() (bool, string) {
		return la.ExpiresAt().Sub(first) >= 600*time.Millisecond, la.ExpiresAt().String()
	})
	if work.Err() != nil {
		t.Fatalf("a's work cancelled: %v", context.Cause(work))
	}
	stop()
	e.advancePast(la.ExpiresAt())
	lb := e.acquire(b, "job")
	if err := la.Confirm(ctxT(t)); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("a (clock ahead) after b took over: %v", err)
	}
	if err := lb.Confirm(ctxT(t)); err != nil {
		t.Fatalf("b (clock behind) Confirm: %v", err)
	}
}

func TestListShowsLeasesWithoutNonce(t *testing.T) { forEachForm(t, testListShowsLeasesWithoutNonce) }

func testListShowsLeasesWithoutNonce(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	held := e.acquire(a, "held")
	old := e.acquire(a, "lapsed")
	freed := e.acquire(a, "released")
	if err := freed.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.srv.AdvanceClock(10 * time.Second)
	if err := held.Confirm(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.advancePast(old.ExpiresAt())
	// Not a lease: another document in the state collection.
	if _, err := e.coll.InsertOne(ctxT(t), bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: "held"}}}}); err != nil {
		t.Fatal(err)
	}
	infos, err := a.List(ctxT(t))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for name, want := range map[string]string{"held": "a:1:x", "lapsed": "", "released": "", "never": ""} {
		if got, err := a.HeldBy(ctxT(t), name); err != nil || got != want {
			t.Errorf("HeldBy(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	if len(infos) != 3 {
		t.Fatalf("List = %+v, want 3 leases", infos)
	}
	want := []struct {
		name, holder string
		expired      bool
	}{{"held", "a:1:x", false}, {"lapsed", "a:1:x", true}, {"released", "", true}}
	for i, w := range want {
		in := infos[i]
		if in.Name != w.name || in.Holder != w.holder || in.Expired != w.expired || in.Epoch != 1 {
			t.Errorf("List[%d] = %+v, want %+v", i, in, w)
		}
	}
	if !infos[0].ExpiresAt.Equal(held.ExpiresAt()) || !infos[0].AcquiredAt.Equal(held.AcquiredAt()) {
		t.Errorf("List[0] times %v/%v, want %v/%v", infos[0].AcquiredAt, infos[0].ExpiresAt, held.AcquiredAt(), held.ExpiresAt())
	}
	for _, l := range []*lease.Lease{held, old, freed} {
		for _, s := range []string{fmt.Sprintf("%+v", infos), fmt.Sprintf("%v", l), fmt.Sprintf("%+v", l), fmt.Sprintf("%#v", l)} {
			if strings.Contains(s, lease.Nonce(l)) {
				t.Fatalf("the nonce leaks: %s", s)
			}
		}
	}
}

func TestFencedWritesRefuseADeposedHolder(t *testing.T) {
	forEachForm(t, testFencedWritesRefuseADeposedHolder)
}

func testFencedWritesRefuseADeposedHolder(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{})
	b := e.manager("b:2:y", lease.Options{})
	pos := bson.D{{Key: "_id", Value: bson.D{{Key: "position", Value: "job"}}}}
	write := func(l *lease.Lease, token string) error {
		filter := append(append(bson.D{}, pos...), l.Fence()...)
		update := bson.D{{Key: "$set", Value: bson.D{{Key: "token", Value: token}, l.Stamp()}}}
		_, err := e.coll.UpdateOne(ctxT(t), filter, update, options.UpdateOne().SetUpsert(true))
		return l.Fenced(err)
	}
	la := e.acquire(a, "job")
	if err := write(la, "a1"); err != nil { // the document is created
		t.Fatalf("first write: %v", err)
	}
	if err := write(la, "a2"); err != nil {
		t.Fatalf("second write: %v", err)
	}
	e.advancePast(la.ExpiresAt()) // a stalls
	lb := e.acquire(b, "job")
	if err := write(lb, "b1"); err != nil { // b stamps the document first
		t.Fatalf("new holder's write: %v", err)
	}
	err := write(la, "a3") // a wakes up
	if !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("deposed holder's write: %v, want LEASE_LOST", err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("a fenced write did not mark the lease lost")
	}
	var got bson.M
	if err := e.coll.FindOne(ctxT(t), pos).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["token"] != "b1" || got[lease.FenceField] != lb.Epoch() {
		t.Fatalf("position = %v", got)
	}
}

func TestDuplicateKeyOnAcquireIsRetriedThenHeld(t *testing.T) {
	// mongod retries an equality-only upsert's insert race itself, so a
	// duplicate key should not reach us; if one does (another server, a
	// proxy), it means someone else's insert won.
	e := newEnv(t)
	a := e.manager("a:1:x", lease.Options{})
	dupKey := func(times int32) {
		e.srv.FailCommand(bson.D{
			{Key: "configureFailPoint", Value: "failCommand"},
			{Key: "mode", Value: bson.D{{Key: "times", Value: times}}},
			{Key: "data", Value: bson.D{
				{Key: "failCommands", Value: bson.A{"findAndModify"}},
				{Key: "errorCode", Value: int32(11000)},
			}},
		})
	}
	dupKey(1)
	l, err := a.Acquire(ctxT(t), "job")
	if err != nil {
		t.Fatalf("Acquire after one duplicate key: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	dupKey(2)
	_, err = a.Acquire(ctxT(t), "job")
	if !errors.Is(err, errs.ErrRunning) || !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("Acquire after two duplicate keys: %v, want RUNNING wrapping the duplicate key", err)
	}
}

func TestHolderPausedPastItsDeadlineGivesUpEvenIfTheServerWouldRenew(t *testing.T) {
	forEachForm(t, testHolderPausedPastItsDeadlineGivesUpEvenIfTheServerWouldRenew)
}

func testHolderPausedPastItsDeadlineGivesUpEvenIfTheServerWouldRenew(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{TTL: time.Second})
	var pause atomic.Int64 // how far the process clock jumped: a pause of the whole process
	lease.SetClock(a, func() time.Time { return time.Now().Add(time.Duration(pause.Load())) })
	la := e.acquire(a, "job")
	work, stop := la.Keep(context.Background())
	defer stop()
	pause.Store(int64(800 * time.Millisecond)) // more than 3/4 of the TTL, less than the TTL
	select {
	case <-work.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a holder paused past its give-up deadline kept running")
	}
	if cause := context.Cause(work); !errors.Is(cause, errs.ErrLeaseLost) || !strings.Contains(cause.Error(), "paused") {
		t.Fatalf("cause = %v", cause)
	}
	if err := la.Confirm(ctxT(t)); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("Confirm after giving up: %v (a lost lease is never resurrected)", err)
	}
	// Its release frees the name for the next holder at once.
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lb := e.acquire(e.manager("b:2:y", lease.Options{}), "job")
	if lb.Epoch() != la.Epoch()+1 {
		t.Fatalf("epoch %d after %d", lb.Epoch(), la.Epoch())
	}
}

func TestTransientErrorsAreNotLosses(t *testing.T) { forEachForm(t, testTransientErrorsAreNotLosses) }

func testTransientErrorsAreNotLosses(t *testing.T, e *env) {
	failFindAndModify := func(times int32) {
		e.srv.FailCommand(bson.D{
			{Key: "configureFailPoint", Value: "failCommand"},
			{Key: "mode", Value: bson.D{{Key: "times", Value: times}}},
			{Key: "data", Value: bson.D{
				{Key: "failCommands", Value: bson.A{"findAndModify"}},
				{Key: "errorCode", Value: int32(2)},
			}},
		})
	}
	var logs logBuf
	a := e.manager("a:1:x", lease.Options{WaitBase: 5 * time.Millisecond, Logger: logs.logger()})
	t.Run("a Confirm that cannot reach the server is FAILED, and the lease stays held", func(t *testing.T) {
		la := e.acquire(a, "confirm")
		failFindAndModify(1)
		if err := la.Confirm(ctxT(t)); errs.CodeOf(err) != errs.Failed {
			t.Fatalf("Confirm during a failure: %v, want FAILED", err)
		}
		if la.Err() != nil {
			t.Fatalf("lease ended by a transient error: %v", la.Err())
		}
		if err := la.Confirm(ctxT(t)); err != nil {
			t.Fatalf("Confirm after the failure: %v", err)
		}
	})
	t.Run("Wait retries through errors and logs them once", func(t *testing.T) {
		failFindAndModify(4)
		l, err := a.Wait(ctxT(t), "wait")
		if err != nil || l == nil {
			t.Fatalf("Wait: %v", err)
		}
		if n := len(logs.messages("cannot acquire lease; retrying")); n != 1 {
			t.Fatalf("logged the same error %d times:\n%s", n, logs.String())
		}
	})
	t.Run("Acquire errors other than RUNNING are FAILED", func(t *testing.T) {
		failFindAndModify(1)
		if _, err := a.Acquire(ctxT(t), "other"); errs.CodeOf(err) != errs.Failed {
			t.Fatalf("Acquire during a failure: %v, want FAILED", err)
		}
		if _, err := a.Acquire(ctxT(t), ""); !errors.Is(err, errs.ErrConfigInvalid) {
			t.Fatalf("Acquire of an empty name: %v", err)
		}
		if _, err := a.Wait(ctxT(t), ""); !errors.Is(err, errs.ErrConfigInvalid) {
			t.Fatalf("Wait for an empty name: %v, want CONFIG_INVALID at once", err)
		}
	})
}

func TestKeepEndsWithItsParentContextAndTheLeaseStaysHeld(t *testing.T) {
	forEachForm(t, testKeepEndsWithItsParentContextAndTheLeaseStaysHeld)
}

func testKeepEndsWithItsParentContextAndTheLeaseStaysHeld(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{TTL: time.Second})
	la := e.acquire(a, "job")
	parent, cancel := context.WithCancelCause(context.Background())
	work, stop := la.Keep(parent)
	defer stop()
	why := errors.New("shutting down")
	cancel(why)
	<-work.Done()
	if !errors.Is(context.Cause(work), why) {
		t.Fatalf("cause = %v, want the parent's", context.Cause(work))
	}
	stop()
	// Shutdown still records under the lease: it is held until released.
	if err := la.Confirm(ctxT(t)); err != nil {
		t.Fatalf("Confirm after the parent ended: %v", err)
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// Held judges by the process's own clock, without waiting for Keep's
// timer: a process continued after a freeze past its give-up deadline is
// told at its first request, and the lease is lost from then on.
func TestHeldGivesUpAtTheDeadlineByTheProcessClock(t *testing.T) {
	forEachForm(t, testHeldGivesUpAtTheDeadlineByTheProcessClock)
}

func testHeldGivesUpAtTheDeadlineByTheProcessClock(t *testing.T, e *env) {
	a := e.manager("a:1:x", lease.Options{TTL: 4 * time.Second})
	var jump atomic.Int64
	lease.SetClock(a, func() time.Time { return time.Now().Add(time.Duration(jump.Load())) })
	la := e.acquire(a, "job")
	if err := la.Held(); err != nil {
		t.Fatalf("Held on a fresh lease: %v", err)
	}
	jump.Store(int64(2900 * time.Millisecond)) // less than 3/4 of the TTL
	if err := la.Held(); err != nil {
		t.Fatalf("Held before the give-up deadline: %v", err)
	}
	jump.Store(int64(3 * time.Second)) // 3/4 of the TTL: the deadline
	err := la.Held()
	if !errors.Is(err, errs.ErrLeaseLost) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("Held past the deadline: %v, want LEASE_LOST saying the process was paused", err)
	}
	select {
	case <-la.Lost():
	default:
		t.Fatal("a lease past its deadline is not marked lost")
	}
	jump.Store(0)
	if err := la.Held(); !errors.Is(err, errs.ErrLeaseLost) {
		t.Fatalf("Held after the loss: %v (a lost lease stays lost)", err)
	}
}
