package replicate

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/meilistream/meilistream/internal/clip"
)

// What the replica says about a write goes into the log, /status and the
// errors collection, and MongoDB's messages quote the documents they refuse:
// an E11000 names the duplicated value ("dup key: { email: "..." }", and
// keyValue beside it), a validation failure the values it considered, an
// immutable-field error the whole stored document ("found to have been
// removed --{...}"), a too-large object its first element, a geo index the
// document it could not read. So no server text leaves this package as it
// is: a refusal says what the replica refused with the codes, the index's
// fields and the validator's own words, and any other server text is cut
// before the first value it may quote.

// maxDetail bounds the validation details kept in an error record.
const maxDetail = 1024

// maxText bounds a server text kept after redaction.
const maxText = 300

// redactText keeps a server message up to the first value it may quote:
// MongoDB's messages put what they quote after a colon ("dup key: ...",
// "First element: ...", "unsupported: ...") or inside braces, brackets or
// double quotes. Field names in single quotes ('$price') are kept: they
// name the problem without holding data.
func redactText(msg string) string {
	cut := len(msg)
	if i := strings.IndexAny(msg, ":{[\""); i >= 0 {
		cut = i
	}
	if cut > maxText {
		cut = len(clip.Prefix(msg, maxText))
	}
	out := strings.TrimRight(msg[:cut], " :,-(")
	if cut < len(msg) {
		out += " (the rest is not shown: it may quote the document)"
	}
	return out
}

// refusal is the message of a per-document refusal, from the write error's
// structured fields; never a value of the document.
func refusal(we mongo.WriteError) string {
	switch we.Code {
	case codeDuplicateKey:
		msg := "a unique index of the replica"
		if kp, err := we.Raw.LookupErr("keyPattern"); err == nil && kp.Type == bson.TypeEmbeddedDocument {
			// The key pattern holds field names and index kinds only.
			msg += " on " + relaxedJSON(kp)
		}
		return msg + " already holds this document's value for another document (the value is not shown; find the other document with the same value, or drop the replica's index if the source has none)"
	case 121:
		msg := "the replica's document validation refused the document"
		if d := validationDetails(we.Details); d != "" {
			msg += ": " + d
		}
		return msg
	case codeBSONObjectTooLarge, 17419, 17420:
		return fmt.Sprintf("the document is larger than the replica stores (%d bytes, maxBsonObjectSize)", maxDocumentSize)
	case codeImmutableField:
		return "the replica holds a document with this _id that the write may not replace (ImmutableField)"
	case 15:
		return "the document is nested deeper than the replica stores (100 levels)"
	case 16755:
		return "a geo index of the replica cannot read the document's geometry"
	case 17262:
		return "a text index of the replica does not support the document's language override"
	case 17280:
		return "an index key of the document is larger than the replica's index takes (a limit of servers before 4.2)"
	}
	return fmt.Sprintf("the replica refused the document (%d %s): %s", we.Code, codeName(we.Code), redactText(we.Message))
}

// detailKeys are the keys of a DocumentValidationFailure's errInfo that
// the server fills from the validator and from field names, never from the
// document's values (src/mongo/db/matcher/doc_validation_error.cpp); the
// others, consideredValue(s) first of all, are left out.
var detailKeys = map[string]bool{
	"operatorName": true, "propertyName": true, "reason": true, "specifiedAs": true,
	"consideredType": true, "consideredTypes": true, "missingProperties": true,
	"additionalProperties": true, "failingProperty": true, "regexMatched": true,
	"title": true, "description": true, "index": true, "itemIndex": true,
	"details": true, "schemaRulesNotSatisfied": true, "propertiesNotSatisfied": true,
	"clausesNotSatisfied": true,
}

// detailContainers are the detailKeys whose values are the error's own
// structure (filtered again); the rest are copied as they are.
var detailContainers = map[string]bool{
	"details": true, "schemaRulesNotSatisfied": true, "propertiesNotSatisfied": true, "clausesNotSatisfied": true,
}

