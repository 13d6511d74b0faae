package jobdef

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/errs"
)

// MaxIndexIDLen is the longest string id Meilisearch accepts, in bytes:
// its invalid_document_id error says a document identifier "can not be more
// than 511 bytes" (milli's InvalidDocumentId, meilisearch/meilisearch).
const MaxIndexIDLen = 511

// Prefixes of the encoded id forms (see IndexID). Every encoded id starts
// with '_'; a plain string id never does.
const (
	encPlain = "_s" // "_s" + a string _id that is in Meilisearch's alphabet but would be confused
	encUTF8  = "_u" // "_u" + base64url(UTF-8) of any other string _id
	encBSON  = "_b" // "_b" + base64url(BSON type byte + value bytes) of any other _id
)

// IndexID returns the Meilisearch document id for a MongoDB _id. The
// mapping is injective and ParseIndexID reverses it:
//
//   - ObjectId: its 24 lowercase hex characters ("5f1d7a..."), a string.
//   - int32, int64, and a double holding an integer in ±2^53 (-0 included):
//     that number, an int64. MongoDB's unique _id index compares numbers by
//     value, so int32 5, int64 5 and double 5.0 are one _id to it and one id
//     here. Meilisearch stores an integer id as its decimal string.
//   - a string matching [A-Za-z0-9_-]{1,511} that is not a decimal integer
//     (-?[0-9]+), not 24 lowercase hex characters and does not start with
//     '_': itself.
//   - any other string in that alphabet, when it fits: "_s" + the string
//     ("123" -> "_s123", "_draft" -> "_s_draft").
//   - any other string: "_u" + unpadded base64url of its UTF-8 bytes.
//   - anything else (other doubles, Decimal128, Binary/UUID, dates,
//     documents, ...): "_b" + unpadded base64url of the BSON type byte
//     followed by the value's BSON bytes.
//
// So an ObjectId and its hex string, or 5 and "5", never share an id, and
// since Meilisearch treats an integer and its decimal string as one document,
// no plain string ever looks like an integer. An _id whose id would be longer
// than 511 bytes cannot be indexed: NOT_A_DOCUMENT.
func IndexID(id bson.RawValue) (any, error) {
	switch id.Type {
	case bson.TypeObjectID:
		oid, ok := id.ObjectIDOK()
		if !ok {
			return nil, errs.New(errs.NotADocument, "", "_id: malformed ObjectId")
		}
		return oid.Hex(), nil
	case bson.TypeInt32:
		v, ok := id.Int32OK()
		if !ok {
			return nil, errs.New(errs.NotADocument, "", "_id: malformed int32")
		}
		return int64(v), nil
	case bson.TypeInt64:
		v, ok := id.Int64OK()
		if !ok {
			return nil, errs.New(errs.NotADocument, "", "_id: malformed int64")
		}
		return v, nil
	case bson.TypeDouble:
		f, ok := id.DoubleOK()
		if !ok {
			return nil, errs.New(errs.NotADocument, "", "_id: malformed double")
		}
		if f == math.Trunc(f) && math.Abs(f) <= MaxSafeInteger {
			return int64(f), nil
		}
	case bson.TypeString:
		s, ok := id.StringValueOK()
		if !ok {
			return nil, errs.New(errs.NotADocument, "", "_id: malformed string")
		}
		return stringID(s)
	}
	if len(id.Value) == 0 && id.Type != bson.TypeNull && id.Type != bson.TypeUndefined &&
		id.Type != bson.TypeMinKey && id.Type != bson.TypeMaxKey {
		return nil, errs.New(errs.NotADocument, "", "_id: missing")
	}
	b := make([]byte, 0, 1+len(id.Value))
	b = append(b, byte(id.Type))
	b = append(b, id.Value...)
	s := encBSON + base64.RawURLEncoding.EncodeToString(b)
	if len(s) > MaxIndexIDLen {
		return nil, errs.New(errs.NotADocument, "", "_id of type %s is too long for a Meilisearch id (%d bytes encoded, at most %d)", id.Type, len(s), MaxIndexIDLen)
	}
	return s, nil
}

// MaxSafeInteger is 2^53, the largest magnitude up to which every integer
// is a double (and a JavaScript number) exactly.
const MaxSafeInteger = 1 << 53

