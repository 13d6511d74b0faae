package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/meilistream/meilistream/internal/meilitest"
	"github.com/meilistream/meilistream/internal/mongotest"
)

// meiliMasterKey is the key meilisearch-go's integration tests use
// (integration/main_test.go masterKey).
const meiliMasterKey = "masterKey"

// unitResult is what became of one test process.
type unitResult struct {
	unit unit
	out  *processOutput
	// note says why the process ended badly: a timeout, a crash, servers
	// that would not start.
	note string
}

// topName is the name whose outcome is the unit's: the top-level test, or
// the spec directory's subtest of a split unit.
func (r unitResult) topName() string {
	if r.unit.long {
		return r.unit.top + "/" + r.unit.group
	}
	return r.unit.top
}

func (r unitResult) tally() tally {
	var t tally
	switch r.out.results[r.topName()] {
	case Pass:
		t.topPass++
	case Skip:
		t.topSkip++
	default:
		t.topFail++
	}
	leaves := r.out.leaves()
	if len(leaves) == 0 {
		t.fail++
	}
	for _, name := range leaves {
		switch r.out.results[name] {
		case Pass:
			t.pass++
		case Skip:
			t.skip++
		default:
			t.fail++
		}
	}
	return t
}

// failed lists the failed or unfinished cases.
func (r unitResult) failed() []string {
	var out []string
	for _, name := range r.out.leaves() {
		if o := r.out.results[name]; o == Fail || o == Unfinished {
			out = append(out, name)
		}
	}
	if len(out) == 0 && r.out.results[r.topName()] != Pass && r.out.results[r.topName()] != Skip {
		out = append(out, r.topName())
	}
	return out
}

func (r unitResult) summary() string {
	t := r.tally()
	s := fmt.Sprintf("%d pass, %d fail, %d skip", t.pass, t.fail, t.skip)
	if r.note != "" {
		s += "; " + r.note
	}
	return s
}

// servers are the test servers a test process talks to.
type servers struct {
	mongo *mongotest.Server
	meili *meilitest.Server
}

// startServers starts the servers suite s needs.
func startServers(s *suite) (*servers, error) {
	var sv servers
	if s.mongo {
		srv, err := mongotest.Start(mongotest.Options{})
		if err != nil {
			return nil, fmt.Errorf("start mongotest: %w", err)
		}
		sv.mongo = srv
	}
	if s.meili {
		srv, err := meilitest.Start(meilitest.Options{MasterKey: meiliMasterKey})
		if err != nil {
			sv.close()
			return nil, fmt.Errorf("start meilitest: %w", err)
		}
		// meilisearch-go's suite runs chat_test.go first, which turns the
		// chatCompletions feature on for good; later tests expect the chat
		// setting it makes visible, also when run alone (-run).
		srv.SetExperimentalFeature("chatCompletions", true)
		sv.meili = srv
	}
	return &sv, nil
}

func (sv *servers) close() {
	if sv.mongo != nil {
		sv.mongo.Close()
	}
	if sv.meili != nil {
		sv.meili.Close()
	}
}

func (sv *servers) env(root string) []string {
	var env []string
	if sv.mongo != nil {
		// The driver's spec runners find their files under
		// PROJECT_DIRECTORY (internal/spectest.Path).
		env = append(env, "MONGODB_URI="+sv.mongo.URI(), "PROJECT_DIRECTORY="+root)
	}
	if sv.meili != nil {
		env = append(env, "MEILISEARCH_URL="+sv.meili.URL())
	}
	return env
}

// runUnit runs the unit's test process against sv (fresh servers when sv
// is nil) and parses what it printed. Its output is kept in work/logs.
func runUnit(ctx context.Context, u unit, bin, root string, c *config, sv *servers) unitResult {
	r := unitResult{unit: u, out: &processOutput{results: map[string]Outcome{}, logs: map[string][]string{}}}
	if sv == nil {
		fresh, err := startServers(u.suite)
		if err != nil {
			r.note = err.Error()
			return r
		}
		defer fresh.close()
		sv = fresh
	}
	env := append(os.Environ(), sv.env(root)...)

	timeout := unitTimeout(u, c.timeout, c.dirTimeout)
	// The test binary's own -test.timeout panics with every goroutine's
	// stack (useful in the log); the context kills it if even that hangs.
	pctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(pctx, bin, "-test.v=test2json", "-test.count=1",
		"-test.timeout="+timeout.String(), "-test.run="+u.run)
	cmd.Dir = filepath.Join(root, u.suite.pkg)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second

	logPath := filepath.Join(c.work, "logs", u.suite.name, logName(u))
	var logFile io.Writer = io.Discard
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err == nil {
		if f, err := os.Create(logPath); err == nil {
			defer f.Close()
			logFile = f
		}
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	parsed := make(chan *processOutput, 1)
	go func() { parsed <- parseOutput(io.TeeReader(pr, logFile)) }()
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
	}
	pw.Close()
	r.out = <-parsed
	var ee *exec.ExitError
	switch {
	case pctx.Err() != nil && ctx.Err() == nil:
		r.note = fmt.Sprintf("killed after %s", timeout+30*time.Second)
	case errors.As(err, &ee):
		if strings.Contains(lastLines(r.out, r.topName()), "test timed out") || ee.ExitCode() == 2 && len(r.out.results) > 0 && hasUnfinished(r.out) {
			r.note = fmt.Sprintf("timed out after %s", timeout)
		} else if r.out.results[r.topName()] == Pass || r.out.results[r.topName()] == Skip {
			r.note = fmt.Sprintf("exit status %d after the test finished", ee.ExitCode())
		}
	case err != nil:
		r.note = "run: " + err.Error()
	}
	return r
}

func hasUnfinished(p *processOutput) bool {
	for _, o := range p.results {
		if o == Unfinished {
			return true
		}
	}
	return false
}

func lastLines(p *processOutput, name string) string {
	return strings.Join(p.logs[name], "\n")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func logName(u unit) string {
	n := u.top
	if u.long {
		n += "__" + u.group
	}
	return unsafeName.ReplaceAllString(n, "_") + ".log"
}
