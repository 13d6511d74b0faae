package engine

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/sidecar/status"
)

// Defaults of the reindex throttle (ThrottleConfig).
const (
	// DefaultReindexMaxReadLatency is the smoothed time of a chunk read
	// past which MongoDB is taken as busy: a chunk is half a page (1000
	// documents), which an idle server returns in a few milliseconds.
	DefaultReindexMaxReadLatency = 500 * time.Millisecond
	// DefaultReindexMaxTasks is the job's Meilisearch tasks enqueued and
	// not yet processed past which Meilisearch is taken as behind. A
	// reindex alone has at most a page (two chunks, a task each) read and
	// not yet durable; a followed batch is a task in each index, and the
	// pipe keeps at most MaxInFlight (4) batches unprocessed: more than 6
	// means the followed changes queue behind the chunks.
	DefaultReindexMaxTasks = 6
)

// The throttle's reasons, the label of the throttled metric.
const (
	ThrottleRate    = "rate"                // MEILISTREAM_REINDEX_RATE
	ThrottleLatency = "mongodb_latency"     // the brake: slow chunk reads
	ThrottleBacklog = "meilisearch_backlog" // the brake: tasks piling up
)

// Tuning of the brake, fixed: they shape how it moves, not where it
// stops, which the bounds decide.
const (
	// brakeCooldown is the least time between two decreases: the read
	// latency is smoothed over a few chunks and the backlog drains over
	// a few tasks, so a decrease is given time to show before the next.
	brakeCooldown = time.Second
	// brakeSteps is how many chunks without pressure bring a braked rate
	// back to where the brake began (additive increase).
	brakeSteps = 10
	// brakeFloor is the least a braked rate falls to, in documents per
	// second, and brakeDepth how far below the rate the brake began from
	// at most: the brake slows a reindex, never stops it.
	brakeFloor = 10
	brakeDepth = 32
	// latencyWeight is the weight of the newest chunk read in the
	// smoothed latency (an exponentially weighted moving average).
	latencyWeight = 0.3
	// rateHold is how many chunks in a row must go without waiting
	// before the rate is no longer said to slow them.
	rateHold = 3
	// easing starts the reason's text while a braked rate climbs back.
	easing = "easing off after "
)

// ThrottleConfig is how fast a job's reindex reads its chunks.
type ThrottleConfig struct {
	// Rate bounds the documents per second read across all pods; 0: no
	// bound. A pod reading a share of the chunks takes its part of it
	// (ShareRate).
	Rate float64
	// MaxReadLatency is the smoothed chunk read time past which the brake
	// slows the chunks down; 0: DefaultReindexMaxReadLatency, negative:
	// never.
	MaxReadLatency time.Duration
	// MaxTasks is the job's enqueued Meilisearch tasks past which the
	// brake slows the chunks down; 0: DefaultReindexMaxTasks, negative:
	// never.
	MaxTasks int
}

// ShareRate is the part of rate (documents per second across all pods)
// that one of slots claimants reading a job's chunks at once may read:
// rate / slots. The claimants do not ask each other how many are busy,
// so the sum stays at most rate however many slots are taken; with fewer
// taken it is below. 0 (no bound) stays 0.
func ShareRate(rate float64, slots int) float64 {
	if rate <= 0 || slots <= 1 {
		return max(rate, 0)
	}
	return rate / float64(slots)
}

// throttleClock is the time a Throttle paces by; tests move a fake one.
type throttleClock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends (then its cause).
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Throttle paces a reindex's chunks: a token bucket at the configured
// rate, and a brake (additive increase, multiplicative decrease) on the
// smoothed time of a chunk read from MongoDB and the job's enqueued
// Meilisearch tasks. The chunk loop calls ObserveRead after each read and
// Wait once per chunk; nothing else waits on it, so the followed changes
// are never slowed. Safe for concurrent use (several chunk readers may
// share one).
type Throttle struct {
	cfg     ThrottleConfig
	clock   throttleClock
	backlog func() (int, bool) // the job's enqueued tasks; false: not counted

	mu      sync.Mutex
	tokens  float64   // may go below 0: a chunk takes its documents, the next waits the debt out
	filled  time.Time // when tokens was last brought up to date
	latency time.Duration
	reads   int
	// The brake: limit is the braked rate (0: not braking), base the
	// rate it began from, step its additive increase.
	limit, base, step float64
	cut               time.Time // the last decrease
	seen              float64   // documents per second measured between waits (smoothed)
	last              time.Time // the last Wait
	reason, why       string    // what slows the chunks now (a Throttle* reason, its text); "" if nothing
	since             time.Time // when the current reason began
	free              int       // chunks in a row that did not wait
}

// NewThrottle returns the throttle of a reindex; backlog (may be nil)
// tells the job's enqueued Meilisearch tasks.
func NewThrottle(cfg ThrottleConfig, backlog func() (int, bool)) *Throttle {
	return newThrottle(cfg, backlog, realClock{})
}

