package testutil

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// RawValue makes a bson.RawValue of any Go value the driver marshals;
// nil is BSON null.
func RawValue(t testing.TB, v any) bson.RawValue {
	t.Helper()
	if v == nil {
		return bson.RawValue{Type: bson.TypeNull}
	}
	typ, data, err := bson.MarshalValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return bson.RawValue{Type: typ, Value: data}
}

// WellFormedBSON validates a document at every level (the driver's
// Validate does not check nested terminators); MongoDB only ever sends
// such, so a fuzzer's input that is not is not one to feed the code.
func WellFormedBSON(d []byte) bool {
	if bsoncore.Document(d).Validate() != nil {
		return false
	}
	l, _, ok := bsoncore.ReadLength(d)
	if !ok || int(l) != len(d) || d[len(d)-1] != 0 {
		return false
	}
	els, err := bsoncore.Document(d).Elements()
	if err != nil {
		return false
	}
	for _, el := range els {
		v := el.Value()
		switch v.Type {
		case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
			if !WellFormedBSON(v.Data) {
				return false
			}
		case bsoncore.TypeCodeWithScope:
			_, scope, ok := v.CodeWithScopeOK()
			if !ok || !WellFormedBSON(scope) {
				return false
			}
		case bsoncore.TypeBoolean:
			if v.Data[0] > 1 {
				return false
			}
		case bsoncore.TypeString, bsoncore.TypeSymbol, bsoncore.TypeJavaScript:
			if len(v.Data) < 5 || v.Data[len(v.Data)-1] != 0 {
				return false
			}
		}
	}
	return true
}
