package replicate

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/meilistream/meilistream/internal/errs"
	"github.com/meilistream/meilistream/internal/mongoerr"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// Server error codes the sink branches on (src/mongo/base/error_codes.yml).
const (
	codeBadValue           = 2
	codeUnauthorized       = 13
	codeAuthFailed         = 18
	codeImmutableField     = 66
	codeBSONObjectTooLarge = 10334
	codeDuplicateKey       = 11000
)

// class is what the sink makes of a server error: every answer of the
// replica is one of these, so nothing is retried that cannot succeed and
// nothing a retry would fix is pinned on a document.
type class int

const (
	// perDocument: the replica refuses this document for a reason of its
	// own (too large, document validation, a unique index, a field name);
	// it goes to the per-document error path.
	perDocument class = iota
	// transient: the write may succeed when sent again (a step-down, a
	// shutdown, a timeout, a write conflict, a full disk being freed); the
	// engine sends the batch again with backoff.
	transient
	// jobFailure: only the configuration or the replica's own set-up can
	// fix it (credentials, roles, a write concern the replica set cannot
	// satisfy, a destination that is a view, a server that does not know
	// the sink's commands); the job stops with CONFIG_INVALID saying so.
	jobFailure
)

// transientCodes are server errors that say nothing about the document: the
// write may succeed when sent again. The driver's own retryable-write codes
// (x/mongo/driver/errors.go retryableCodes) plus the "not primary", "node is
// recovering", interrupted and resource ones.
var transientCodes = map[int]bool{
	6:     true, // HostUnreachable
	7:     true, // HostNotFound
	24:    true, // LockTimeout
	46:    true, // LockBusy
	50:    true, // MaxTimeMSExpired
	63:    true, // StaleShardVersion
	64:    true, // WriteConcernFailed (wtimeout)
	89:    true, // NetworkTimeout
	91:    true, // ShutdownInProgress
	112:   true, // WriteConflict
	133:   true, // FailedToSatisfyReadPreference
	134:   true, // ReadConcernMajorityNotAvailableYet
	150:   true, // StaleEpoch
	189:   true, // PrimarySteppedDown
	202:   true, // NetworkInterfaceExceededTimeLimit
	262:   true, // ExceededTimeLimit
	462:   true, // IngressRequestRateLimitExceeded
	8000:  true, // AtlasError (a space quota: frees up when the owner acts)
	9001:  true, // SocketException
	10107: true, // NotWritablePrimary
	11600: true, // InterruptedAtShutdown
	11601: true, // Interrupted
	11602: true, // InterruptedDueToReplStateChange
	12587: true, // BackgroundOperationInProgressForNamespace
	13388: true, // StaleConfig
	13435: true, // NotPrimaryNoSecondaryOk
	13436: true, // NotPrimaryOrSecondary
	14031: true, // OutOfDiskSpace
}

// jobCodes are server errors no retry and no document can fix: the job
// stops with CONFIG_INVALID, with what to do.
var jobCodes = map[int]string{
	codeUnauthorized: "the replica's user may not write there: give MEILISTREAM_REPLICA_URI's user readWrite on the destination database",
	codeAuthFailed:   "the replica refused the credentials of MEILISTREAM_REPLICA_URI (or MEILISTREAM_REPLICA_URI_FILE): fix them",
	// UserNotFound
	11: "the replica does not know MEILISTREAM_REPLICA_URI's user: fix the URI or create the user",
	// InvalidNamespace
	73: "the destination is not a collection the replica writes to (check the job's mirror option and MEILISTREAM_REPLICA_DATABASE)",
	// UnknownReplWriteConcern, UnsatisfiableWriteConcern
	79:  "the replica cannot satisfy write concern majority (unknown write concern): check the replica set's configuration behind MEILISTREAM_REPLICA_URI",
	100: "the replica cannot satisfy write concern majority (not enough data-bearing members): check the replica set behind MEILISTREAM_REPLICA_URI",
	// CommandNotSupportedOnView
	166: "the destination is a view, not a collection: point the job's mirror option at a collection",
	// ShardKeyNotFound, WouldChangeOwningShard: a sharded destination must
	// be sharded on _id, since an upsert's filter is the _id alone and
	// mongos wants the shard key in it.
	61:  "the replica collection is sharded on a key other than _id: shard it on _id (hashed or ranged)",
	283: "the replica collection is sharded on a key other than _id: shard it on _id (hashed or ranged)",
}

