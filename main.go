// Command meilistream keeps Meilisearch indexes (and replica MongoDB
// collections) in step with MongoDB collections. It runs as a sidecar; see
// README.md for the manual.
//
// This file is the CLI frame only: it picks the subcommand, handles --help,
// loads the configuration for the commands that need it, and maps errors to
// exit codes. Each subcommand's body lives in its own cmd_*.go file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/hashicorp/go-hclog"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/config"
)

// Exit codes, documented in docs/operations.md ("Exit codes").
const (
	exitOK      = 0 // done, or a clean shutdown on SIGINT/SIGTERM
	exitFailed  = 1 // a job or a check failed
	exitUsage   = 2 // bad usage or bad configuration (CONFIG_INVALID)
	exitRunning = 3 // the job's lease is held by another process (RUNNING)
)

func main() {
	tuneGC(memlimit.FromCgroup, memoryLimitRefresh) // the pacer runs for the life of the process
	os.Exit(Main())
}

// Main runs the command line in os.Args and returns the process exit code.
// The testscript suite registers this same function as the "meilistream"
// command, so end-to-end scripts run the real code path.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks for a clean shutdown (ctx is cancelled); once
	// it is under way, a second one kills the process the default way, for
	// an operator who will not wait for the flush.
	go func() {
		<-ctx.Done()
		stop()
	}()
	return run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
}

// invocation is what the frame hands a subcommand that talks to servers
// (run, reindex, retry, errors, status): its positional arguments,
// the loaded and validated configuration, a root logger built from it, and
// where to write. Bodies return an exit code; use exitCode/fail to map an
// error to one.
type invocation struct {
	Args    []string      // the positional arguments, checked against the command's argKind; flags are parsed
	Environ []string      // the process environment the config was loaded from
	Config  config.Config // validated; print it only through Config.Redacted()
	Log     hclog.Logger  // root logger; per job: Log.Named(job)
	// Scrub masks the configuration's secrets; Stdout, Stderr and Log
	// already go through it.
	Scrub  *config.Scrubber
	Stdout io.Writer
	Stderr io.Writer
}

