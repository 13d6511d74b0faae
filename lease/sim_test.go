package lease_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/lease"
)

// simLease is a lease a simulated process believes it holds (or held when
// it stalled): believed is the expiry of its last successful write, in
// server time.
type simLease struct {
	l        *lease.Lease
	believed time.Time
	stalled  bool // the process stopped acting (crash or pause); it may wake up
}

// TestRandomizedContendersNeverOverlap runs several contenders over
// simulated server time, acquiring, renewing, stalling, waking up and
// releasing in random order and partly concurrently, and checks after every
// step that no two leases are unexpired by the server clock at once, that
// epochs strictly increase, that a valid lease is never refused, and that a
// free name is never refused to everyone.
func TestRandomizedContendersNeverOverlap(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	steps := 400
	if testing.Short() || raceEnabled {
		seeds, steps = seeds[:3], 250
	}
	var total simStats
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			total.add(simulate(t, seed, steps))
		})
	}
	// The random walk must actually have visited the interesting cases.
	t.Logf("%+v", total)
	for what, n := range map[string]int{
		"takeovers of a lapsed lease": total.takeovers, "acquisitions after a release": total.afterRelease,
		"refused acquisitions": total.refused, "renewals": total.renewed, "renewals that found the lease lost": total.lost,
		"stalled holders that woke up in time": total.wokeHeld, "stalled holders that woke up deposed": total.wokeLost,
		"late releases by deposed holders": total.lateReleases, "steps with concurrent acquisitions": total.contested,
	} {
		if n == 0 {
			t.Errorf("the simulation never saw %s", what)
		}
	}
}

type simStats struct {
	takeovers, afterRelease, refused, renewed, lost, wokeHeld, wokeLost, lateReleases, contested int
}

func (s *simStats) add(o simStats) {
	s.takeovers += o.takeovers
	s.afterRelease += o.afterRelease
	s.refused += o.refused
	s.renewed += o.renewed
	s.lost += o.lost
	s.wokeHeld += o.wokeHeld
	s.wokeLost += o.wokeLost
	s.lateReleases += o.lateReleases
	s.contested += o.contested
}