func newThrottle(cfg ThrottleConfig, backlog func() (int, bool), clock throttleClock) *Throttle {
	if cfg.MaxReadLatency == 0 {
		cfg.MaxReadLatency = DefaultReindexMaxReadLatency
	}
	if cfg.MaxTasks == 0 {
		cfg.MaxTasks = DefaultReindexMaxTasks
	}
	if backlog == nil {
		backlog = func() (int, bool) { return 0, false }
	}
	return &Throttle{cfg: cfg, clock: clock, backlog: backlog, filled: clock.Now()}
}

// ObserveRead takes in the time a chunk read from MongoDB took.
func (t *Throttle) ObserveRead(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reads == 0 {
		t.latency = d
	} else {
		t.latency = time.Duration(latencyWeight*float64(d) + (1-latencyWeight)*float64(t.latency))
	}
	t.reads++
}

// Wait charges docs documents (the chunk just read) and waits until the
// rate allows the next chunk: at once when neither the rate nor the brake
// bounds it. It returns early with ctx's cause.
func (t *Throttle) Wait(ctx context.Context, docs int) error {
	d := t.charge(docs)
	if d <= 0 {
		return nil
	}
	return t.clock.Sleep(ctx, d)
}

// charge updates the brake and the bucket for a chunk of docs documents
// and returns how long the next chunk must wait.
func (t *Throttle) charge(docs int) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if !t.last.IsZero() && docs > 0 {
		if el := now.Sub(t.last).Seconds(); el > 0 {
			r := float64(docs) / el
			if t.seen == 0 {
				t.seen = r
			} else {
				t.seen = 0.5*r + 0.5*t.seen
			}
		}
	}
	t.brake(now, docs)
	rate := t.rateLocked()
	if rate <= 0 {
		t.tokens, t.filled = 0, now
		t.note(now, "", "")
		t.last = now
		return 0
	}
	// Refill, up to one second of the rate (or one chunk, if larger), so
	// a pause does not turn into a burst.
	burst := max(rate, float64(docs))
	t.tokens = math.Min(burst, t.tokens+now.Sub(t.filled).Seconds()*rate)
	t.filled = now
	t.tokens -= float64(docs)
	var wait time.Duration
	if t.tokens < 0 {
		wait = time.Duration(-t.tokens / rate * float64(time.Second))
	}
	if wait > 0 {
		t.free = 0
	} else {
		t.free++
	}
	switch {
	case t.limit > 0:
		// The brake's reason stands while it is on, waiting or not.
	case wait > 0 || t.reason == ThrottleRate && t.free < rateHold:
		// Reads about as slow as the rate wait now and then: the rate
		// binds until rateHold chunks in a row did not wait.
		t.note(now, ThrottleRate, fmt.Sprintf("rate %s documents/s", rateText(rate)))
	default:
		t.note(now, "", "")
	}
	// The next Wait measures from the end of this one.
	t.last = now.Add(wait)
	return wait
}

// brake moves the braked rate: halved (at most once per brakeCooldown)
// while a bound is passed, raised by a step per chunk once none is, and
// off when back where it began.
func (t *Throttle) brake(now time.Time, docs int) {
	reason, why := t.pressure()
	if reason != "" {
		if t.limit > 0 && now.Sub(t.cut) < brakeCooldown {
			t.note(now, reason, why)
			return
		}
		if t.limit == 0 {
			t.base = t.startRate(docs)
			t.limit = t.base
			t.step = t.base / brakeSteps
		}
		t.limit = max(brakeFloor, t.base/brakeDepth, t.limit/2)
		t.cut = now
		t.note(now, reason, why)
		return
	}
	if t.limit == 0 {
		return
	}
	if !strings.HasPrefix(t.why, easing) {
		t.why = easing + t.why
	}
	t.limit += t.step
	if t.limit >= t.base {
		t.limit, t.base, t.step = 0, 0, 0
	}
}

// startRate is the rate a brake begins from: the configured one, else
// the rate measured so far, else a chunk per second.
func (t *Throttle) startRate(docs int) float64 {
	r := t.cfg.Rate
	if t.seen > 0 && (r <= 0 || t.seen < r) {
		r = t.seen
	}
	if r <= 0 {
		r = float64(max(docs, brakeFloor))
	}
	return max(r, brakeFloor)
}

// pressure says which bound is passed now, and how, or "".
func (t *Throttle) pressure() (reason, why string) {
	if t.cfg.MaxReadLatency > 0 && t.reads > 0 && t.latency > t.cfg.MaxReadLatency {
		return ThrottleLatency, fmt.Sprintf("mongodb latency %s > %s", t.latency.Round(time.Millisecond), t.cfg.MaxReadLatency)
	}
	if t.cfg.MaxTasks > 0 {
		if n, counted := t.backlog(); counted && n > t.cfg.MaxTasks {
			return ThrottleBacklog, fmt.Sprintf("meilisearch backlog %d tasks > %d", n, t.cfg.MaxTasks)
		}
	}
	return "", ""
}