// commandJobCodes are errors that stop the job when the replica answers
// them for the whole command (an update or delete command the sink built):
// the command does not depend on a document, so the replica refuses every
// batch alike. As a write error of one statement they are that document's.
var commandJobCodes = map[int]string{
	codeBadValue: "the replica refuses the sink's write commands as invalid: is it MongoDB 4.2 or later?",
	9:            "the replica cannot parse the sink's write commands: is it MongoDB 4.2 or later?",
	14:           "the replica refuses the sink's write commands as mistyped: is it MongoDB 4.2 or later?",
	20:           "the replica refuses writes to the destination: check what the destination collection is",
	59:           "the replica does not know the update or delete command: is MEILISTREAM_REPLICA_URI a MongoDB server?",
	72:           "the replica refuses the sink's write options: is it MongoDB 4.2 or later?",
	115:          "the replica does not support the sink's write commands",
	40414:        "the replica refuses the sink's write commands as incomplete: is it MongoDB 4.2 or later?",
	40415:        "the replica refuses the sink's write commands for an unknown field: is it MongoDB 4.2 or later?",
}

// commandDocCodes are errors that a whole command can get for one of its
// documents (a statement larger than the replica parses, checked before it
// is split into statements): every write of the bulk is named, and the
// engine bisects to find the document.
var commandDocCodes = map[int]bool{
	codeBSONObjectTooLarge: true,
	17419:                  true, // the document after the update is too large
	17420:                  true, // the document to upsert is too large
}

// indexCodes are createIndexes answers no retry fixes: the replica refuses
// a source index's spec (an option or an index kind an older or
// differently configured server does not take) or the user may not create
// indexes.
var indexCodes = map[int]string{
	codeBadValue:     "the replica refuses a source index's spec",
	9:                "the replica cannot parse a source index's spec",
	codeUnauthorized: "MEILISTREAM_REPLICA_URI's user may not create indexes there: give it readWrite on the destination database",
	14:               "the replica refuses a source index's spec",
	67:               "the replica cannot create a source index",
	85:               "a source index conflicts with an index of the replica",
	86:               "a source index conflicts with an index of the replica",
	197:              "the replica refuses an option of a source index",
	40414:            "the replica refuses a source index's spec",
	40415:            "the replica does not know an option of a source index",
}