func simulate(t *testing.T, seed uint64, steps int) (st simStats) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	const ttl = 10 * time.Second
	holders := []string{"p0:1:a", "p1:2:b", "p2:3:c", "p3:4:d", "p0:1:a"} // two jobs of one process share a holder
	ms := make([]*lease.Manager, len(holders))
	for i, h := range holders {
		ms[i] = e.manager(h, lease.Options{TTL: ttl})
	}
	leases := make([]*simLease, len(holders)) // nil: the contender holds nothing
	var zombies []*simLease                   // leases whose process forgot them (crashed)
	var maxEpoch int64
	released := true // the name is free because its last lease was released (or never taken)
	ctx := ctxT(t)

	type outcome struct {
		i      int
		op     string
		l      *lease.Lease
		err    error
		before time.Time // server time just before the call
	}
	for step := range steps {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
		}
		// Mostly small steps of server time, sometimes more than a lease.
		switch r := rng.IntN(10); {
		case r < 3:
			e.srv.AdvanceClock(time.Duration(rng.Int64N(int64(ttl * 3 / 10))))
		case r < 4:
			e.srv.AdvanceClock(ttl/2 + time.Duration(rng.Int64N(int64(ttl))))
		}
		// Decide this step's actions: a random subset of contenders, concurrently.
		type action struct {
			i  int
			op string
		}
		var acts []action
		for i := range holders {
			if rng.IntN(2) == 0 {
				continue
			}
			sl := leases[i]
			var op string
			switch {
			case sl == nil:
				op = "acquire"
			case sl.stalled:
				op = []string{"sleep", "sleep", "wake", "crash"}[rng.IntN(4)]
			default:
				op = []string{"confirm", "confirm", "confirm", "release", "stall", "crash"}[rng.IntN(6)]
			}
			acts = append(acts, action{i, op})
		}
		validBefore := 0
		nowBefore := e.srv.Now()
		for _, sl := range append(append([]*simLease{}, leases...), zombies...) {
			if sl != nil && sl.believed.After(nowBefore) {
				validBefore++
			}
		}

		acquirers := 0
		for _, a := range acts {
			if a.op == "acquire" {
				acquirers++
			}
		}
		if acquirers > 1 {
			st.contested++
		}
		results := make([]outcome, len(acts))
		var wg sync.WaitGroup
		for k, a := range acts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := outcome{i: a.i, op: a.op, before: e.srv.Now()}
				switch a.op {
				case "acquire":
					o.l, o.err = ms[a.i].Acquire(ctx, "job")
				case "confirm", "wake":
					o.err = leases[a.i].l.Confirm(ctx)
				case "release":
					o.err = leases[a.i].l.Release(ctx)
				}
				results[k] = o
			}()
		}
		wg.Wait()

		// Apply the outcomes to the model.
		var epochs []int64
		acquired, refused := 0, 0
		for _, o := range results {
			sl := leases[o.i]
			switch o.op {
			case "acquire":
				switch {
				case o.err == nil:
					acquired++
					if released {
						st.afterRelease++
					} else {
						st.takeovers++
					}
					released = false
					epochs = append(epochs, o.l.Epoch())
					leases[o.i] = &simLease{l: o.l, believed: o.l.ExpiresAt()}
				case errors.Is(o.err, errs.ErrRunning):
					refused++
					st.refused++
				default:
					fail("acquire: %v", o.err)
				}
			case "confirm", "wake":
				switch {
				case o.err == nil:
					sl.believed, sl.stalled = sl.l.ExpiresAt(), false
					st.renewed++
					if o.op == "wake" {
						st.wokeHeld++
					}
				case errors.Is(o.err, errs.ErrLeaseLost):
					// Lost is only right if the lease had lapsed by the server clock
					// (margin: real time passing during the call).
					if sl.believed.After(o.before.Add(time.Second)) {
						fail("%s: a lease valid until %s lost at %s: %v", o.op, sl.believed, o.before, o.err)
					}
					leases[o.i] = nil
					st.lost++
					if o.op == "wake" {
						st.wokeLost++
					}
				default:
					fail("%s: %v", o.op, o.err)
				}
			case "release":
				if o.err != nil {
					fail("release: %v", o.err)
				}
				if sl.believed.After(o.before) {
					released = true // it was the valid lease: the name is free now
				}
				leases[o.i] = nil
			case "stall":
				sl.stalled = true
			case "crash":
				zombies = append(zombies, sl)
				leases[o.i] = nil
			}
		}
		// Stalled leases that are not coming back: the process may still release late.
		if len(zombies) > 0 && rng.IntN(4) == 0 {
			z := zombies[0]
			zombies = zombies[1:]
			if z.believed.After(e.srv.Now()) {
				released = true
			}
			if err := z.l.Release(ctx); err != nil {
				fail("late release: %v", err)
			}
			st.lateReleases++
		}

		// Epochs strictly increase and at most one acquisition wins a step.
		sort.Slice(epochs, func(a, b int) bool { return epochs[a] < epochs[b] })
		for _, ep := range epochs {
			if ep <= maxEpoch {
				fail("epoch %d after %d", ep, maxEpoch)
			}
			maxEpoch = ep
		}
		if acquired > 1 {
			fail("%d acquisitions won in one step", acquired)
		}
		// A free name is never refused to everyone.
		if validBefore == 0 && refused > 0 && acquired == 0 {
			fail("no lease was valid at %s, yet %d acquisitions were refused and none won", nowBefore, refused)
		}

		// Never two holders of unexpired leases, and the document agrees.
		now := e.srv.Now()
		var valid []*simLease
		for _, sl := range append(append([]*simLease{}, leases...), zombies...) {
			if sl != nil && sl.believed.After(now) {
				valid = append(valid, sl)
			}
		}
		if len(valid) > 1 {
			fail("%d leases unexpired at %s: %v and %v", len(valid), now, valid[0].l, valid[1].l)
		}
		if len(valid) == 1 {
			d := e.doc("job")
			if d["holder"] != valid[0].l.Holder() || d["epoch"] != valid[0].l.Epoch() || d["nonce"] != lease.Nonce(valid[0].l) {
				fail("document %v does not belong to the valid %v", d["holder"], valid[0].l)
			}
		}
	}
	t.Logf("seed %d: %d steps, last epoch %d, %+v", seed, steps, maxEpoch, st)
	return st
}
