package replicate

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/meilistream/meilistream/sidecar/engine"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Server error codes the sink branches on (src/mongo/base/error_codes.yml).
const (
	codeDuplicateKey = 11000
	codeUnauthorized = 13
	codeAuthFailed   = 18
)

// transientCodes are server errors that say nothing about the document: the
// write may succeed when sent again (a step-down, a shutdown, a timeout, a
// write conflict). The driver's own retryable-write codes
// (x/mongo/driver/errors.go retryableCodes) plus the "not primary" and "node
// is recovering" ones.
var transientCodes = map[int]bool{
	6:     true, // HostUnreachable
	7:     true, // HostNotFound
	24:    true, // LockTimeout
	50:    true, // MaxTimeMSExpired
	64:    true, // WriteConcernFailed
	89:    true, // NetworkTimeout
	91:    true, // ShutdownInProgress
	112:   true, // WriteConflict
	133:   true, // FailedToSatisfyReadPreference
	134:   true, // ReadConcernMajorityNotAvailableYet
	189:   true, // PrimarySteppedDown
	262:   true, // ExceededTimeLimit
	9001:  true, // SocketException
	10107: true, // NotWritablePrimary
	11600: true, // InterruptedAtShutdown
	11602: true, // InterruptedDueToReplStateChange
	13435: true, // NotPrimaryNoSecondaryOk
	13436: true, // NotPrimaryOrSecondary
	462:   true, // IngressRequestRateLimitExceeded
}

// transientLabels mark an error as worth sending again whatever its code.
var transientLabels = []string{"RetryableWriteError", "NetworkError", "TransientTransactionError", "SystemOverloadedError"}

func hasTransientLabel(labels []string) bool {
	for _, l := range labels {
		for _, t := range transientLabels {
			if l == t {
				return true
			}
		}
	}
	return false
}

// isTransient reports whether a server error may go away by itself.
func isTransient(se mongo.ServerError) bool {
	for _, l := range transientLabels {
		if se.HasErrorLabel(l) {
			return true
		}
	}
	for _, c := range se.ErrorCodes() {
		if transientCodes[c] {
			return true
		}
	}
	return false
}

// isConfigError reports whether err is one only the configuration can fix:
// the replica's user may not write there.
func isConfigError(err error) bool {
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.HasErrorCode(codeUnauthorized) || se.HasErrorCode(codeAuthFailed)
}

// codeNames names the write errors a replica returns for a document, for the
// errors collection (write errors carry a code but no codeName).
var codeNames = map[int]string{
	2:     "BadValue",
	52:    "DollarPrefixedFieldName",
	55:    "InvalidDBRef",
	56:    "EmptyFieldName",
	57:    "DottedFieldName",
	66:    "ImmutableField",
	121:   "DocumentValidationFailure",
	10334: "BSONObjectTooLarge",
	11000: "DuplicateKey",
	17280: "KeyTooLong",
	17419: "BSONObjectTooLarge",
	17420: "BSONObjectTooLarge",
}

// maxDetail bounds the server's errInfo kept in an error record.
const maxDetail = 1024

func docFailure(pos int, we mongo.WriteError) engine.DocFailure {
	code, ok := codeNames[we.Code]
	if !ok {
		code = "MongoError" + strconv.Itoa(we.Code)
	}
	msg := we.Message
	if len(we.Details) > 0 {
		d := we.Details.String()
		if len(d) > maxDetail {
			d = d[:maxDetail] + "..."
		}
		msg += ": " + d
	}
	return engine.DocFailure{Writes: []int{pos}, Code: code, Message: msg}
}

// rawDoc returns the document of an upsert as BSON.
func rawDoc(d any) (bson.Raw, error) {
	switch v := d.(type) {
	case bson.Raw:
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("invalid BSON document: %w", err)
		}
		return v, nil
	case []byte:
		return rawDoc(bson.Raw(v))
	case nil:
		return nil, errors.New("an upsert without a document")
	default:
		b, err := bson.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode a %T as BSON: %w", d, err)
		}
		return b, nil
	}
}

// sameValue reports whether a and b are the same BSON value, type included
// (an int32 1 and an int64 1 are different _ids to a mirror).
func sameValue(a, b bson.RawValue) bool {
	return a.Type == b.Type && bytes.Equal(a.Value, b.Value)
}