// validationDetails renders a validation failure's errInfo without the
// values it considered, at most maxDetail bytes.
func validationDetails(info bson.Raw) string {
	if len(info) == 0 {
		return ""
	}
	d, ok := filterDetail(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: info}, 0)
	if !ok {
		return ""
	}
	s := relaxedJSON(d)
	return clip.Text(s, maxDetail, "...")
}

// relaxedJSON renders v as relaxed Extended JSON ({"email":1}), what
// mongosh shows.
func relaxedJSON(v any) string {
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(b), `{"v":`), "}")
}

// filterDetail keeps, of a detail document or array, what detailKeys
// allow; false when nothing is left.
func filterDetail(v bson.RawValue, depth int) (any, bool) {
	if depth > 32 {
		return nil, false
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		els, err := v.Document().Elements()
		if err != nil {
			return nil, false
		}
		var out bson.D
		for _, el := range els {
			k := el.Key()
			if !detailKeys[k] {
				continue
			}
			if detailContainers[k] {
				if f, ok := filterDetail(el.Value(), depth+1); ok {
					out = append(out, bson.E{Key: k, Value: f})
				}
				continue
			}
			out = append(out, bson.E{Key: k, Value: el.Value()})
		}
		return out, len(out) > 0
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return nil, false
		}
		var out bson.A
		for _, e := range vals {
			if f, ok := filterDetail(e, depth+1); ok {
				out = append(out, f)
			}
		}
		return out, len(out) > 0
	}
	return nil, false
}

// describe renders a failed replica operation without the values its
// server texts may quote: the codes and code names of its write errors
// and write concern error, and the redacted text of anything else.
func describe(err error) string {
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		return describeWrite(bwe.WriteConcernError, bulkErrors(bwe.WriteErrors), bwe.Labels)
	}
	var we mongo.WriteException
	if errors.As(err, &we) {
		return describeWrite(we.WriteConcernError, we.WriteErrors, we.Labels)
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		s := fmt.Sprintf("(%d %s) %s", ce.Code, nameOr(ce.Name, int(ce.Code)), redactText(ce.Message))
		if len(ce.Labels) > 0 {
			s += fmt.Sprintf(" %v", ce.Labels)
		}
		return s
	}
	// Not a server answer (a network error, a timeout, the driver's own
	// refusal): its text names hosts and causes, not documents.
	return err.Error()
}

func bulkErrors(b []mongo.BulkWriteError) []mongo.WriteError {
	out := make([]mongo.WriteError, len(b))
	for i := range b {
		out[i] = b[i].WriteError
	}
	return out
}

// describeWrite lists a write's errors by code, at most a few.
func describeWrite(wce *mongo.WriteConcernError, wes []mongo.WriteError, labels []string) string {
	var parts []string
	if wce != nil {
		parts = append(parts, fmt.Sprintf("write concern error (%d %s): %s", wce.Code, nameOr(wce.Name, wce.Code), redactText(wce.Message)))
	}
	if len(wes) > 0 {
		counts := map[int]int{}
		var order []int
		for _, we := range wes {
			if counts[we.Code] == 0 {
				order = append(order, we.Code)
			}
			counts[we.Code]++
		}
		var codes []string
		for _, c := range order {
			codes = append(codes, fmt.Sprintf("%d× (%d %s)", counts[c], c, codeName(c)))
		}
		parts = append(parts, "write errors: "+strings.Join(codes, ", "))
	}
	if len(labels) > 0 {
		parts = append(parts, fmt.Sprintf("labels %v", labels))
	}
	if len(parts) == 0 {
		return "write failed"
	}
	return strings.Join(parts, "; ")
}

func nameOr(name string, code int) string {
	if name != "" {
		return name
	}
	return codeName(code)
}

// redactedError is a replica error as the rest of the program shows it:
// describe's text, the driver's error kept for errors.Is/As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redacted wraps err so that its text is describe's.
func redacted(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: describe(err), err: err}
}
