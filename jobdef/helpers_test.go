package jobdef_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
)

// wantErr checks err's code and that its message holds every part.
func wantErr(t testing.TB, err error, code errs.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if got := errs.CodeOf(err); got != code {
		t.Fatalf("code %s, want %s: %v", got, code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// wellFormed validates a document at every level (the driver's Validate
// does not check nested terminators); MongoDB only ever sends such.
func wellFormed(d []byte) bool {
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
			if !wellFormed(v.Data) {
				return false
			}
		case bsoncore.TypeCodeWithScope:
			_, scope, ok := v.CodeWithScopeOK()
			if !ok || !wellFormed(scope) {
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
