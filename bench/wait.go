package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/meilistream/meilistream/bench/articles"
)

// runWait is the -wait workload: a holder and a standby on the articles
// job; each of -latency writes is timed, from just before it is sent,
// until GET /wait for its operationTime returns on the holder, on the
// standby, and until the document is searchable (polled every
// millisecond), the three at once.
func runWait(ctx context.Context, c config, tmp, transforms string, coll *mongo.Collection, ms meilisearch.ServiceManager, published int) error {
	holder := &sidecar{label: "holder", bin: c.sidecar, prefix: "benchw_", state: "meilistream_w", ready: filepath.Join(tmp, "readyw0")}
	if err := launch(ctx, c, ms, holder, transforms); err != nil {
		return err
	}
	defer holder.stop()
	standby := &sidecar{label: "standby", bin: c.sidecar, prefix: holder.prefix, state: holder.state, ready: filepath.Join(tmp, "readyw1")}
	runs := []*sidecar{holder}
	fail := func(err error) error {
		var b strings.Builder
		for _, r := range runs {
			r.stop()
			fmt.Fprintf(&b, "\nsidecar %s log (tail):\n%s", r.label, tail(r.log(), 3000))
		}
		return fmt.Errorf("%w%s", err, b.String())
	}
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		return jobState(holder) == "following", nil
	}); err != nil {
		return fail(fmt.Errorf("holder start: %w", err))
	}
	holder.begin()
	if err := waitReindexed(ctx, ms, runs, published); err != nil {
		return fail(fmt.Errorf("reindex: %w", err))
	}
	// The standby shares the holder's index and state: it stands by.
	standby.uid = holder.uid
	if err := standby.start(ctx, sidecarEnv(c, standby, transforms), c.verbose); err != nil {
		return fail(err)
	}
	defer standby.stop()
	runs = append(runs, standby)
	if err := waitFor(ctx, runs, time.Minute, nil, func() (bool, error) {
		return jobState(standby) == "standby", nil
	}); err != nil {
		return fail(fmt.Errorf("standby start: %w", err))
	}

	mc, err := mongo.Connect(options.Client().ApplyURI(c.mongoURI))
	if err != nil {
		return fail(err)
	}
	defer mc.Disconnect(context.Background())
	wcoll := mc.Database(coll.Database().Name()).Collection(coll.Name())
	addrs := []string{readAddr(holder), readAddr(standby)}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	load0 := loadavg()
	state := mc.Database(coll.Database().Name()).Collection(holder.state)
	marks0 := waitDocuments(ctx, state)
	quiet, err := timeWrites(ctx, c, wcoll, ms, holder.uid, client, addrs, 0, nil)
	if err != nil {
		return fail(err)
	}
	quiet.marks = waitDocuments(ctx, state) - marks0
	var flooded waitTimes
	if c.flood > 0 {
		marks0 = waitDocuments(ctx, state)
		// The flood: c.flood waiters, half on each sidecar, each asking
		// again at once for the latest write as soon as answered.
		var latest atomic.Pointer[bson.Timestamp]
		latest.Store(&bson.Timestamp{})
		fctx, stopFlood := context.WithCancel(ctx)
		fclient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: c.flood, MaxConnsPerHost: c.flood}}
		var fwg sync.WaitGroup
		var asked atomic.Int64
		for i := 0; i < c.flood; i++ {
			fwg.Add(1)
			go func() {
				defer fwg.Done()
				for fctx.Err() == nil {
					_ = waitOn(fctx, fclient, addrs[i%2], *latest.Load())
					asked.Add(1)
				}
			}()
		}
		t0 := time.Now()
		flooded, err = timeWrites(ctx, c, wcoll, ms, holder.uid, client, addrs, c.latency, &latest)
		stopFlood()
		fwg.Wait()
		if err != nil {
			return fail(err)
		}
		flooded.asked = float64(asked.Load()) / time.Since(t0).Seconds()
		flooded.marks = waitDocuments(ctx, state) - marks0
	}
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fail(fmt.Errorf("sidecar exit: %w", err))
		}
	}
	fmt.Printf("meilistream bench -wait: %d articles, %d writes one at a time, flushInterval %s, %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, c.latency, c.flush, runtime.NumCPU(), load0, loadavg())
	quiet.print("")
	if c.flood > 0 {
		flooded.print(fmt.Sprintf(" (%d more waiters asking again and again: %.0f waits/s)", c.flood, flooded.asked))
	}
	return nil
}