// command is one subcommand. Exactly one of serve and plain is set: serve
// commands get the configuration loaded by the frame, plain ones read what
// they need themselves. The frame parses the flags (declared by flags, into
// variables the body reads) and checks the positional arguments (args)
// before either runs, so -h and bad usage need no configuration.
type command struct {
	name     string
	synopsis string // arguments, for the usage line: "NAME"
	summary  string // one line for the command list
	help     string // the --help text after the usage line; the flags follow it
	args     argKind
	flags    func(fs *flag.FlagSet) // nil: no flags
	serve    func(ctx context.Context, inv *invocation) int
	plain    func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order --help shows them. The bodies
// (runRun, runReindex, ...) live in cmd_<name>.go.
func commands() []command {
	var (
		retryOpts   retryFlags
		reindexOpts reindexFlags
		pauseOpts   pauseFlags
		resumeOpts  pauseFlags
		errorsOpts  errorsFlags
		checkOpts   checkFlags
		probeOpts   probeFlags
		waitOpts    waitFlags
		verifyOpts  verifyFlags
	)
	return []command{
		{
			name: "run", summary: "run every job (the default command)",
			help: `Runs every job found in MEILISTREAM_TRANSFORMS: for each job one pod
holds its lease and reindexes or follows the change stream; the others
stand by. Serves /healthz, /readyz, /status and /metrics on
MEILISTREAM_HTTP_ADDR. SIGINT or SIGTERM flushes what is pending, records
positions, releases leases and exits 0 within MEILISTREAM_SHUTDOWN_TIMEOUT.
Configuration comes from MEILISTREAM_* environment variables
(docs/configuration.md).`,
			serve: runRun,
		},
		{
			name: "reindex", synopsis: "NAME [--inplace|--swap] [--wait [--timeout D]]", summary: "rebuild one job's destination from its collection now",
			help: `Rebuilds job NAME's destination from the source collection: a fresh index
swapped in atomically, or in place, as the job says (reindex: "swap" or
"inplace"), then records the new position.

While a sidecar runs the job (holds its lease), the request goes to that
sidecar, which starts the reindex interleaved with its change stream
(search stays fresh meanwhile); this prints that it started and exits,
or with --wait waits until the reindex is recorded. With no sidecar
running the job, it takes the lease, reindexes itself and prints what it
did. A paused job is not reindexed: resume it first.`,
			args:  argsJob,
			flags: reindexOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runReindex(ctx, inv, reindexOpts) },
		},
		{
			name: "retry", synopsis: "NAME [--wait DURATION]", summary: "run recorded per-document errors of one job again",
			help: `Runs the documents recorded in the errors collection for job NAME through
its transform again, writes those that succeed and clears their records;
a document no longer in the collection is deleted from the destination and
its record cleared. Prints what it did; exits 1 when some still fail.

While a sidecar runs the job (holds its lease), the request goes to that
sidecar, which retries inside the running job, in order with its change
stream (a document changed meanwhile ends with its newer version), and
answers; this waits for the answer and prints it the same way. With no
sidecar running the job, it takes the lease and retries itself.

Edit a transform and the job reindexes, which clears the records of the
documents it now writes: retry is for failures the transform file does not
decide (data the transform reads, a refusal by the destination, a time
limit).`,
			args:  argsJob,
			flags: retryOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runRetry(ctx, inv, retryOpts) },
		},
		{
			name: "pause", synopsis: "NAME [--wait D]", summary: "stop one job sending, keeping its lease and position",
			help: `Pauses job NAME: its holder flushes what it has in flight, closes its change
stream and sends nothing more, keeping its lease and its recorded position
(/status and "meilistream status" show it paused). The pause is recorded
in MongoDB, so it outlives restarts and takeovers until "meilistream
resume NAME". While a job is paused its position ages: resume it before
the oplog window passes it (meilistream_position_age_seconds).

With a sidecar running the job, the request goes to it and this prints its
answer, once what was in flight is durable; with none, it records the
pause itself and the job's next holder starts paused.`,
			args:  argsJob,
			flags: pauseOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runPause(ctx, inv, pauseOpts) },
		},
		{
			name: "resume", synopsis: "NAME [--wait D]", summary: "resume a paused job from its recorded position",
			help: `Resumes job NAME, paused by "meilistream pause": its holder reopens the
change stream at the recorded position and catches up. Through the running
sidecar, or recorded for the next holder when none runs the job.`,
			args:  argsJob,
			flags: resumeOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runResume(ctx, inv, resumeOpts) },
		},
		{
			name: "errors", synopsis: "NAME [--json] [--limit N] [--after CURSOR]", summary: "list the documents one job failed on",
			help: `Lists the documents recorded in the errors collection for job NAME, newest
first: when it last failed, its _id, the error code, the hash of the
transform that failed on it (when recorded), how many times it failed,
and the message. Reads MongoDB only: it works while a sidecar runs.

Pages are cut by keys, not numbers: a document failing while you page
through shows on the first page and moves no other. Once the transform
is fixed, "meilistream retry NAME" runs them again.`,
			args:  argsJob,
			flags: errorsOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runErrors(ctx, inv, errorsOpts) },
		},
		{
			name: "verify", synopsis: "NAME [--repair] [--json] [--rate N] [--show N]", summary: "compare one job's destination with its collection, and repair it",
			help: `Reads job NAME's collection in _id order, runs each document through the
job's transform (lookups included), reads the same ids back from the
destination and compares: missing (the transform gives a document the
destination lacks), stale (both have it, they differ: the first differing
field is shown), extra (the destination holds one the transform does not
give). Runs beside the job's holder, from any pod or a laptop with the same
variables. A document that differs is checked again once the holder's
durable position has passed the read, so a collection changing meanwhile
reports no false drift.

Exits 0 with no drift (or all of it repaired), 1 with drift, 2 for bad
usage or configuration, 3 when it could not finish (a server refused or
did not answer, the holder did not move): never a partial result.`,
			args:  argsJob,
			flags: verifyOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runVerify(ctx, inv, verifyOpts) },
		},
		{
			name: "wait", synopsis: "NAME --after S.I [--timeout D]", summary: "wait until one job's changes up to a cluster time are searchable",
			help: `Waits until every change of job NAME's collections at or before cluster
time S.I (a write's operationTime: its seconds and increment) is durable in
the job's destination, then prints the job's durable time. It reads the
holder's durable time in MongoDB, as GET /wait does on a standby, and
writes a small wait document the holder sees in its change stream, so the
holder records its position at once. Needs MongoDB, not a local sidecar;
a sidecar must hold the job.

Exit 0 durable (searchable), 1 timed out, 2 bad usage or unknown job,
3 could not finish (no sidecar holds the job, MongoDB unreachable).
See docs/read-your-writes.md.`,
			args:  argsJob,
			flags: waitOpts.define,
			serve: func(ctx context.Context, inv *invocation) int { return runWait(ctx, inv, &waitOpts) },
		},
		{
			name: "check", synopsis: "[--sample FILE] [PATH...]", summary: "load transforms and run them on sample documents",
			help: `Loads every transform (the PATHs, each a .js file or a folder, else
MEILISTREAM_TRANSFORMS), runs each on sample documents and prints what it
would write: the documents of FILE (MongoDB Extended JSON, one a line)
through every job, else each job's own samples. Exits 1 on any error, so
it fits in your own CI. Needs no server.`,
			args:  argsAny,
			flags: checkOpts.define,
			plain: func(args []string, stdout, stderr io.Writer) int { return runCheck(args, checkOpts, stdout, stderr) },
		},
		{
			name: "status", summary: "print jobs, lease holders, positions and lag from MongoDB",
			help: `Reads the state collection in MongoDB and prints each job: who holds its
lease, its recorded position, its lag, an unfinished reindex and its
per-document errors. Needs only MongoDB, not a running sidecar.

LAG is the age of the first change of the job's collection after its
recorded position (a holder records it once a batch is durable): 0s when
there is none, the job is caught up. It is the lag of /status and of
meilistream_follow_lag_seconds as far as MongoDB can tell: a running
holder may have made a few more changes durable than it has recorded.`,
			serve: runStatus,
		},
		{
			name: "probe", synopsis: "[--ready] [--addr HOST:PORT] [--timeout D]", summary: "ask the running sidecar whether it is alive (or ready)",
			help: `Asks the sidecar running on this host over its HTTP address (--addr, else
MEILISTREAM_HTTP_ADDR, else :8080; an address on every interface is asked
on the loopback) for /healthz, or /readyz with --ready, and exits 0 when it
answers 200, 1 otherwise (the answer is printed). It needs no shell or
curl: the distroless image runs it as a Docker or compose health check.`,
			flags: probeOpts.define,
			plain: func(args []string, stdout, stderr io.Writer) int { return runProbe(probeOpts, stdout, stderr) },
		},
		{
			name: "version", summary: "print the version",
			help:  `Prints the version of this build, and the Go version it was built with.`,
			plain: runVersion,
		},
	}
}