// rateLocked is the rate the chunks go at now: the brake's while it is
// on, else the configured one (0: no bound).
func (t *Throttle) rateLocked() float64 {
	if t.limit > 0 {
		if t.cfg.Rate > 0 {
			return math.Min(t.limit, t.cfg.Rate)
		}
		return t.limit
	}
	return t.cfg.Rate
}

func (t *Throttle) note(now time.Time, reason, why string) {
	if reason != t.reason {
		t.since = now
	}
	t.reason, t.why = reason, why
}

// ThrottleState is what slows a reindex's chunks now.
type ThrottleState struct {
	// Reason is ThrottleRate, ThrottleLatency or ThrottleBacklog; "" when
	// nothing slows the chunks.
	Reason string
	// Why says it for a person: "rate 500 documents/s",
	// "mongodb latency 850ms > 500ms", "meilisearch backlog 9 tasks > 6".
	Why string
	// Since is when Reason began.
	Since time.Time
	// Rate is the documents per second the chunks go at now (0: no bound).
	Rate float64
}

// State is what slows the chunks now.
func (t *Throttle) State() ThrottleState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ThrottleState{Reason: t.reason, Why: t.why, Since: t.since, Rate: t.rateLocked()}
}

func rateText(r float64) string {
	if r >= 10 {
		return fmt.Sprint(int64(math.Round(r)))
	}
	return fmt.Sprintf("%.1f", r)
}

// ThrottleObserver is implemented by an Observer that shows what slows a
// job's reindex: reason is a Throttle* reason, "" when nothing does (and
// when the reindex ends).
type ThrottleObserver interface {
	ObserveThrottle(job, reason string)
}

// throttle is the throttle of a reindex of the job into dst: the job's
// rate, and the brake's bounds, on the backlog dst counts.
func (jc jobConfig) throttle(dst interface {
	Enqueued() (int, int64, bool)
}) *Throttle {
	backlog := func() (int, bool) {
		n, _, counted := dst.Enqueued()
		return n, counted
	}
	return NewThrottle(ThrottleConfig{
		Rate: float64(jc.ReindexRate), MaxReadLatency: jc.ReindexMaxReadLatency, MaxTasks: jc.ReindexMaxTasks,
	}, backlog)
}

// readThrottled reads the chunk after last, telling the throttle how long
// MongoDB took.
func (s *Reindex) readThrottled(ctx context.Context, last bson.RawValue, size int) (*Chunk, error) {
	start := time.Now()
	c, err := s.readChunk(ctx, nil, last, size)
	if err == nil && s.opts.Throttle != nil {
		s.opts.Throttle.ObserveRead(time.Since(start))
	}
	return c, err
}

// pace waits, after a chunk of n documents, until the throttle lets the
// next one be read, and shows what slows the chunks (status, metrics).
func (s *Reindex) pace(ctx context.Context, n int) error {
	t := s.opts.Throttle
	if t == nil {
		return nil
	}
	// Shown before the wait: a checkpoint written meanwhile says it.
	d := t.charge(n)
	s.showThrottle(t.State())
	if d <= 0 {
		return nil
	}
	return t.clock.Sleep(ctx, d)
}

// showThrottle publishes st in the job's status and metrics when its
// reason or text changed.
func (s *Reindex) showThrottle(st ThrottleState) {
	s.thrMu.Lock()
	was := s.shown
	s.shown = st
	s.thrMu.Unlock()
	if st == was {
		return
	}
	var th *status.Throttled
	if st.Reason != "" {
		th = &status.Throttled{Reason: st.Reason, Message: st.Why, Rate: st.Rate, Since: st.Since}
	}
	// The log hears of a new reason, and of the brake easing off; not of
	// each step of the rate.
	switch eased := strings.HasPrefix(st.Why, easing); {
	case st.Reason == "" && was.Reason != "":
		s.src.Log.Info("reindex no longer throttled")
	case st.Reason != "" && (st.Reason != was.Reason || eased != strings.HasPrefix(was.Why, easing)):
		s.src.Log.Info("reindex throttled", "reason", st.Why, "rate_per_s", int64(st.Rate))
	}
	s.opts.Stats.Update(func(js *status.JobSnapshot) { js.Reindex.Throttled = th })
	if o, ok := s.opts.Observer.(ThrottleObserver); ok {
		o.ObserveThrottle(s.src.Job.Name, st.Reason)
	}
}

// throttled is what slows the chunks now, for the checkpoint: "" if
// nothing.
func (s *Reindex) throttled() string {
	s.thrMu.Lock()
	defer s.thrMu.Unlock()
	return s.shown.Why
}

// unthrottled shows the chunks no longer slowed: the reads are over.
func (s *Reindex) unthrottled() {
	if s.opts.Throttle != nil {
		s.showThrottle(ThrottleState{})
	}
}