// waitTimes are, per write, the time until GET /wait returned on the
// holder and on the standby, and until the document was searchable.
type waitTimes struct {
	onHolder, onStandby, searchable []time.Duration
	asked                           float64 // the flood's waits answered per second
	marks                           int64   // wait documents written meanwhile
}

// waitDocuments is how many times the job's wait document was written.
func waitDocuments(ctx context.Context, state *mongo.Collection) int64 {
	var d struct {
		N int64 `bson:"n"`
	}
	_ = state.FindOne(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "wait", Value: "articles"}}}}).Decode(&d)
	return d.N
}

func (w waitTimes) print(what string) {
	p50s, p99s := quantiles(w.searchable)
	fmt.Printf("write to searchable (polled)%s: p50 %s, p99 %s; %d wait documents for %d writes\n", what, p50s, p99s, w.marks, len(w.searchable))
	for _, x := range []struct {
		what string
		ds   []time.Duration
	}{{"holder ", w.onHolder}, {"standby", w.onStandby}} {
		p50, p99 := quantiles(x.ds)
		fmt.Printf("write to /wait on the %s%s: p50 %s, p99 %s (p99 %+dms against searchable)\n", x.what, what, p50, p99, (p99 - p99s).Milliseconds())
	}
}

// timeWrites makes c.latency writes (numbered from first), each timed
// until GET /wait returns on each sidecar of addrs and until searchable;
// latest, when set, is told each write's cluster time.
func timeWrites(ctx context.Context, c config, wcoll *mongo.Collection, ms meilisearch.ServiceManager, uid string, client *http.Client, addrs []string, first int, latest *atomic.Pointer[bson.Timestamp]) (waitTimes, error) {
	var out waitTimes
	for k := first; k < first+c.latency; k++ {
		id := 1 + (k*7919)%c.docs
		if !articles.Published(id) {
			id = id%c.docs + 1
		}
		mark := fmt.Sprintf("rw%d", k)
		start := time.Now()
		op, err := writeTitle(ctx, wcoll, id, mark)
		if err != nil {
			return out, err
		}
		if latest != nil {
			latest.Store(&op)
		}
		var wg sync.WaitGroup
		var took [3]time.Duration
		var errs [3]error
		for i, addr := range addrs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = waitOn(ctx, client, addr, op)
				took[i] = time.Since(start)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ok, err := titleIs(ctx, ms, uid, id, mark)
				if ok || err != nil {
					errs[2], took[2] = err, time.Since(start)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return out, fmt.Errorf("write %d, %s: %w", k, []string{"wait on the holder", "wait on the standby", "searchable"}[i], err)
			}
		}
		out.onHolder, out.onStandby, out.searchable = append(out.onHolder, took[0]), append(out.onStandby, took[1]), append(out.searchable, took[2])
	}
	return out, nil
}

func quantiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2].Round(time.Millisecond), s[min(len(s)-1, len(s)*99/100)].Round(time.Millisecond)
}

// writeTitle sets article id's title in a session and returns the write's
// operationTime, as an application has it.
func writeTitle(ctx context.Context, coll *mongo.Collection, id int, title string) (bson.Timestamp, error) {
	sess, err := coll.Database().Client().StartSession()
	if err != nil {
		return bson.Timestamp{}, err
	}
	defer sess.EndSession(ctx)
	sctx := mongo.NewSessionContext(ctx, sess)
	if _, err := coll.UpdateOne(sctx, bson.D{{Key: "_id", Value: int64(id)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: title}}}}); err != nil {
		return bson.Timestamp{}, err
	}
	if sess.OperationTime() == nil {
		return bson.Timestamp{}, fmt.Errorf("the write's reply has no operationTime")
	}
	return *sess.OperationTime(), nil
}

// waitOn is GET /wait for op on the sidecar at addr; nil on 200.
func waitOn(ctx context.Context, client *http.Client, addr string, op bson.Timestamp) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/wait?job=articles&after=%d.%d&timeout=30s", addr, op.T, op.I), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /wait: %d %s", resp.StatusCode, b)
	}
	return nil
}

func readAddr(r *sidecar) string {
	b, _ := os.ReadFile(r.ready)
	return strings.TrimSpace(string(b))
}

// jobState is the state of r's first job in its /status ("" when not
// known yet).
func jobState(r *sidecar) string {
	addr := readAddr(r)
	if addr == "" {
		return ""
	}
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, s := range []string{"following", "standby", "reindexing", "starting"} {
		if strings.Contains(string(b), `"state": "`+s+`"`) || strings.Contains(string(b), `"state":"`+s+`"`) {
			return s
		}
	}
	return ""
}
