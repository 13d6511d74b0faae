package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// argKind says which positional arguments a subcommand takes; the frame
// checks them before the body runs, so a body reads inv.Args as given.
type argKind int

const (
	argsNone argKind = iota // none
	argsJob                 // exactly one: a job's name
	argsAny                 // any number (check's PATHs)
)

// newFlagSet is c's flag set: errors and usage are returned to the frame,
// which prints them once, the way every command does.
func newFlagSet(c command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if c.flags != nil {
		c.flags(fs)
	}
	return fs
}

// parseArgs parses args with fs, flags anywhere among the positional
// arguments ("errors books --json" as well as "errors --json books"), as
// "-flag value", "--flag value" or "--flag=value", and returns the
// positional ones. Everything after a "--" is positional. -h and --help
// give flag.ErrHelp.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkArgs says what is wrong with c's positional arguments, if anything.
func checkArgs(c command, args []string) error {
	switch c.args {
	case argsNone:
		if len(args) > 0 {
			return fmt.Errorf("takes no arguments, got %q", args[0])
		}
	case argsJob:
		switch len(args) {
		case 0:
			return errors.New("want a job name")
		case 1:
		default:
			return fmt.Errorf("want one job name, got %s", quoteAll(args))
		}
	}
	return nil
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " and ")
}

// printFlags lists fs's flags under "Flags:", one "--name VALUE" a line
// with its usage beside it; nothing when there are none.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var lines [][2]string
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if name != "" {
			left += " " + name
		}
		if d := f.DefValue; d != "" && d != "false" && d != "0" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		lines = append(lines, [2]string{left, usage})
		width = max(width, len(left))
	})
	if len(lines) == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	for _, l := range lines {
		usage := strings.ReplaceAll(l[1], "\n", "\n"+strings.Repeat(" ", width+4))
		fmt.Fprintf(w, "  %-*s  %s\n", width, l[0], usage)
	}
}