// run dispatches args (without the program name) and returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cmds := commands()
	name := "run"
	if len(args) > 0 {
		switch a := args[0]; {
		case a == "help":
			if len(args) > 1 {
				if c, ok := find(cmds, args[1]); ok {
					printCommandHelp(stdout, c)
					return exitOK
				}
				fmt.Fprintf(stderr, "meilistream: unknown command %q\n\n", args[1])
				printUsage(stderr, cmds)
				return exitUsage
			}
			printUsage(stdout, cmds)
			return exitOK
		case isHelp(a):
			printUsage(stdout, cmds)
			return exitOK
		case a == "--version" || a == "-version":
			name, args = "version", args[1:]
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "meilistream: unknown flag %s\n\n", a)
			printUsage(stderr, cmds)
			return exitUsage
		default:
			name, args = a, args[1:]
		}
	}
	c, ok := find(cmds, name)
	if !ok {
		fmt.Fprintf(stderr, "meilistream: unknown command %q\n\n", name)
		printUsage(stderr, cmds)
		return exitUsage
	}
	args, err := parseArgs(newFlagSet(c), args)
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(stdout, c)
		return exitOK
	}
	if err == nil {
		err = checkArgs(c, args)
	}
	if err != nil {
		return usageError(stderr, c.name, "%v", err)
	}
	if c.plain != nil {
		return c.plain(args, stdout, stderr)
	}
	cfg, err := config.Load(environ)
	if err != nil {
		return fail(stderr, err)
	}
	if c.name != "run" && !hasVar(environ, "MEILISTREAM_LOG_FORMAT") {
		// A command run by hand logs for a person; the sidecar's own
		// logs stay JSON for the log pipeline, as configured.
		cfg.LogFormat = "text"
	}
	// Whatever a driver or library puts in an error's text (a URL with
	// its query, a quoted password), the configuration's secrets never
	// reach the output: every line goes through the scrubber.
	scrub := config.NewScrubber(cfg.Secrets())
	stdout, stderr = scrub.Writer(stdout), scrub.Writer(stderr)
	inv := &invocation{
		Args:    args,
		Environ: environ,
		Config:  cfg,
		Log:     config.NewLogger(cfg, stderr),
		Scrub:   scrub,
		Stdout:  stdout,
		Stderr:  stderr,
	}
	return c.serve(ctx, inv)
}

