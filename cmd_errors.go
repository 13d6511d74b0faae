package main

import (
	"context"
	"encoding/json"
	"flag"
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

// errorsFlags are the flags of "meilistream errors".
type errorsFlags struct {
	json  bool
	limit int
	after string
}

func (f *errorsFlags) define(fs *flag.FlagSet) {
	f.limit = defaultErrorsLimit
	fs.BoolVar(&f.json, "json", false, `one JSON document: {"job", "errors": [{"id", "code",
"message", "at", "hash", "attempts"}], "next"}; "id" is the
_id as Extended JSON, "hash" and "next" null when absent`)
	fs.Func("limit", fmt.Sprintf("records per page, `N` from 1 to %d (default %d)", jobstate.MaxDocErrorPage, defaultErrorsLimit), func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > jobstate.MaxDocErrorPage {
			return fmt.Errorf("wants a whole number from 1 to %d", jobstate.MaxDocErrorPage)
		}
		f.limit = n
		return nil
	})
	fs.StringVar(&f.after, "after", "", "the page after the one that printed `CURSOR` (\"next page: ...\"\nat its end; \"next\" in --json)")
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
func runErrors(ctx context.Context, inv *invocation, f errorsFlags) int {
	job := inv.Args[0]
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
	page, err := jobstate.ListDocErrors(ctx, w.errColl, job, f.limit, f.after)
	if err != nil {
		return fail(inv.Stderr, err)
	}
	if f.json {
		return printErrorsJSON(inv, job, page)
	}
	return printErrorsTable(inv, job, f, page)
}

func printErrorsJSON(inv *invocation, job string, page jobstate.DocErrorPage) int {
	out := struct {
		Job    string        `json:"job"`
		Errors []errorRecord `json:"errors"`
		Next   *string       `json:"next"` // the --after of the next page; null on the last
	}{Job: job, Errors: []errorRecord{}}
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
		return fail(inv.Stderr, errs.Wrap(errs.Failed, job, err, "write the errors"))
	}
	return exitOK
}

func printErrorsTable(inv *invocation, job string, f errorsFlags, page jobstate.DocErrorPage) int {
	if len(page.Errors) == 0 {
		if f.after == "" {
			fmt.Fprintf(inv.Stdout, "no documents recorded as failed for job %s\n", job)
		} else {
			fmt.Fprintf(inv.Stdout, "no more documents recorded as failed for job %s\n", job)
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
		return fail(inv.Stderr, errs.Wrap(errs.Failed, job, err, "write the errors"))
	}
	if page.Next != "" {
		limit := ""
		if f.limit != defaultErrorsLimit {
			limit = fmt.Sprintf(" --limit %d", f.limit)
		}
		fmt.Fprintf(inv.Stdout, "next page: meilistream errors %s%s --after %s\n", job, limit, page.Next)
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