// indexRefusal says why the replica refuses the source's indexes for good,
// with what to do, or "" when a retry may help.
func indexRefusal(err error) string {
	if mongoerr.AuthFailed(err) {
		return jobCodes[codeAuthFailed]
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || isTransient(se) {
		return ""
	}
	for _, c := range se.ErrorCodes() {
		if why := indexCodes[c]; why != "" {
			if c != codeUnauthorized {
				why += ": create the indexes you want on the replica collection by hand, under the source's index names (an index of that name is then left as it is), and restart meilistream"
			}
			return why
		}
	}
	return ""
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

// writeErrorClass classifies one statement's write error.
func writeErrorClass(code int) class {
	switch {
	case transientCodes[code]:
		return transient
	case jobCodes[code] != "":
		return jobFailure
	}
	return perDocument
}

// wceClass classifies a write concern error: the writes were applied but
// are not known to be majority-committed. Only a write concern the replica
// set can never satisfy stops the job; anything else (a wtimeout, a
// step-down while waiting) is sent again.
func wceClass(code int) class {
	if code == 79 || code == 100 {
		return jobFailure
	}
	return transient
}

// outcome is what the replica made of one bulk write.
type outcome struct {
	// refused are the writes the replica refused for a reason of their
	// own, by index in the bulk's models.
	refused map[int]mongo.WriteError
	// all is set when the replica refused the whole command for one of
	// its documents: every write is named, and the engine bisects.
	all *sink.DocFailure
}

// classify turns the error of one bulk write into what the sink does with
// it: refused writes, a whole-command refusal for a document's sake, or an
// error (plain: the engine sends again; CONFIG_INVALID: the job stops).
// Every message it makes is redacted (see describe).
func (s *Sink) classify(err error) (outcome, error) {
	if err == nil {
		return outcome{}, nil
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		if wce := bwe.WriteConcernError; wce != nil && wceClass(wce.Code) == jobFailure {
			return outcome{}, s.jobError(jobCodes[wce.Code], err)
		}
		retry := bwe.WriteConcernError != nil || hasTransientLabel(bwe.Labels)
		refused := make(map[int]mongo.WriteError, len(bwe.WriteErrors))
		for _, we := range bwe.WriteErrors {
			switch writeErrorClass(we.Code) {
			case jobFailure:
				return outcome{}, s.jobError(jobCodes[we.Code], err)
			case transient:
				retry = true
			default:
				refused[we.Index] = we.WriteError
			}
		}
		if retry {
			// Applied or not, not known to be majority-committed: the whole
			// batch again (every write is idempotent).
			return outcome{}, s.retryError(err)
		}
		return outcome{refused: refused}, nil
	}
	if errors.Is(err, driver.ErrDocumentTooLarge) {
		// The driver's own refusal of a statement larger than a message.
		return outcome{all: &sink.DocFailure{Code: codeName(codeBSONObjectTooLarge), Message: "a write is larger than the replica takes in one message"}}, nil
	}
	if mongoerr.AuthFailed(err) {
		return outcome{}, s.jobError(jobCodes[codeAuthFailed], err)
	}
	var se mongo.ServerError
	if errors.As(err, &se) && !isTransient(se) {
		for _, c := range se.ErrorCodes() {
			if why := jobCodes[c]; why != "" {
				return outcome{}, s.jobError(why, err)
			}
			if why := commandJobCodes[c]; why != "" {
				return outcome{}, s.jobError(why, err)
			}
			if commandDocCodes[c] {
				return outcome{all: &sink.DocFailure{Code: codeName(c), Message: "the replica refused a write command for one of its documents: " + describe(err)}}, nil
			}
		}
	}
	// Network errors, timeouts, transient and unknown server answers: sent
	// again with backoff, and shown in /status and the log meanwhile.
	return outcome{}, s.retryError(err)
}

// jobError is the CONFIG_INVALID that stops the job.
func (s *Sink) jobError(why string, err error) error {
	return &errs.Error{Code: errs.ConfigInvalid, Job: s.job, Err: redacted(err), Setting: replicaURI,
		Msg: fmt.Sprintf("write to replica %s: %s", s.namespace(), why)}
}

// retryError is the plain error the engine retries with backoff.
func (s *Sink) retryError(err error) error {
	return fmt.Errorf("write to replica %s: %w", s.namespace(), redacted(err))
}

// codeNames names the server errors a replica returns, for the errors
// collection and messages (write errors carry a code but no codeName).
var codeNames = map[int]string{
	codeBadValue:           "BadValue",
	9:                      "FailedToParse",
	11:                     "UserNotFound",
	codeUnauthorized:       "Unauthorized",
	14:                     "TypeMismatch",
	15:                     "Overflow",
	codeAuthFailed:         "AuthenticationFailed",
	20:                     "IllegalOperation",
	52:                     "DollarPrefixedFieldName",
	53:                     "InvalidIdField",
	55:                     "InvalidDBRef",
	56:                     "EmptyFieldName",
	57:                     "DottedFieldName",
	59:                     "CommandNotFound",
	61:                     "ShardKeyNotFound",
	64:                     "WriteConcernFailed",
	codeImmutableField:     "ImmutableField",
	72:                     "InvalidOptions",
	73:                     "InvalidNamespace",
	79:                     "UnknownReplWriteConcern",
	100:                    "UnsatisfiableWriteConcern",
	115:                    "CommandNotSupported",
	121:                    "DocumentValidationFailure",
	166:                    "CommandNotSupportedOnView",
	283:                    "WouldChangeOwningShard",
	codeBSONObjectTooLarge: "BSONObjectTooLarge",
	codeDuplicateKey:       "DuplicateKey",
	16755:                  "CannotExtractGeoKeys",
	17262:                  "LanguageOverrideUnsupported",
	17280:                  "KeyTooLong",
	17419:                  "BSONObjectTooLarge",
	17420:                  "BSONObjectTooLarge",
	40414:                  "IDLFailedToParse",
	40415:                  "IDLUnknownField",
}

func codeName(code int) string {
	if n, ok := codeNames[code]; ok {
		return n
	}
	return "MongoError" + strconv.Itoa(code)
}

func docFailure(pos int, we mongo.WriteError) sink.DocFailure {
	return sink.DocFailure{Writes: []int{pos}, Code: codeName(we.Code), Message: refusal(we)}
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