func stringID(s string) (any, error) {
	if len(s) >= 1 && len(s) <= MaxIndexIDLen && InIDAlphabet(s) {
		if s[0] != '_' && !isDecimal(s) && !isOIDHex(s) {
			return s, nil
		}
		if len(s)+len(encPlain) <= MaxIndexIDLen {
			return encPlain + s, nil
		}
	}
	e := encUTF8 + base64.RawURLEncoding.EncodeToString([]byte(s))
	if len(e) > MaxIndexIDLen {
		return nil, errs.New(errs.NotADocument, "", "_id string of %d bytes is too long for a Meilisearch id (%d bytes encoded, at most %d)", len(s), len(e), MaxIndexIDLen)
	}
	return e, nil
}

// InIDAlphabet reports whether s only holds Meilisearch id characters.
func InIDAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// isDecimal reports whether s has the shape of an integer: -?[0-9]+.
func isDecimal(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isOIDHex reports whether s has the shape of an ObjectId's id: 24
// lowercase hex characters.
func isOIDHex(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseIndexID returns the MongoDB _id a Meilisearch id stands for, the
// reverse of IndexID. It takes the id as Meilisearch returns it: a string, or
// a number (int, int32, int64, uint64, an integral float64, json.Number).
// An integer comes back as int32 when it fits, else int64 (MongoDB matches
// either against a stored int32, int64 or integral double _id). An id that
// IndexID could not have produced is NOT_A_DOCUMENT.
func ParseIndexID(id any) (bson.RawValue, error) {
	switch v := id.(type) {
	case string:
		return parseStringID(v)
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return bson.RawValue{}, errs.New(errs.NotADocument, "", "id %q is not an id meilistream writes", clipText(string(v), maxKeyText))
		}
		return intRaw(n), nil
	case int:
		return intRaw(int64(v)), nil
	case int32:
		return intRaw(int64(v)), nil
	case int64:
		return intRaw(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return bson.RawValue{}, errs.New(errs.NotADocument, "", "id %d is not an id meilistream writes", v)
		}
		return intRaw(int64(v)), nil
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > MaxSafeInteger {
			return bson.RawValue{}, errs.New(errs.NotADocument, "", "id %v is not an id meilistream writes", v)
		}
		return intRaw(int64(v)), nil
	}
	return bson.RawValue{}, errs.New(errs.NotADocument, "", "id of Go type %T is not an id meilistream writes", id)
}

func intRaw(n int64) bson.RawValue {
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return bson.RawValue{Type: bson.TypeInt32, Value: bsoncore.AppendInt32(nil, int32(n))}
	}
	return bson.RawValue{Type: bson.TypeInt64, Value: bsoncore.AppendInt64(nil, n)}
}

func parseStringID(s string) (bson.RawValue, error) {
	bad := func() (bson.RawValue, error) {
		return bson.RawValue{}, errs.New(errs.NotADocument, "", "id %q is not an id meilistream writes", clipText(s, maxKeyText))
	}
	if s == "" || len(s) > MaxIndexIDLen || !InIDAlphabet(s) {
		return bad()
	}
	switch {
	case isOIDHex(s):
		// Before the integers: an ObjectId's hex may be all digits
		// (about one in 80,000 are), and no int64 has 24 digits.
		b, _ := hex.DecodeString(s)
		var oid bson.ObjectID
		copy(oid[:], b)
		return bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]}, nil
	case isDecimal(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != s {
			return bad()
		}
		return intRaw(n), nil
	case s[0] != '_':
		return strRaw(s), nil
	case len(s) < 2:
		return bad()
	}
	if len(s) >= 2 && s[:2] == encPlain {
		p := s[2:]
		// Only strings IndexID would not have written plain come back.
		if p == "" || (p[0] != '_' && !isDecimal(p) && !isOIDHex(p)) {
			return bad()
		}
		return strRaw(p), nil
	}
	if s[:2] == encUTF8 {
		b, err := base64.RawURLEncoding.DecodeString(s[2:])
		if err != nil {
			return bad()
		}
		r := strRaw(string(b))
		if want, err := IndexID(r); err != nil || want != s {
			return bad()
		}
		return r, nil
	}
	if s[:2] == encBSON {
		b, err := base64.RawURLEncoding.DecodeString(s[2:])
		if err != nil || len(b) < 1 {
			return bad()
		}
		rv := bson.RawValue{Type: bson.Type(b[0]), Value: b[1:]}
		if v, rest, ok := bsoncore.ReadValue(b[1:], bsoncore.Type(b[0])); !ok || len(rest) != 0 || v.Validate() != nil {
			return bad()
		}
		if want, err := IndexID(rv); err != nil || want != s {
			return bad()
		}
		return rv, nil
	}
	return bad()
}

func strRaw(s string) bson.RawValue {
	return bson.RawValue{Type: bson.TypeString, Value: bsoncore.AppendString(nil, s)}
}
