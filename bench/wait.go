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
	var onHolder, onStandby, searchable []time.Duration
	load0 := loadavg()
	for k := 0; k < c.latency; k++ {
		id := 1 + (k*7919)%c.docs
		if !articles.Published(id) {
			id++
		}
		mark := fmt.Sprintf("rw%d", k)
		start := time.Now()
		op, err := writeTitle(ctx, wcoll, id, mark)
		if err != nil {
			return fail(err)
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
				ok, err := titleIs(ctx, ms, holder.uid, id, mark)
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
				return fail(fmt.Errorf("write %d, %s: %w", k, []string{"wait on the holder", "wait on the standby", "searchable"}[i], err))
			}
		}
		onHolder, onStandby, searchable = append(onHolder, took[0]), append(onStandby, took[1]), append(searchable, took[2])
	}
	for _, r := range runs {
		if err := r.stop(); err != nil {
			return fail(fmt.Errorf("sidecar exit: %w", err))
		}
	}
	fmt.Printf("meilistream bench -wait: %d articles, %d writes one at a time, flushInterval %s, %d CPUs, load average %s at the start, %s at the end\n",
		c.docs, c.latency, c.flush, runtime.NumCPU(), load0, loadavg())
	p50s, p99s := quantiles(searchable)
	fmt.Printf("write to searchable (polled):   p50 %s, p99 %s\n", p50s, p99s)
	for _, w := range []struct {
		what string
		ds   []time.Duration
	}{{"holder ", onHolder}, {"standby", onStandby}} {
		p50, p99 := quantiles(w.ds)
		fmt.Printf("write to /wait on the %s: p50 %s, p99 %s (p99 %+dms against searchable)\n", w.what, p50, p99, (p99 - p99s).Milliseconds())
	}
	return nil
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
