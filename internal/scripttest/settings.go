package scripttest

// A custom testscript command that lists an index's tasks
// (sync_settings_in_place).

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meilisearch/meilisearch-go"
	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	Cmds["meili-tasks"] = cmdMeiliTasks
}

// cmdMeiliTasks: meili-tasks [-timeout D] [-wait N] INDEX [LINE] prints
// the tasks of the script's index INDEX (the index prefix added), oldest
// first, one line each: "TYPE STATUS", e.g. "settingsUpdate succeeded".
// With -wait N it first polls until N tasks print as LINE.
func cmdMeiliTasks(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("meili-tasks", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "")
	want := fs.Int("wait", 0, "")
	if neg || fs.Parse(args) != nil || fs.NArg() < 1 || fs.NArg() > 2 || (*want > 0) != (fs.NArg() == 2) {
		ts.Fatalf("usage: meili-tasks [-timeout D] [-wait N] INDEX [LINE]")
	}
	uid := ts.Getenv("MEILISTREAM_INDEX_PREFIX") + fs.Arg(0)
	deadline := time.Now().Add(*timeout)
	for {
		lines := meiliTaskLines(ts, uid)
		if *want == 0 || slices.Index(lines, fs.Arg(1)) >= 0 && count(lines, fs.Arg(1)) >= *want {
			for _, l := range lines {
				fmt.Fprintln(ts.Stdout(), l)
			}
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("index %s: %d tasks %q after %s, want %d; tasks:\n%s", uid, count(lines, fs.Arg(1)), fs.Arg(1), *timeout, *want, strings.Join(lines, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func meiliTaskLines(ts *testscript.TestScript, uid string) []string {
	ctx, cancel := cmdCtx()
	defer cancel()
	res, err := scriptMeili(ts).GetTasks(ctx, &meilisearch.TasksQuery{IndexUIDS: []string{uid}, Limit: 1000})
	ts.Check(err)
	tasks := slices.Clone(res.Results)
	slices.SortFunc(tasks, func(a, b meilisearch.Task) int { return int(a.UID - b.UID) })
	lines := make([]string, 0, len(tasks))
	for _, t := range tasks {
		lines = append(lines, fmt.Sprintf("%s %s", t.Type, t.Status))
	}
	return lines
}

func count(lines []string, line string) int {
	n := 0
	for _, l := range lines {
		if l == line {
			n++
		}
	}
	return n
}
