package transform

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// trimToFields is doc as a job with fields sees it (the server trims
// every document the job reads to them): _id and the fields, in the
// document's order.
func trimToFields(doc bson.Raw, fields []string) (bson.Raw, error) {
	els, err := doc.Elements()
	if err != nil {
		return nil, err
	}
	idx, out := bsoncore.AppendDocumentStart(nil)
	for _, el := range els {
		if k := el.Key(); k == "_id" || slices.Contains(fields, k) {
			out = append(out, el...)
		}
	}
	out, err = bsoncore.AppendDocumentEnd(out, idx)
	return bson.Raw(out), err
}

// protoNames are what a transform may ask of any object without meaning
// a field: Object.prototype's properties (a conversion asks for valueOf
// and toString) and toJSON.
var protoNames = []string{"constructor", "hasOwnProperty", "isPrototypeOf", "propertyIsEnumerable", "toLocaleString",
	"toString", "valueOf", "__proto__", "__defineGetter__", "__defineSetter__", "__lookupGetter__", "__lookupSetter__", "toJSON"}

// outsideFields runs j's transform on the whole of doc and says what it
// read that j.Fields leaves out ("" when nothing): with fields, the
// transform would not see it. Names of Object.prototype a document lacks
// do not count.
func (j *Job) outsideFields(ctx context.Context, doc bson.Raw) (string, error) {
	res, _, err := j.applyWith(ctx, nil, doc, OpInsert, nil, j.ResolveSamples(doc, j.Related), true)
	if err != nil || res.Reads == nil {
		return "", err
	}
	if res.Reads.All {
		return "the whole document (it enumerates or returns it)", nil
	}
	keep := j.StreamFields()
	var out []string
	for _, f := range res.Reads.Fields {
		if f == "_id" || slices.Contains(keep, f) || j.lookupAs(f) >= 0 {
			continue
		}
		if _, err := doc.LookupErr(f); err != nil && slices.Contains(protoNames, f) {
			continue
		}
		out = append(out, fmt.Sprintf("%q", f))
	}
	return strings.Join(out, ", "), nil
}

// lookupAs is the index of the lookup whose matches the document holds
// under name (its As, or every lookup's name for the identity), -1 when
// none.
func (j *Job) lookupAs(name string) int {
	for i, l := range j.Lookups {
		if l.As == name || l.As == "" && j.rt == nil && l.Name == name {
			return i
		}
	}
	return -1
}