// hasVar reports whether environ sets the variable name to a value.
func hasVar(environ []string, name string) bool {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name && v != "" {
			return true
		}
	}
	return false
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

func find(cmds []command, name string) (command, bool) {
	for _, c := range cmds {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func printUsage(w io.Writer, cmds []command) {
	fmt.Fprint(w, `meilistream keeps Meilisearch indexes and replica MongoDB collections in step
with MongoDB collections, through JavaScript transforms.

Usage:
  meilistream [COMMAND] [ARGS]

Commands:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "meilistream COMMAND --help" for a command's help. Configuration is read
from MEILISTREAM_* environment variables (see docs/configuration.md).

Exit codes: 0 ok, 1 a job or check failed, 2 bad usage or configuration,
3 the job's lease is held elsewhere (RUNNING).
`)
}

func printCommandHelp(w io.Writer, c command) {
	usage := "meilistream " + c.name
	if c.synopsis != "" {
		usage += " " + c.synopsis
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", usage, c.help)
	printFlags(w, newFlagSet(c))
}

// exitCode maps an error to the process exit code: nil 0, CONFIG_INVALID 2,
// RUNNING 3, anything else 1.
func exitCode(err error) int {
	switch errs.CodeOf(err) {
	case "":
		return exitOK
	case errs.ConfigInvalid:
		return exitUsage
	case errs.Running:
		return exitRunning
	default:
		return exitFailed
	}
}

// fail prints err on stderr (prefixed "meilistream: ", with its code and
// job once, errs.Format) and returns its exit code. The error must hold no
// secret: configuration errors never carry one.
func fail(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "meilistream: %s\n", errs.Format(err))
	return exitCode(err)
}

// usageError prints a usage problem for c on stderr and returns exitUsage.
func usageError(stderr io.Writer, c string, format string, args ...any) int {
	fmt.Fprintf(stderr, "meilistream %s: %s\n", c, fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run \"meilistream %s --help\" for usage.\n", c)
	return exitUsage
}

// notBuilt is the body of a subcommand whose engine has not landed yet: it
// says so and fails, rather than pretending to work.
func notBuilt(stderr io.Writer, name string) int {
	return fail(stderr, errs.New(errs.Failed, "", "the %q command is not built yet", name))
}
