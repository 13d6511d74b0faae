package scripttest

import (
	"encoding/json"
	"flag"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	Cmds["wait-held"] = cmdWaitHeld
	Cmds["blackhole"] = cmdBlackhole
}

// cmdBlackhole: blackhole VAR listens on a loopback port that accepts
// connections and never answers (a network path that drops everything
// after the handshake, as a broken proxy or firewall does), and sets VAR
// to its host:port. It closes when the script ends.
func cmdBlackhole(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: blackhole VAR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read or answered
			mu.Unlock()
		}
	}()
	ts.Defer(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	ts.Setenv(args[0], ln.Addr().String())
}

// cmdWaitHeld: wait-held [-timeout D] [-ready FILE] N waits until the
// sidecar of the ready file holds exactly N jobs' leases (their /status
// state is reindexing or following) and keeps holding N for a few polls in
// a row, so a count passed on the way is not taken for the end.
func cmdWaitHeld(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("wait-held", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 60*time.Second, "")
	ready := fs.String("ready", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 1 {
		ts.Fatalf("usage: wait-held [-timeout D] [-ready FILE] N")
	}
	want, err := strconv.Atoi(fs.Arg(0))
	ts.Check(err)
	if *ready == "" {
		*ready = ts.Getenv("MEILISTREAM_READY_FILE")
	}
	deadline := time.Now().Add(*timeout)
	last, streak := "nothing (no ready file yet)", 0
	for {
		if addr, err := os.ReadFile(ts.MkAbs(*ready)); err == nil && len(strings.TrimSpace(string(addr))) > 0 {
			v, err := getStatus(strings.TrimSpace(string(addr)), "jobs")
			if err != nil {
				last, streak = err.Error(), 0
			} else {
				var jobs []struct{ Name, State string }
				ts.Check(json.Unmarshal([]byte(v), &jobs))
				held := 0
				var states []string
				for _, j := range jobs {
					if j.State == "following" || j.State == "reindexing" {
						held++
					}
					states = append(states, j.Name+"="+j.State)
				}
				last = strconv.Itoa(held) + " held: " + strings.Join(states, " ")
				if held == want {
					streak++
				} else {
					streak = 0
				}
				if streak >= 5 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("wait-held %s: want %d jobs held, last seen %s", *ready, want, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
