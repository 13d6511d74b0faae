package scripttest

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	Cmds["metric-at-least"] = cmdMetricAtLeast
}

// cmdMetricAtLeast: metric-at-least [-timeout D] [-ready FILE] NAME LABELS
// MIN polls the sidecar's /metrics (address from FILE, default
// $MEILISTREAM_READY_FILE) until the sample `NAME LABELS` is at least MIN,
// e.g. metric-at-least meilistream_position_age_seconds
// '{kind="search",pipeline="books"}' 2. With !, until the sample is there
// and below MIN.
func cmdMetricAtLeast(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("metric-at-least", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 10*time.Second, "")
	ready := fs.String("ready", "", "")
	if fs.Parse(args) != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: metric-at-least [-timeout D] [-ready FILE] NAME LABELS MIN")
	}
	min, err := strconv.ParseFloat(fs.Arg(2), 64)
	ts.Check(err)
	if *ready == "" {
		*ready = ts.Getenv("MEILISTREAM_READY_FILE")
	}
	series := fs.Arg(0) + fs.Arg(1) + " "
	deadline := time.Now().Add(*timeout)
	last := "no ready file"
	c := http.Client{Timeout: 5 * time.Second}
	for {
		if addr, err := os.ReadFile(ts.MkAbs(*ready)); err == nil && len(bytes.TrimSpace(addr)) > 0 {
			resp, err := c.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = "no such series"
				for _, l := range strings.Split(string(b), "\n") {
					v, ok := strings.CutPrefix(l, series)
					if !ok {
						continue
					}
					last = l
					if f, err := strconv.ParseFloat(v, 64); err == nil && (f >= min) != neg {
						return
					}
				}
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("/metrics: %s not %s %s after %s; last seen: %s", strings.TrimSpace(series), map[bool]string{false: ">=", true: "<"}[neg], fs.Arg(2), *timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
