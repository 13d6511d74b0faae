package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/sidecar/jobstate"
)

// defaultErrorsLimit is how many records a page of "meilistream errors"
// shows unless --limit says otherwise.
const defaultErrorsLimit = 50

// errorsArgs are the arguments of "meilistream errors".
type errorsArgs struct {
	job   string
	json  bool
	limit int
	after string
}

// parseErrorsArgs reads NAME [--json] [--limit N] [--after CURSOR], flags
// in any order, "--flag value" or "--flag=value".
func parseErrorsArgs(args []string) (errorsArgs, error) {
	a := errorsArgs{limit: defaultErrorsLimit}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := strings.Cut(arg, "=")
		valueOf := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", name)
			}
			i++
			return args[i], nil
		}
		switch name {
		case "--json", "-json":
			if hasValue {
				return a, fmt.Errorf("--json takes no value")
			}
			a.json = true
		case "--limit", "-limit":
			v, err := valueOf()
			if err != nil {
				return a, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > jobstate.MaxDocErrorPage {
				return a, fmt.Errorf("--limit wants a whole number from 1 to %d, got %q", jobstate.MaxDocErrorPage, v)
			}
			a.limit = n
		case "--after", "-after":
			v, err := valueOf()
			if err != nil {
				return a, err
			}
			a.after = v
		default:
			if strings.HasPrefix(arg, "-") {
				return a, fmt.Errorf("unknown flag %s", arg)
			}
			if a.job != "" {
				return a, fmt.Errorf("want one job name, got %q and %q", a.job, arg)
			}
			a.job = arg
		}
	}
	if a.job == "" {
		return a, fmt.Errorf("want a job name")
	}
	return a, nil
}

// errorRecord is one record as "meilistream errors --json" prints it.
type errorRecord struct {
	ID       json.RawMessage `json:"id"` // the source _id, relaxed Extended JSON
	Code     string          `json:"code"`
	Message  string          `json:"message"`
	At       time.Time       `json:"at"`
	Hash     *string         `json:"hash"` // null when not recorded
	Attempts int64           `json:"attempts"`
}

// runErrors is the body of "meilistream errors NAME": the documents the
// job failed on, as recorded in the errors collection, newest first, a
// page at a time. It reads MongoDB only: no lease, no running sidecar.
func runErrors(ctx context.Context, inv *invocation) int {
	a, err := parseErrorsArgs(inv.Args)
	if err != nil {
		return usageError(inv.Stderr, "errors", "%v", err)
	}
	w, err := connect(ctx, inv.Config, inv.Log)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	defer w.close()
	if err := w.reach(ctx); err != nil {
		return fail(inv.Stderr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	page, err := jobstate.ListDocErrors(ctx, w.errColl, a.job, a.limit, a.after)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	if a.json {
		return printErrorsJSON(inv, a, page)
	}
	return printErrorsTable(inv, a, page)
}

func printErrorsJSON(inv *invocation, a errorsArgs, page jobstate.DocErrorPage) int {
	out := struct {
		Job    string        `json:"job"`
		Errors []errorRecord `json:"errors"`
		Next   *string       `json:"next"` // the --after of the next page; null on the last
	}{Job: a.job, Errors: []errorRecord{}}
	for _, e := range page.Errors {
		r := errorRecord{ID: idJSON(e.SourceID), Code: e.Code, Message: e.Message, At: e.At.UTC(), Attempts: e.Attempts}
		if e.Hash != "" {
			h := e.Hash
			r.Hash = &h
		}
		out.Errors = append(out.Errors, r)
	}
	if page.Next != "" {
		out.Next = &page.Next
	}
	enc := json.NewEncoder(inv.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.Failed, a.job, err, "write the errors"))
	}
	return exitOK
}

func printErrorsTable(inv *invocation, a errorsArgs, page jobstate.DocErrorPage) int {
	if len(page.Errors) == 0 {
		if a.after == "" {
			fmt.Fprintf(inv.Stdout, "no documents recorded as failed for job %s\n", a.job)
		} else {
			fmt.Fprintf(inv.Stdout, "no more documents recorded as failed for job %s\n", a.job)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(inv.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tID\tCODE\tHASH\tATTEMPTS\tMESSAGE")
	for _, e := range page.Errors {
		hash := "-"
		if e.Hash != "" {
			hash = e.Hash[:min(len(e.Hash), 12)]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.At.UTC().Format(time.RFC3339Nano), idText(e.SourceID), e.Code, hash, e.Attempts, oneLine(e.Message, 160))
	}
	if err := tw.Flush(); err != nil {
		return fail(inv.Stderr, errs.Wrap(errs.Failed, a.job, err, "write the errors"))
	}
	if page.Next != "" {
		limit := ""
		if a.limit != defaultErrorsLimit {
			limit = fmt.Sprintf(" --limit %d", a.limit)
		}
		fmt.Fprintf(inv.Stdout, "next page: meilistream errors %s%s --after %s\n", a.job, limit, page.Next)
	}
	return exitOK
}

// idJSON renders a source _id as relaxed Extended JSON (what mongosh and
// mongoexport print).
func idJSON(v bson.RawValue) json.RawMessage {
	if v.Type == 0 {
		return json.RawMessage("null")
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return json.RawMessage("null")
	}
	var doc struct {
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return json.RawMessage("null")
	}
	return doc.V
}

// idText renders a source _id for a person, as a mongosh filter would
// name it: 42, "sku-1", ObjectId("..."), else its Extended JSON.
func idText(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeObjectID:
		return `ObjectId("` + v.ObjectID().Hex() + `")`
	case bson.TypeString:
		return strconv.Quote(v.StringValue())
	}
	return string(idJSON(v))
}

// oneLine is s's first line, cut to max runes.
func oneLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return s
}
